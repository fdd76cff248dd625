"""The embedded stack's pure parts: config, generated files, PID files, ports, process stop, errors."""
from __future__ import annotations

import base64
import os
import shlex
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors.config import WORKER_SETTINGS
from stack import connect, install, java, kafka, mariadb, services
from stack.cli import format_status, sh_quote
from stack.config import PORT_ENV, REPO_ROOT, StackConfig
from stack.process import (StackError, free_ports, port_in_use, running_pid, spawn, start_time, stop_pid,
                           wait_ready, write_pid_file)


@pytest.fixture
def clean_env(monkeypatch):
    for var in list(os.environ):
        if var.startswith("STREAM_OSC_"):
            monkeypatch.delenv(var)
    return monkeypatch


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_defaults(clean_env):
    config = StackConfig()
    assert (config.mysql_port, config.redis_port, config.kafka_port, config.controller_port,
            config.connect_port, config.kafka_sasl_port, config.kafka_relay_port,
            config.kafka_relay_advertised_port, config.target_mysql_port) == (13306, 16379, 19092, 19093, 18083, 19094,
                                                                              19096, 19097, 13307)
    assert config.run_dir == REPO_ROOT / ".run" and config.cache_dir == REPO_ROOT / ".cache"
    assert config.kafka_jars_dir == REPO_ROOT / ".cache/jars/kafka"
    assert config.plugin_dir == REPO_ROOT / ".cache/jars/plugins"
    assert config.pid_file("kafka") == REPO_ROOT / ".run/kafka.pid"
    assert config.log_file("kafka") == REPO_ROOT / ".run/kafka.log"
    env = config.env()
    env.pop("STREAM_OSC_TARGET_DSN", None)   # present while this checkout's target server runs (next test)
    assert env == {
        "STREAM_OSC_MYSQL_DSN": "mysql://osc:osc-local@127.0.0.1:13306/",
        "STREAM_OSC_KAFKA_BOOTSTRAP": "127.0.0.1:19092",
        "STREAM_OSC_CONNECT_URL": "http://127.0.0.1:18083",
        "STREAM_OSC_REDIS_URL": "redis://127.0.0.1:16379/0",
    }


def test_env_names_the_target_server_only_while_it_runs(clean_env, tmp_path):
    clean_env.setenv("STREAM_OSC_RUN_DIR", str(tmp_path))
    config = StackConfig()
    assert "STREAM_OSC_TARGET_DSN" not in config.env() and config.endpoints().target_dsn == ""
    write_pid_file(config.pid_file("mariadb-target"), os.getpid())   # a live process: "running"
    assert config.env()["STREAM_OSC_TARGET_DSN"] == "mysql://osc_target:osc-target-local@127.0.0.1:13307/"
    target = config.endpoints().target()
    assert (target.host, target.port, target.user, target.password) == ("127.0.0.1", 13307, "osc_target",
                                                                        "osc-target-local")
    assert "osc-target-local" not in repr(config.endpoints())
    config.pid_file("mariadb-target").write_text("999999999\n")    # a PID file left behind by a dead server
    assert "STREAM_OSC_TARGET_DSN" not in config.env()


def test_ports_and_folders_move_with_the_environment(clean_env, tmp_path):
    for i, var in enumerate(PORT_ENV.values()):
        clean_env.setenv(var, str(31000 + i))
    clean_env.setenv("STREAM_OSC_RUN_DIR", str(tmp_path / "run"))
    clean_env.setenv("STREAM_OSC_CACHE_DIR", str(tmp_path / "cache"))
    clean_env.setenv("STREAM_OSC_STACK_READY_TIMEOUT", "7")
    config = StackConfig()
    assert [getattr(config, field) for field in PORT_ENV] == [31000 + i for i in range(len(PORT_ENV))]
    assert config.run_dir == tmp_path / "run" and config.kafka_jars_dir == tmp_path / "cache/jars/kafka"
    assert config.ready_timeout == 7
    # the endpoints every command uses follow the moved stack
    loaded = StackConfig().endpoints()
    assert loaded.kafka_bootstrap == "127.0.0.1:31002" and loaded.mysql.port == 31000
    config.run_dir.mkdir()
    write_pid_file(config.pid_file("mariadb-target"), os.getpid())
    assert StackConfig().endpoints().target().port == 31000 + list(PORT_ENV).index("target_mysql_port")


