"""Notifications of real migrations (`--hook DIR`, `--notify-url URL`): hook executables and a local HTTP receiver
hear the events in order with their figures, and no password reaches a hook's environment, a POST or the log; a
failing or hanging hook, or a URL nobody answers, does not stop the migration; a before-cutover hook that exits
non-zero postpones the swap, the new table kept in sync, until it exits 0; a stop with an error and an abort are
told, each once, by the coordinator or by `stream-osc abort` when no coordinator runs."""
from __future__ import annotations

import base64
import http.server
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.db import query, scalar
from core.spec import helper_table_name
from stack.config import StackConfig
from stack.process import free_ports
from tests.integration.helpers import (cli, fresh_table, latest_migration_id, leftovers, migration_row,
                                       new_migration_row, start_cli, table_columns, table_is_original, wait_for)

pytestmark = pytest.mark.integration

DB = "notify"
ALTER = "ADD COLUMN flag INT NULL"
ROWS = 3_000
URL_LOGIN = ("hooks", "Hook-Url-Secret")
# passwords of the process's environment beside the stack's own DSNs: none may reach a hook or a POST
APP_ENV = {"APP_DB_PASSWORD": "App-Secret-Value", "DATABASE_URL": "mysql://app:Url-Secret-Value@db.internal/app"}
TOOL_VARIABLES = ("STREAM_OSC_MYSQL_DSN", "STREAM_OSC_TARGET_DSN", "STREAM_OSC_REDIS_URL", "STREAM_OSC_CONNECT_URL",
                  "STREAM_OSC_KAFKA_BOOTSTRAP", *APP_ENV)

# a hook that records its name and its whole environment (NUL-separated: a value may hold anything else)
RECORDING = '#!/bin/sh\nprintf "=== %s\\0" "$(basename "$0")" >> {log}\nenv -0 >> {log}\n'


def passwords() -> list[str]:
    config = StackConfig()
    return [config.mysql_password, config.target_mysql_password, URL_LOGIN[1], "App-Secret-Value",
            "Url-Secret-Value"]


class Receiver:
    """A local HTTP receiver on a free port, in a thread: every POST's path, headers and JSON body."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        posts = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                posts.append({"path": self.path, "headers": dict(self.headers), "raw": body,
                              "body": json.loads(body)})
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{URL_LOGIN[0]}:{URL_LOGIN[1]}@127.0.0.1:{self.server.server_address[1]}/services/T0/B0/x"

    def events(self) -> list[str]:
        return [post["body"]["event"] for post in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.server.shutdown()
    made.server.server_close()


class Hooks:
    """A hook directory of real executables: each named one records its name and environment in one file."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir()
        self.log = directory.parent / "hooks-ran"
        self.log.touch()

    def add(self, name: str, then: str = "") -> None:
        path = self.dir / name
        path.write_text(RECORDING.format(log=self.log) + then)
        path.chmod(0o755)

    def runs(self) -> list[tuple[str, dict[str, str]]]:
        """(hook, environment) of each run so far, in order."""
        runs: list[tuple[str, dict[str, str]]] = []
        for entry in self.log.read_bytes().decode().split("\0"):
            if entry.startswith("=== "):
                runs.append((entry[4:], {}))
            elif "=" in entry and runs:
                name, _, value = entry.partition("=")
                runs[-1][1][name] = value
        return runs

    def names(self) -> list[str]:
        return [name for name, _ in self.runs()]


@pytest.fixture
def hooks(tmp_path: Path) -> Hooks:
    return Hooks(tmp_path / "hooks")


def migrate(table: str, hooks: Hooks, url: str, log: Path, *args: str):
    """`stream-osc migrate` of DB.table with the hooks and URL, in an environment holding other passwords too."""
    return start_cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", ALTER, "--partitions",
                     "2", "--hook", str(hooks.dir), "--notify-url", url, "--log-level", "INFO", *args,
                     env={**os.environ, **APP_ENV}, log=log)


def assert_no_password_told(hooks: Hooks, receiver: Receiver | None, cli_log: Path) -> None:
    """No password in any hook's environment, any POST or the tool's log; none of the tool's endpoint variables (or
    the application's secrets) among the hooks' variables."""
    told = hooks.log.read_bytes() + b"".join(post["raw"] for post in (receiver.posts if receiver else []))
    assert [p for p in passwords() if p.encode() in told] == []
    assert [p for p in passwords() if p in cli_log.read_text()] == []
    assert [(name, v) for name, env in hooks.runs() for v in TOOL_VARIABLES if v in env] == []


