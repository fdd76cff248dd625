"""The embedded stack as a user drives it: `stream-osc stack up|down|status|env` in subprocesses.

The session stack (fixture `stack_config`) is only looked at; everything that starts or stops
services does so on a side stack with its own run dir and ports.
"""
from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.db import connect, query, scalar
from core.endpoints import MySQLAddress, parse_mysql_dsn
from stack import services
from stack.config import PORT_ENV, StackConfig
from stack.process import free_ports, running_pid, start_time

pytestmark = pytest.mark.integration

NAMES = ["mariadb", "redis", "kafka", "connect"]
TARGET = "mariadb-target"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run `stream-osc ARGS` in a subprocess (as a user would), capturing its output."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def side_env(run_dir: Path, **extra: str) -> dict[str, str]:
    """Environment of a side stack: its own run dir and free ports, no endpoint variables (the jar cache is
    shared: STREAM_OSC_CACHE_DIR stays)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_OSC_") or k == "STREAM_OSC_CACHE_DIR"}
    env["STREAM_OSC_RUN_DIR"] = str(run_dir)
    for var, port in zip(PORT_ENV.values(), free_ports(len(PORT_ENV))):
        env[var] = str(port)
    env.update(extra)
    return env


def pids(run_dir: Path, names: list[str] = NAMES) -> dict[str, int | None]:
    return {name: running_pid(run_dir / f"{name}.pid") for name in names}


def exported(result: subprocess.CompletedProcess) -> dict[str, str]:
    """The variables of `stack env`'s output, parsed as a shell would."""
    assert result.returncode == 0, result.stderr
    parsed = {}
    for line in result.stdout.splitlines():
        word, assignment = shlex.split(line)
        assert word == "export"
        key, value = assignment.split("=", 1)
        parsed[key] = value
    return parsed


def answers_as_osc_target(address: MySQLAddress) -> None:
    """The target server answers at `address` as its own account, without the source's binlog, and lets it make,
    lock and drop a table."""
    conn = connect(address)
    try:
        assert scalar(conn, "SELECT CURRENT_USER()") == "osc_target@%"
        assert scalar(conn, "SELECT @@log_bin") == 0
        query(conn, "CREATE DATABASE IF NOT EXISTS stack_target_check")
        query(conn, "CREATE TABLE IF NOT EXISTS stack_target_check.t (id INT PRIMARY KEY)")
        query(conn, "LOCK TABLES stack_target_check.t WRITE")
        query(conn, "UNLOCK TABLES")
        query(conn, "DROP DATABASE stack_target_check")
    finally:
        conn.close()


def processes_of(run_dir: Path, env: dict[str, str]) -> list[str]:
    """Live processes belonging to a side stack: its run dir in their command line, or its Redis port."""
    marks = [str(run_dir), f"127.0.0.1:{env['STREAM_OSC_STACK_REDIS_PORT']}"]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or start_time(int(entry.name)) is None:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(mark in cmdline for mark in marks) and int(entry.name) != os.getpid():
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result
    return result.stderr.splitlines()[0]


# --- the session stack -----------------------------------------------------------------------------

def test_up_again_is_a_noop(stack_config):
    if stack_config is None:
        pytest.skip("endpoints come from STREAM_OSC_* variables, not the embedded stack")
    before = {row.name: row.pid for row in services.status(stack_config, probe=False)}
    result = cli("stack", "up")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in NAMES:
        assert any(line.startswith(name) and "already up" in line for line in lines), result.stdout
    assert "started" not in result.stdout
    assert {row.name: row.pid for row in services.status(stack_config, probe=False)} == before


def test_up_with_the_target_server_again_is_a_noop(stack_config):
    if stack_config is None:
        pytest.skip("endpoints come from STREAM_OSC_* variables, not the embedded stack")
    result = cli("stack", "up", "--target-server")
    assert result.returncode == 0, result.stderr
    for name in [*NAMES, TARGET]:
        assert any(line.startswith(f"{name} ") and "already up" in line for line in result.stdout.splitlines()), \
            result.stdout


def test_target_server_answers_as_osc_target_at_the_printed_dsn(stack_config, endpoints):
    """The session's target server (migrations to another server) is the DSN `stack env` prints and the tests'
    endpoints carry."""
    if stack_config is None and not endpoints.target_dsn:
        pytest.skip("STREAM_OSC_* endpoints without STREAM_OSC_TARGET_DSN")
    if stack_config is not None:
        dsn = exported(cli("stack", "env"))["STREAM_OSC_TARGET_DSN"]
        assert parse_mysql_dsn(dsn).port == stack_config.target_mysql_port
        assert endpoints.target_dsn == dsn
    answers_as_osc_target(endpoints.target())


def test_env_is_parseable_and_matches_the_config(stack_config):
    result = cli("stack", "env")
    parsed = exported(result)
    assert parsed == StackConfig().env()
    # and a shell that evals it ends up with the same values
    shell = subprocess.run(["bash", "-c", 'eval "$1"; env', "-", result.stdout],
                           capture_output=True, text=True, check=True)
    seen = dict(line.split("=", 1) for line in shell.stdout.splitlines() if line.startswith("STREAM_OSC_"))
    assert {k: seen[k] for k in parsed} == parsed


# --- a side stack: starts and stops of its own -----------------------------------------------------

@pytest.fixture(scope="module")
def side(tmp_path_factory):
    """Env of a side stack (own ports and run dir); whatever is left running is stopped at the end."""
    run_dir = tmp_path_factory.mktemp("side") / "run"
    env = side_env(run_dir)
    yield run_dir, env
    cli("stack", "down", env=env)
    assert processes_of(run_dir, env) == []