def test_mariadb_option_file_has_what_capture_and_copy_need(clean_env):
    text = mariadb.render_config(StackConfig())
    server = text.split("[client]")[0]
    for setting in ("log_bin = binlog", "binlog_format = ROW", "binlog_row_image = FULL", "server_id = 1",
                    "log_slave_updates = ON", "binlog_expire_logs_seconds = 86400",
                    "innodb_autoinc_lock_mode = 2", "innodb_buffer_pool_size = 1G", "max_connections = 500",
                    "port = 13306", "bind-address = 127.0.0.1", "user = root",
                    "plugin_load_add = metadata_lock_info"):
        assert setting in server.splitlines(), setting
    assert f"socket = {REPO_ROOT / '.run/mariadb.sock'}" in server
    assert f"datadir = {REPO_ROOT / '.run/mariadb/data'}" in server
    assert f"tmpdir = {REPO_ROOT / '.run/mariadb/tmp'}" in server   # not /tmp, which cleaners empty


def test_target_server_option_file_has_its_own_port_folders_and_no_binlog(clean_env):
    server = mariadb.render_config(StackConfig(), mariadb.TARGET).split("[client]")[0].splitlines()
    for setting in ("port = 13307", "server_id = 2", "innodb_autoinc_lock_mode = 2",
                    "plugin_load_add = metadata_lock_info", "bind-address = 127.0.0.1",
                    f"datadir = {REPO_ROOT / '.run/mariadb-target/data'}",
                    f"socket = {REPO_ROOT / '.run/mariadb-target.sock'}",
                    f"pid-file = {REPO_ROOT / '.run/mariadb-target/mariadbd.pid'}"):
        assert setting in server, setting
    assert not [line for line in server if line.startswith(("log_bin", "binlog", "log_slave"))]
    source = mariadb.render_config(StackConfig()).splitlines()
    assert "port = 13306" in source and "server_id = 1" in source


def test_target_server_account_has_only_what_the_tool_needs(clean_env):
    sql = mariadb.render_bootstrap_sql(StackConfig(), mariadb.TARGET)
    assert "CREATE USER IF NOT EXISTS 'osc_target'@'%' IDENTIFIED BY 'osc-target-local';" in sql
    grants = [line for line in sql.splitlines() if line.startswith("GRANT")]
    assert grants == [f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX, TRIGGER, CREATE TEMPORARY "
                      f"TABLES, LOCK TABLES, PROCESS ON *.* TO 'osc_target'@{host};" for host in ("'%'", "'localhost'")]
    assert "'osc'" not in sql


def test_mariadb_users_sql_quotes_the_password(clean_env):
    config = StackConfig(mysql_password="it's\\x")
    sql = mariadb.render_bootstrap_sql(config)
    assert sql.startswith("FLUSH PRIVILEGES;")
    assert "CREATE USER IF NOT EXISTS 'osc'@'%' IDENTIFIED BY 'it\\'s\\\\x';" in sql
    assert "GRANT ALL PRIVILEGES ON *.* TO 'osc'@'localhost' WITH GRANT OPTION;" in sql


def test_kafka_properties_single_kraft_node(clean_env):
    props = properties(kafka.render_properties(StackConfig()))
    assert props["process.roles"] == "broker,controller" and props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:19092,RELAY://127.0.0.1:19096,"
                                  "CONTROLLER://127.0.0.1:19093,SASL_PLAINTEXT://127.0.0.1:19094")
    # a client bootstrapped on the relay listener is sent to the relay's own port for everything
    assert props["advertised.listeners"] == ("PLAINTEXT://127.0.0.1:19092,RELAY://127.0.0.1:19097,"
                                             "SASL_PLAINTEXT://127.0.0.1:19094")
    assert props["log.dirs"] == str(REPO_ROOT / ".run/kafka/data")
    assert props["group.initial.rebalance.delay.ms"] == "0"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor", "share.coordinator.state.topic.replication.factor"):
        assert props[key] == "1", key


def test_cluster_id_has_kafkas_format():
    ids = {kafka.new_cluster_id() for _ in range(500)}   # about 8 of 500 raw ids would start with "-"
    assert len(ids) == 500
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_connect_worker_properties(clean_env):
    props = properties(connect.render_properties(StackConfig()))
    for key, value in WORKER_SETTINGS.items():  # what connectors/ and docker-compose rely on
        assert props[key] == value, key
    assert props["bootstrap.servers"] == "127.0.0.1:19092"
    assert props["group.id"] == "stream-osc-connect"
    assert props["listeners"] == "http://127.0.0.1:18083"
    assert props["plugin.path"] == str(REPO_ROOT / ".cache/jars/plugins")
    assert props["plugin.discovery"] == "service_load"
    for key in ("config", "offset", "status"):
        assert props[f"{key}.storage.replication.factor"] == "1"
    assert len({props["config.storage.topic"], props["offset.storage.topic"], props["status.storage.topic"]}) == 3
    # the file provider reads only the folder the tool writes connector passwords into
    assert props["config.providers.file.param.allowed.paths"] == str(REPO_ROOT / ".run/connect/secrets")