def test_hooks_and_a_receiver_hear_each_event_in_order_with_its_figures_and_no_password(endpoints, conn, hooks,
                                                                                       receiver, cli_log):
    table = "events"
    fresh_table(conn, DB, table, rows=ROWS, seed=5)
    for event in ("started", "copy-done", "in-sync", "before-cutover", "cutover-failed", "swapped", "failed",
                  "aborted"):
        hooks.add(event)
    hooks.add("copy-done-fails", "echo 'a hook that fails'; exit 3\n")
    hooks.add("copy-done-hangs", "sleep 60\n")   # killed after 10 s
    (hooks.dir / "started-not-executable").write_text("#!/bin/sh\nexit 0\n")
    earlier = latest_migration_id(conn, DB, table)
    proc = migrate(table, hooks, receiver.url, cli_log)
    try:
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
    finally:
        proc.kill()
    migration = new_migration_row(conn, DB, table, earlier)
    assert (migration.stage, "flag" in table_columns(conn, DB, table)) == ("done", True)

    runs = hooks.runs()
    assert [name for name, _ in runs] == ["started", "copy-done", "copy-done-fails", "copy-done-hangs", "in-sync",
                                          "before-cutover", "swapped"]
    for name, env in runs:
        assert env["STREAM_OSC_EVENT"] == name.removesuffix("-fails").removesuffix("-hangs")
        assert (env["STREAM_OSC_TABLE"], env["STREAM_OSC_MIGRATION_ID"]) == (f"{DB}.{table}", str(migration.id))
        assert env["STREAM_OSC_ALTER"] == ALTER and "STREAM_OSC_ERROR" not in env
    env = dict(runs)
    assert (env["started"]["STREAM_OSC_STAGE"], env["started"]["STREAM_OSC_RESUMED"]) == ("copy", "false")
    assert {k: env["copy-done"][f"STREAM_OSC_{k}"] for k in ("STAGE", "ROWS_COPIED", "COPY_PERCENT", "ETA_SECONDS")} \
        == {"STAGE": "apply", "ROWS_COPIED": str(ROWS), "COPY_PERCENT": "100", "ETA_SECONDS": "0"}
    assert env["in-sync"]["STREAM_OSC_STAGE"] == "cutover" and "STREAM_OSC_WAITING_FOR" not in env["in-sync"]
    assert env["swapped"]["STREAM_OSC_STAGE"] == "cleanup"
    assert int(env["swapped"]["STREAM_OSC_BLOCKED_MS"]) == migration.cutover_blocked_ms

    assert receiver.events() == ["started", "copy-done", "in-sync", "swapped"]   # before-cutover is a hook only
    for post in receiver.posts:
        assert post["path"] == "/services/T0/B0/x"
        assert post["headers"]["Authorization"] == "Basic " + base64.b64encode(":".join(URL_LOGIN).encode()).decode()
        assert post["body"]["text"].startswith(f"stream-osc: {DB}.{table} (migration {migration.id}): ")
        assert post["body"]["migration_id"] == migration.id
    assert receiver.posts[1]["body"]["rows_copied"] == ROWS
    assert receiver.posts[3]["body"]["blocked_ms"] == migration.cutover_blocked_ms

    log = cli_log.read_text()
    assert "hook=copy-done-fails exit_code=3" in log and "output=\"a hook that fails\"" in log
    assert re.search(r"hook=copy-done-hangs seconds=10\.\d+ timed_out=True", log)   # killed at the timeout
    assert "hook=started-not-executable" in log and "reason=\"Permission denied\"" in log
    assert log.count("msg=\"notification posted\"") == 4
    assert_no_password_told(hooks, receiver, cli_log)
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]


