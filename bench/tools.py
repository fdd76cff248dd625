"""The contenders: each runs the same ALTER on the benchmark table once and says how it went."""
from __future__ import annotations

import compileall
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from bench.credentials import client_option_file
from bench.sysbench import BenchError
from bench.table import BenchTable
from core.db import connect, qualified, query, scalar
from core.endpoints import ENV_KEYS, OPTIONAL_KEYS, OPTIONS_START, Endpoints, MySQLAddress

CODE_ROOT = Path(__file__).resolve().parent.parent   # the checkout whose stream-osc is measured


def compile_measured_code() -> None:
    """Write the measured checkout's bytecode, as an installed package has it: with PYTHONDONTWRITEBYTECODE set,
    every stream-osc process would otherwise compile its modules again (0.2 s of each run here). The packages
    are those pyproject.toml installs."""
    with open(CODE_ROOT / "pyproject.toml", "rb") as file:
        patterns = tomllib.load(file)["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in sorted({p.rstrip("*") for p in patterns}):
        compileall.compile_dir(CODE_ROOT / package, quiet=1)


@dataclass
class Outcome:
    """One tool run: wall time, whether it finished (and why not), tool-specific figures."""

    seconds: float
    finished: bool
    reason: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolRun:
    """Everything a tool needs for one run."""

    endpoints: Endpoints
    table: BenchTable
    alter: str
    limit_s: float
    gh_ost: str | None
    stream_osc_args: tuple[str, ...] = ()


# server-side SQL -------------------------------------------------------------------------------------
def _sql_with_limit(run: ToolRun, statements: list[str]) -> Outcome:
    """Run statements in one session; KILL the session if they outlast the time limit."""
    conn = connect(run.endpoints.mysql)
    session = scalar(conn, "SELECT CONNECTION_ID()")
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        killer = connect(run.endpoints.mysql)
        try:
            query(killer, f"KILL {int(session)}")
        finally:
            killer.close()

    timer = threading.Timer(run.limit_s, kill)
    started = time.monotonic()
    timer.start()
    try:
        for sql in statements:
            query(conn, sql)
        return Outcome(time.monotonic() - started, True)
    except pymysql.err.MySQLError as exc:
        reason = f"time limit {run.limit_s:.0f} s" if timed_out.is_set() else f"server refused: {exc.args[-1]}"
        return Outcome(time.monotonic() - started, False, reason)
    finally:
        timer.cancel()
        conn.close()


def server_copy(run: ToolRun) -> Outcome:
    """CREATE TABLE … LIKE, ALTER the empty copy, one INSERT … SELECT, RENAME: the limit of any copy."""
    t, db = run.table, run.table.database
    new, old = qualified(db, f"_{t.table}_new"), qualified(db, f"_{t.table}_old")
    conn = connect(run.endpoints.mysql)
    try:
        cols = ", ".join(f"`{c}`" for (c,) in query(
            conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                  "ORDER BY ORDINAL_POSITION", (db, t.table)))
    finally:
        conn.close()
    return _sql_with_limit(run, [f"CREATE TABLE {new} LIKE {t.name}", f"ALTER TABLE {new} {run.alter}",
                                 f"INSERT INTO {new} ({cols}) SELECT {cols} FROM {t.name}",
                                 f"RENAME TABLE {t.name} TO {old}, {new} TO {t.name}"])


def alter_copy(run: ToolRun) -> Outcome:
    """ALTER TABLE … ALGORITHM=COPY (blocks writes for its whole duration)."""
    return _sql_with_limit(run, [f"ALTER TABLE {run.table.name} {run.alter}, ALGORITHM=COPY"])


def online_ddl(run: ToolRun) -> Outcome:
    """The server's online rebuild: ALTER TABLE … ALGORITHM=INPLACE, LOCK=NONE."""
    return _sql_with_limit(run, [f"ALTER TABLE {run.table.name} {run.alter}, ALGORITHM=INPLACE, LOCK=NONE"])


# external programs -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcessResult:
    """An external tool's exit: code (None when stopped at the time limit), peak RSS, CPU seconds, its output."""

    seconds: float
    code: int | None
    peak_rss_mb: float
    output: str
    cpu_s: float = 0.0

    @property
    def tail(self) -> str:
        return "\n".join(self.output.strip().splitlines()[-4:])


def run_process(cmd: list[str], limit_s: float, env: dict[str, str] | None = None,
                on_tick: Callable[[], None] | None = None) -> ProcessResult:
    """Run `cmd` in its own process group; stop it at the time limit; peak RSS and CPU time from wait4's
    rusage."""
    with tempfile.TemporaryFile("w+") as out:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        code: int | None = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - started > limit_s:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    _, status, usage = _wait4_within(proc.pid, 20.0)
                except TimeoutError:
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, status, usage = os.wait4(proc.pid, 0)
                break
            if on_tick:
                on_tick()
            time.sleep(0.2)
        proc.returncode = code if code is not None else -1   # reaped here, not by Popen
        seconds = time.monotonic() - started
        out.seek(0)
        output = out.read()
    return ProcessResult(seconds, code, usage.ru_maxrss / 1024, output, usage.ru_utime + usage.ru_stime)


def _wait4_within(pid: int, timeout: float) -> tuple[int, int, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = os.wait4(pid, os.WNOHANG)
        if result[0]:
            return result
        time.sleep(0.1)
    raise TimeoutError


def _outcome(result: ProcessResult, run: ToolRun, name: str) -> Outcome:
    figures = {"peak_rss_mb": round(result.peak_rss_mb, 1),
               "cpu_cores_tool": round(result.cpu_s / result.seconds, 2) if result.seconds else 0.0}
    if result.code is None:
        return Outcome(result.seconds, False, f"time limit {run.limit_s:.0f} s", figures)
    if result.code != 0:
        return Outcome(result.seconds, False, f"{name} exit {result.code}: {result.tail}", figures)
    return Outcome(result.seconds, True, None, figures)


def pt_osc(run: ToolRun) -> Outcome:
    """pt-online-schema-change (Debian's percona-toolkit) with its default throttling."""
    binary = shutil.which("pt-online-schema-change")
    if binary is None:
        return Outcome(0.0, False, "pt-online-schema-change is not installed (Debian package percona-toolkit)")
    addr = run.endpoints.mysql
    with client_option_file(addr) as option_file:   # DSN F=: user and password from an owner-only file
        dsn = f"F={option_file},h={addr.host},P={addr.port},D={run.table.database},t={run.table.table}"
        cmd = [binary, "--alter", run.alter, "--execute", "--recursion-method=none", "--no-check-alter", dsn]
        return _outcome(run_process(cmd, run.limit_s), run, "pt-online-schema-change")


PT_OSC_TRIGGER_PREFIX = "pt_osc_"


@contextmanager
def pt_osc_triggers_left(run: ToolRun) -> Iterator[None]:
    """pt-online-schema-change's copy run to its end without the swap, its triggers left on the table writing each
    change into its new table (`--no-swap-tables --no-drop-triggers --no-drop-new-table`); both dropped after."""
    binary = shutil.which("pt-online-schema-change")
    if binary is None:
        raise BenchError("pt-online-schema-change is not installed (Debian package percona-toolkit)")
    addr, table = run.endpoints.mysql, run.table
    try:
        with client_option_file(addr) as option_file:
            dsn = f"F={option_file},h={addr.host},P={addr.port},D={table.database},t={table.table}"
            cmd = [binary, "--alter", run.alter, "--execute", "--recursion-method=none", "--no-check-alter",
                   "--no-swap-tables", "--no-drop-triggers", "--no-drop-new-table", dsn]
            result = run_process(cmd, run.limit_s)
        if result.code != 0:
            raise BenchError(f"pt-online-schema-change exit {result.code}: {result.tail}")
        yield
    finally:
        _drop_pt_osc_leftovers(addr, table)


def _drop_pt_osc_leftovers(addr: MySQLAddress, table: BenchTable) -> None:
    """Drop the triggers pt-osc left on the table and its new table `_<table>_new`."""
    conn = connect(addr)
    try:
        for (name,) in query(conn, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA=%s "
                                   "AND EVENT_OBJECT_TABLE=%s AND TRIGGER_NAME LIKE %s",
                             (table.database, table.table, PT_OSC_TRIGGER_PREFIX + "%")):
            query(conn, f"DROP TRIGGER {qualified(table.database, name)}")
        query(conn, f"DROP TABLE IF EXISTS {qualified(table.database, '_' + table.table + '_new')}")
    finally:
        conn.close()


def gh_ost(run: ToolRun) -> Outcome:
    """gh-ost from the binary named by STREAM_OSC_BENCH_GH_OST (MariaDB: on the primary, no MDL check)."""
    if not run.gh_ost or not Path(run.gh_ost).is_file():
        return Outcome(0.0, False, f"gh-ost binary not found at {run.gh_ost!r}")
    addr = run.endpoints.mysql
    with client_option_file(addr) as option_file:   # --conf: user and password from its [client] section
        cmd = [run.gh_ost, f"--conf={option_file}", f"--host={addr.host}", f"--port={addr.port}",
               f"--database={run.table.database}", f"--table={run.table.table}",
               f"--alter={run.alter}", "--allow-on-master", "--skip-metadata-lock-check", "--assume-rbr",
               "--initially-drop-ghost-table", "--initially-drop-old-table", "--ok-to-drop-table", "--execute"]
        return _outcome(run_process(cmd, run.limit_s), run, "gh-ost")


def stream_osc_command(run: ToolRun) -> tuple[list[str], dict[str, str]]:
    """`stream-osc migrate … --quiet` (logs at INFO) with the endpoints in its environment.

    It runs as `python -m cli.main` from the checkout the benchmark imports (the one whose commit the report
    names), not an installed `stream-osc` script, which may belong to another checkout."""
    env = dict(os.environ)
    env.update({var: getattr(run.endpoints, key) for key, var in {**ENV_KEYS, **OPTIONAL_KEYS}.items()
                if getattr(run.endpoints, key)})
    if OPTIONS_START.search(env["STREAM_OSC_MYSQL_DSN"]) is None:
        # sysbench and pt-osc connect in clear; so does stream-osc here, unless the DSN says otherwise (its
        # default, ssl-mode=preferred, would encrypt on a server that offers TLS, as the embedded one does)
        env["STREAM_OSC_MYSQL_DSN"] += "?ssl-mode=disabled"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CODE_ROOT), env.get("PYTHONPATH")) if p)
    table = f"{run.table.database}.{run.table.table}"
    return [sys.executable, "-m", "cli.main", "--log-level", "INFO", "migrate", "--table", table, "--alter",
            run.alter, "--quiet", *run.stream_osc_args], env


def stream_osc_abort(run: ToolRun) -> None:
    """Remove what an unfinished stream-osc run left (connector, topics, state)."""
    cmd, env = stream_osc_command(run)
    subprocess.run([*cmd[:3], "abort", "--table", f"{run.table.database}.{run.table.table}"], env=env,
                   capture_output=True, timeout=120)