def test_stack_secrets_folder_is_the_default_only_for_the_stacks_own_connect_worker(clean_env):
    config = StackConfig()
    assert config.endpoints().connector_secrets_dir == str(config.connect_secrets_dir)
    clean_env.setenv("STREAM_OSC_CONNECT_URL", "http://connect.prod:8083")
    assert config.endpoints().connector_secrets_dir == ""
    clean_env.setenv("STREAM_OSC_CONNECTOR_PASSWORD", "${file:/etc/connect/db.properties:password}")
    assert config.endpoints().connector_password == "${file:/etc/connect/db.properties:password}"


def test_stack_prepares_an_owner_only_secrets_folder(clean_env, tmp_path):
    clean_env.setenv("STREAM_OSC_RUN_DIR", str(tmp_path / "run"))
    config = StackConfig()
    connect.prepare(config)
    assert stat.S_IMODE(os.stat(config.connect_secrets_dir).st_mode) == 0o700


def test_java_command_uses_the_jar_folder_and_heap(clean_env, tmp_path):
    cmd = java.java_command(StackConfig(), "kafka.Kafka", tmp_path / "log4j2.properties", "server.properties")
    assert "-Xmx1g" in cmd and f"-Dlog4j2.configurationFile={tmp_path / 'log4j2.properties'}" in cmd
    assert cmd[cmd.index("-cp") + 1] == f"{REPO_ROOT / '.cache/jars/kafka'}/*"
    assert cmd[-2:] == ["kafka.Kafka", "server.properties"]


def test_missing_java_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(StackError) as err:
        java.java_binary()
    assert err.value.user_facing
    assert "Java is missing" in str(err.value) and "apt-get install default-jre-headless" in str(err.value)
    assert "\n" not in str(err.value)


def test_jars_not_installed_in_an_empty_cache(clean_env, tmp_path):
    clean_env.setenv("STREAM_OSC_CACHE_DIR", str(tmp_path))
    config = StackConfig()
    assert not install.installed(config)
    with pytest.raises(StackError, match="stream-osc stack install"):
        java.require_jars(config)
    for jar_set in install.JAR_SETS:  # a stamp from other versions is stale
        target = jar_set.target(config)
        target.mkdir(parents=True)
        (target / install.STAMP).write_text(jar_set.stamp().replace("4.1.1", "4.0.0"))
    assert not install.installed(config)


def test_unknown_service_name():
    with pytest.raises(StackError, match="unknown stack service"):
        services.select(["kafka", "zookeeper"])
    assert [s.name for s in services.select(["connect", "mariadb"])] == ["mariadb", "connect"]


def test_target_server_is_started_only_when_asked_for():
    assert [s.name for s in services.select()] == ["mariadb", "redis", "kafka", "connect"]
    assert [s.name for s in services.select(target_server=True)] == ["mariadb", "mariadb-target", "redis", "kafka",
                                                                     "connect"]
    assert [s.name for s in services.select(["connect", "mariadb-target"])] == ["mariadb-target", "connect"]
    assert services.TARGET.ports(StackConfig()) == [(StackConfig().target_mysql_port, "mariadb-target")]


def test_status_lists_the_target_server_only_while_it_runs(clean_env, tmp_path):
    clean_env.setenv("STREAM_OSC_RUN_DIR", str(tmp_path))
    config = StackConfig()
    assert [row.name for row in services.status(config, probe=False)] == ["mariadb", "redis", "kafka", "connect"]
    write_pid_file(config.pid_file("mariadb-target"), os.getpid())
    rows = services.status(config, probe=False)
    assert [(row.name, row.pid) for row in rows][:2] == [("mariadb", None), ("mariadb-target", os.getpid())]