def test_a_before_cutover_hook_exiting_non_zero_postpones_the_swap_until_it_exits_0(conn, hooks, cli_log):
    table = "gated"
    fresh_table(conn, DB, table, rows=ROWS, seed=6)
    allow = hooks.dir.parent / "allow"
    hooks.add("before-cutover", f'[ -e "{allow}" ] || {{ echo "deploy freeze"; exit 1; }}\n')
    hooks.add("swapped")
    [nobody] = free_ports(1)   # a URL nobody answers: logged, the migration goes on
    proc = migrate(table, hooks, f"http://127.0.0.1:{nobody}/hook", cli_log)
    try:
        wait_for(lambda: hooks.names().count("before-cutover") >= 2 or proc.poll() is not None, 180,
                 "the before-cutover hook refusing twice")
        assert proc.poll() is None, cli_log.read_text()[-3000:]
        assert migration_row(conn, DB, table).stage == "cutover" and table_is_original(conn, DB, table)
        # postponed as outside its window: the appliers keep the new table in sync meanwhile
        query(conn, f"UPDATE {DB}.{table} SET c = 'while postponed' WHERE id = 7")
        wait_for(lambda: scalar(conn, f"SELECT c FROM {DB}.{helper_table_name(table, 'new')} WHERE id = 7")
                 == "while postponed", 60, "the change applied while the swap is postponed")
        assert table_is_original(conn, DB, table) and "swapped" not in hooks.names()
        allow.touch()
        assert proc.wait(120) == 0, cli_log.read_text()[-3000:]
    finally:
        proc.kill()
    names = hooks.names()
    assert names[-1] == "swapped" and set(names[:-1]) == {"before-cutover"} and len(names) >= 4
    assert "flag" in table_columns(conn, DB, table)
    assert scalar(conn, f"SELECT c FROM {DB}.{table} WHERE id = 7") == "while postponed"
    log = cli_log.read_text()
    assert "cutover: postponed: hook before-cutover exited 1" in log
    assert "msg=\"cutover postponed by the before-cutover hook\"" in log and "output=\"deploy freeze\"" in log
    assert "msg=\"notification not delivered\"" in log and "reason=\"Connection refused\"" in log
    assert_no_password_told(hooks, None, cli_log)


def waiting_migration(conn, table: str, hooks: Hooks, receiver: Receiver, cli_log: Path):
    """A `--cutover manual` migration of DB.table with every event's hook, once it waits for its cutover."""
    fresh_table(conn, DB, table, rows=ROWS, seed=7)
    for event in ("started", "copy-done", "in-sync", "failed", "aborted"):
        hooks.add(event)
    earlier = latest_migration_id(conn, DB, table)
    proc = migrate(table, hooks, receiver.url, cli_log, "--cutover", "manual")
    wait_for(lambda: proc.poll() is not None or getattr(new_migration_row(conn, DB, table, earlier), "status", "")
             == "waiting", 180, "the migration to wait for its cutover")
    assert proc.poll() is None, cli_log.read_text()[-3000:]
    wait_for(lambda: "in-sync" in hooks.names(), 30, "the in-sync hook")
    assert dict(hooks.runs())["in-sync"]["STREAM_OSC_WAITING_FOR"] == "cutover-request"
    return proc


def test_a_stop_with_an_error_is_told_by_its_coordinator_and_a_later_abort_by_the_command(conn, hooks, receiver,
                                                                                          cli_log):
    table = "stops"
    proc = waiting_migration(conn, table, hooks, receiver, cli_log)
    try:
        query(conn, f"ALTER TABLE {DB}.{table} ADD COLUMN z INT NULL")   # the source changed: it cannot go on
        assert proc.wait(60) == 5, cli_log.read_text()[-3000:]
    finally:
        proc.kill()
    failed = dict(hooks.runs())["failed"]
    assert failed["STREAM_OSC_RESUMABLE"] == "false" and f"{DB}.{table}" in failed["STREAM_OSC_ERROR"]
    assert receiver.events() == ["started", "copy-done", "in-sync", "failed"]
    assert receiver.posts[-1]["body"]["error"] == failed["STREAM_OSC_ERROR"]
    result = cli("abort", "--table", f"{DB}.{table}")   # no coordinator runs it now: the command tells
    assert result.returncode == 0, result.stderr
    assert hooks.names() == ["started", "copy-done", "in-sync", "failed", "aborted"]
    assert receiver.events()[-1] == "aborted"
    assert_no_password_told(hooks, receiver, cli_log)


def test_an_abort_of_a_running_migration_is_told_once_by_its_coordinator(conn, hooks, receiver, cli_log):
    table = "aborts"
    proc = waiting_migration(conn, table, hooks, receiver, cli_log)
    try:
        result = cli("abort", "--table", f"{DB}.{table}")
        assert result.returncode == 0, result.stderr
        assert proc.wait(60) == 5, cli_log.read_text()[-3000:]
    finally:
        proc.kill()
    assert hooks.names() == ["started", "copy-done", "in-sync", "aborted"]
    assert receiver.events() == ["started", "copy-done", "in-sync", "aborted"]
    assert dict(hooks.runs())["aborted"]["STREAM_OSC_MIGRATION_ID"] == str(migration_row(conn, DB, table).id)
    assert_no_password_told(hooks, receiver, cli_log)