@pytest.mark.slow   # a whole stack started without the plugin
def test_connect_without_debezium_fails_naming_its_log_and_leaves_nothing_running(side, tmp_path):
    run_dir, env = side
    empty_plugins = tmp_path / "no-plugins"
    empty_plugins.mkdir()
    result = cli("stack", "up", env={**env, "STREAM_OSC_PLUGIN_DIR": str(empty_plugins)})
    line = one_error_line(result)
    log = run_dir / "connect.log"
    assert line.startswith("stream-osc: error: connect: ")
    assert "io.debezium.connector.mariadb.MariaDbConnector" in line and str(log) in line
    assert len(result.stderr.splitlines()) > 5  # the last lines of the log follow
    # the services before it came up, and went down again with the failed worker
    assert "mariadb  started" in result.stdout and "kafka    started" in result.stdout
    assert pids(run_dir) == {name: None for name in NAMES}
    assert not any((run_dir / f"{name}.pid").exists() for name in NAMES)
    assert processes_of(run_dir, env) == []


def test_up_twice_then_down_leaves_nothing_and_up_again_works(side):
    run_dir, env = side
    first = cli("stack", "up", env=env)
    assert first.returncode == 0, first.stderr
    running = pids(run_dir)
    assert all(running.values()), running

    second = cli("stack", "up", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("already up") == 4 and " started " not in second.stdout
    assert pids(run_dir) == running

    status = cli("stack", "status", env=env)
    assert status.returncode == 0
    assert [line.split()[:2] for line in status.stdout.splitlines()] == [[n, "running"] for n in NAMES]

    down = cli("stack", "down", env=env)
    assert down.returncode == 0, down.stderr
    for name, pid in running.items():
        assert start_time(pid) is None, f"{name} (pid {pid}) is still alive after down"
        assert not (run_dir / f"{name}.pid").exists()
    assert processes_of(run_dir, env) == []
    status = cli("stack", "status", env=env)
    assert status.returncode == 0
    assert [line.split()[:2] for line in status.stdout.splitlines()] == [[n, "stopped"] for n in NAMES]

    again = cli("stack", "up", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count(" started ") == 4
    assert all(pids(run_dir).values())
    assert cli("stack", "down", env=env).returncode == 0
    assert processes_of(run_dir, env) == []


def test_target_server_starts_only_when_asked_and_goes_down_with_the_rest(side):
    run_dir, env = side
    plain = cli("stack", "up", "mariadb", env=env)
    assert plain.returncode == 0, plain.stderr
    assert TARGET not in plain.stdout and pids(run_dir, [TARGET]) == {TARGET: None}
    assert "STREAM_OSC_TARGET_DSN" not in exported(cli("stack", "env", env=env))
    assert TARGET not in cli("stack", "status", env=env).stdout

    up = cli("stack", "up", "--target-server", "mariadb", env=env)
    assert up.returncode == 0, up.stderr
    assert "mariadb  running" in up.stdout and f"{TARGET} started" in up.stdout
    target_pid = pids(run_dir, [TARGET])[TARGET]
    assert target_pid and (run_dir / TARGET / "data").is_dir()
    status = [line.split()[:2] for line in cli("stack", "status", env=env).stdout.splitlines()]
    assert status[:2] == [["mariadb", "running"], [TARGET, "running"]]
    dsn = exported(cli("stack", "env", env=env))["STREAM_OSC_TARGET_DSN"]
    assert dsn == f"mysql://osc_target:osc-target-local@127.0.0.1:{env['STREAM_OSC_STACK_TARGET_MYSQL_PORT']}/"
    answers_as_osc_target(parse_mysql_dsn(dsn))

    down = cli("stack", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert f"{TARGET} stopped" in down.stdout
    assert start_time(target_pid) is None and not (run_dir / f"{TARGET}.pid").exists()
    assert processes_of(run_dir, env) == []
    assert "STREAM_OSC_TARGET_DSN" not in exported(cli("stack", "env", env=env))


# --- refusals before anything starts ---------------------------------------------------------------

def test_port_in_use_gives_one_clear_line(tmp_path):
    env = side_env(tmp_path / "run")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env["STREAM_OSC_STACK_KAFKA_PORT"] = str(port)
        result = cli("stack", "up", env=env)
    assert result.stderr == f"stream-osc: error: port {port} (kafka) is already in use by another process\n"
    assert result.returncode == 2
    assert not list((tmp_path / "run").glob("*.pid"))  # nothing was started


def test_target_port_in_use_gives_one_clear_line_and_starts_nothing(tmp_path):
    env = side_env(tmp_path / "run")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        env["STREAM_OSC_STACK_TARGET_MYSQL_PORT"] = str(port)
        result = cli("stack", "up", "--target-server", env=env)
    assert result.stderr == f"stream-osc: error: port {port} ({TARGET}) is already in use by another process\n"
    assert result.returncode == 2
    assert not list((tmp_path / "run").glob("*.pid"))  # nothing was started, not even the usual four


def test_missing_java_says_how_to_install_it(tmp_path):
    bin_dir = tmp_path / "bin"  # everything the stack needs except java
    bin_dir.mkdir()
    for tool in ("mariadbd", "mariadb-install-db", "redis-server", "openssl"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = side_env(tmp_path / "run", PATH=str(bin_dir))
    env.pop("JAVA_HOME", None)
    result = cli("stack", "up", env=env)
    line = one_error_line(result)
    assert len(result.stderr.splitlines()) == 1
    assert line.startswith("stream-osc: error: Java is missing")
    assert "make setup" in line and "apt-get install default-jre-headless" in line
    assert not list((tmp_path / "run").glob("*.pid"))