def test_port_in_use_sees_listening_and_bound_sockets():
    port = free_ports(1)[0]
    assert not port_in_use("127.0.0.1", port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        assert port_in_use("127.0.0.1", port)  # bound, not listening
        sock.listen()
        assert port_in_use("127.0.0.1", port)


def test_pid_file_recognises_only_the_same_live_process(tmp_path):
    pid_file = tmp_path / "x.pid"
    write_pid_file(pid_file, os.getpid())
    assert running_pid(pid_file) == os.getpid()
    pid_file.write_text(f"{os.getpid()}\n1\n")  # same PID, other start time: a recycled PID
    assert running_pid(pid_file) is None
    child = subprocess.Popen(["true"])
    child.wait()
    pid_file.write_text(f"{child.pid}\n")
    assert running_pid(pid_file) is None
    pid_file.write_text("garbage")
    assert running_pid(pid_file) is None
    assert running_pid(tmp_path / "missing.pid") is None


def _spawn(tmp_path: Path, script: str) -> int:
    return spawn(["sh", "-c", script], tmp_path / "svc.log", tmp_path / "svc.pid", cwd=tmp_path)


def test_stop_takes_the_whole_process_group(tmp_path):
    pid = _spawn(tmp_path, "sleep 60 & echo $! > child; wait")
    deadline = time.monotonic() + 5
    while not (tmp_path / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int((tmp_path / "child").read_text())
    assert start_time(pid) and start_time(child)
    assert stop_pid(pid, timeout=5) is False
    assert start_time(pid) is None and start_time(child) is None


def test_stop_kills_what_ignores_sigterm(tmp_path):
    pid = _spawn(tmp_path, "trap '' TERM; echo trap-$((1 + 1)); sleep 60")  # the log's header has no "trap-2"
    wait_ready("svc", pid, lambda: "trap-2" in (tmp_path / "svc.log").read_text(), 5, tmp_path / "svc.log",
               interval=0.02)
    started = time.monotonic()
    assert stop_pid(pid, timeout=0.5) is True
    assert start_time(pid) is None and time.monotonic() - started < 5


def test_exit_during_start_names_the_service_and_its_log(tmp_path):
    pid = _spawn(tmp_path, "echo 'bad option --frobnicate' >&2; exit 3")
    with pytest.raises(StackError) as err:
        wait_ready("redis", pid, lambda: False, 10, tmp_path / "svc.log", interval=0.02)
    message = str(err.value)
    assert message.startswith(f"redis exited during start-up; see {tmp_path / 'svc.log'}")
    assert "bad option --frobnicate" in message


def test_timeout_names_the_service_and_its_log(tmp_path):
    pid = _spawn(tmp_path, "echo still warming up; sleep 60")
    try:
        with pytest.raises(StackError) as err:
            wait_ready("connect", pid, lambda: False, 0.3, tmp_path / "svc.log", interval=0.02)
        assert str(err.value).startswith(f"connect was not ready after 0 s; see {tmp_path / 'svc.log'}")
        assert "still warming up" in str(err.value)
    finally:
        stop_pid(pid, timeout=2)


def test_env_lines_are_shell_safe():
    for value in ("plain", "it's", "a b$c`d`", ""):
        assert shlex.split(f"export K={sh_quote(value)}") == ["export", f"K={value}"]


def test_status_lines():
    stopped = services.ServiceStatus("kafka", None, [(19092, "kafka"), (19093, "kafka controller")], Path("k.log"))
    assert format_status(stopped).split() == ["kafka", "stopped", "port", "19092,19093"]
    running = services.ServiceStatus("redis", 42, [(16379, "redis")], Path("r.log"), rss=12 * 2**20, ready=True)
    assert format_status(running).split()[:8] == ["redis", "running", "pid", "42", "port", "16379", "rss", "12"]
    assert "ready" in format_status(running).split()


def test_cli_registers_stack_commands(capsys, monkeypatch, tmp_path):
    from cli.main import main
    monkeypatch.setenv("STREAM_OSC_RUN_DIR", str(tmp_path))   # no target server runs there
    assert main(["stack", "env"]) == 0
    assert capsys.readouterr().out.count("export STREAM_OSC_") == 4
    with pytest.raises(SystemExit):
        main(["stack", "nope"])


def test_cli_reports_stack_errors_as_one_line(capsys, monkeypatch, tmp_path):
    from cli.main import main
    monkeypatch.setenv("STREAM_OSC_RUN_DIR", str(tmp_path))
    assert main(["stack", "up", "zookeeper"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stream-osc: error: unknown stack service(s): zookeeper") and err.count("\n") == 1


def test_python_module_entry(tmp_path):
    result = subprocess.run([sys.executable, "-m", "cli.main", "stack", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for word in ("install", "up", "down", "status", "env"):
        assert word in result.stdout
