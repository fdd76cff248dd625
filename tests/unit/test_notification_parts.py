"""Notifications' parts (migration/notify.py), against real executables and a real local HTTP server: a hook's
environment holds no password, the events are named so that each runs only its own hooks, the POST's body is
Slack's `text` and the figures, and a hook or a receiver that fails, hangs or is not there is logged, never raised;
the options are checked at parse time without repeating a URL's secrets, kept with the migration and restored by
`resume`; the cutover loop asks the before-cutover hook before each attempt and postpones the swap while it says
no, and tells of rolled-back attempts and of the swap."""
from __future__ import annotations

import base64
import http.server
import json
import logging
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cli.main import build_parser
from core.endpoints import ConfigError
from core.options import redacted_url
from core.source_check import SourceChanged
from core.spec import MigrationSpec, load_migration_file
from cutover.swap import CutoverResult
from migration.coordination import MigrationStopped
from migration.notify import (EVENTS, GATE, Notifier, hook_environment, hooks_for, known_secrets, notice_text,
                              payload, post_json, NotDelivered, run_hook, scrubbed_environment, stop_figures)
from migration.resuming import resumed_values
from stack.process import free_ports
from tests.unit.test_coordinator_loops import CTX, SPEC, FakeCutover, cutover_loop, shared

ENVIRON = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/osc", "LANG": "C.UTF-8", "PWD": "/srv", "TZ": "UTC",
    "STREAM_OSC_MYSQL_DSN": "mysql://osc:Db-Pass-1@db:3306/",
    "STREAM_OSC_REDIS_URL": "redis://:Redis-Pass-2@redis:6379/0",
    "STREAM_OSC_CONNECT_URL": "http://connect:8083",
    "STREAM_OSC_CONFIG": "/etc/stream-osc.toml",
    "STREAM_OSC_TARGET_PASSWORD": "Target-Pass-3",
    "STREAM_OSC_CONNECTOR_PASSWORD": "${file:/etc/connect/db.properties:password}",
    "MYSQL_PWD": "Mysql-Pwd-4",
    "APP_DB_PASSWORD": "App-Pass-5",
    "AWS_SECRET_ACCESS_KEY": "Aws-Secret-6",
    "GITHUB_TOKEN": "Gh-Token-7",
    "DATABASE_URL": "postgres://app:Url-Pass-8@pg/app",
    "GREETING": "hello Db-Pass-1",
    "NOTE": "from the config file: Conf-Pass-9",
}
PASSWORDS = ["Db-Pass-1", "Redis-Pass-2", "Target-Pass-3", "Mysql-Pwd-4", "App-Pass-5", "Aws-Secret-6", "Gh-Token-7",
             "Url-Pass-8", "Conf-Pass-9"]
FIGURES = {"event": "copy-done", "table": "shop.orders", "migration_id": 12, "stage": "apply", "rows_copied": 250_000,
           "copy_percent": 100.0, "eta_seconds": 0, "error": None}


# the environment ---------------------------------------------------------------------------------------------
def test_a_hook_environment_holds_no_password_the_tool_was_given_or_knows():
    secrets = known_secrets(ENVIRON, {"Conf-Pass-9"})   # the endpoints' own password, read from a config file
    assert set(PASSWORDS) <= secrets
    env = hook_environment(scrubbed_environment(ENVIRON, secrets), FIGURES)
    assert {k: v for k, v in env.items() if not k.startswith("STREAM_OSC_")} == {
        "PATH": "/usr/bin:/bin", "HOME": "/home/osc", "LANG": "C.UTF-8", "PWD": "/srv", "TZ": "UTC"}
    assert not [p for p in PASSWORDS if any(p in k or p in v for k, v in env.items())]
    assert {k: v for k, v in env.items() if k.startswith("STREAM_OSC_")} == {
        "STREAM_OSC_EVENT": "copy-done", "STREAM_OSC_TABLE": "shop.orders", "STREAM_OSC_MIGRATION_ID": "12",
        "STREAM_OSC_STAGE": "apply", "STREAM_OSC_ROWS_COPIED": "250000", "STREAM_OSC_COPY_PERCENT": "100",
        "STREAM_OSC_ETA_SECONDS": "0"}   # no STREAM_OSC_ERROR: there is none; no DSN, URL or config file


def test_figures_told_are_cleaned_of_the_passwords_the_tool_knows():
    notifier = Notifier({"Conf-Pass-9"}, environ=ENVIRON)
    cleaned = notifier.clean({"event": "failed", "error": "login refused for osc:Db-Pass-1 and Conf-Pass-9 at "
                                                          "mysql://osc:Other-Pw@db/"})
    assert cleaned["error"] == "login refused for osc:*** and *** at mysql://***@db/"


# the events and their hooks ----------------------------------------------------------------------------------
def test_each_event_runs_only_its_own_hooks(tmp_path):
    assert list(EVENTS) == ["started", "copy-done", "in-sync", "before-cutover", "cutover-failed", "swapped",
                            "failed", "aborted"]
    names = ["failed", "failed-pager", "failed.sh", "cutover-failed", "failedx", "swapped", "README", "started~"]
    for name in names:
        (tmp_path / name).write_text("#!/bin/sh\n")
    (tmp_path / "aborted-dir").mkdir()
    assert [p.name for p in hooks_for(tmp_path, "failed")] == ["failed", "failed-pager", "failed.sh"]
    assert [p.name for p in hooks_for(tmp_path, "cutover-failed")] == ["cutover-failed"]
    assert [p.name for p in hooks_for(tmp_path, "started")] == []
    assert hooks_for(tmp_path, "aborted") == []
    assert hooks_for(tmp_path / "gone", "started") == []   # a directory that went away: logged, nothing run


def test_the_post_body_is_slack_text_and_the_figures():
    body = payload(FIGURES)
    assert body == {"text": "stream-osc: shop.orders (migration 12): copy done: 250,000 rows", "event": "copy-done",
                    "table": "shop.orders", "migration_id": 12, "stage": "apply", "rows_copied": 250_000,
                    "copy_percent": 100.0, "eta_seconds": 0}
    assert json.loads(json.dumps(body)) == body
    failed = {"event": "failed", "table": "shop.orders", "migration_id": 12, "error": "cutover did not fit",
              "resumable": True}
    assert notice_text(failed) == ("stream-osc: shop.orders (migration 12): stopped with an error: cutover did not "
                                   "fit (resumable: `stream-osc resume`)")
    waiting = {"event": "in-sync", "table": "shop.orders", "migration_id": 12, "waiting_for": "cutover-request"}
    assert notice_text(waiting).endswith("in sync; waiting for `stream-osc cutover`")


def test_a_stop_is_told_as_aborted_or_as_failed_with_whether_resume_continues_it():
    assert stop_figures(MigrationStopped("migration 3 was aborted", resumable=False), aborted=True) == ("aborted", {})
    assert stop_figures(MigrationStopped("cutover did not fit"), aborted=False) == (
        "failed", {"error": "cutover did not fit", "resumable": True})
    assert stop_figures(SourceChanged("shop.orders was altered"), aborted=False)[1]["resumable"] is False
    assert stop_figures(KeyError("x"), aborted=False) == ("failed", {"error": "KeyError: 'x'", "resumable": None})


# hooks, really run -------------------------------------------------------------------------------------------
def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_failing_hanging_or_unrunnable_hook_is_logged_and_the_next_one_still_runs(tmp_path, caplog):
    record = tmp_path / "ran"
    script(tmp_path, "copy-done-1-fails", f'echo "$STREAM_OSC_EVENT failing" >> {record}; echo boom; exit 3\n')
    script(tmp_path, "copy-done-2-hangs", f"echo hanging >> {record}; (sleep 30; echo late >> {record}) & sleep 30\n")
    (tmp_path / "copy-done-3-not-executable").write_text("#!/bin/sh\n")
    script(tmp_path, "copy-done-4-fine", f"env >> {record}\n")
    notifier = Notifier({"Conf-Pass-9"}, environ=ENVIRON, timeout_s=1.0)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="stream_osc.notify"):
        notifier.notify(str(tmp_path), "", FIGURES)   # returns: nothing raised
    assert time.monotonic() - started < 6
    text = record.read_text()
    assert text.startswith("copy-done failing\nhanging\n") and "STREAM_OSC_ROWS_COPIED=250000" in text
    assert not [p for p in PASSWORDS if p in text]
    failures = {r.fields["hook"]: r.fields for r in caplog.records if r.getMessage() == "hook failed"}
    assert failures["copy-done-1-fails"]["exit_code"] == 3 and failures["copy-done-1-fails"]["output"] == "boom"
    assert failures["copy-done-2-hangs"]["timed_out"] and "exit_code" not in failures["copy-done-2-hangs"]
    assert failures["copy-done-3-not-executable"]["reason"] == "Permission denied"
    time.sleep(0.5)
    assert "late" not in record.read_text()   # what the hung hook started was killed with it


def test_the_before_cutover_hooks_answer_with_the_first_that_does_not_exit_0(tmp_path):
    notifier = Notifier(environ=ENVIRON, timeout_s=1.0)
    assert notifier.before_cutover(str(tmp_path), FIGURES) is None   # no hook: nothing holds the swap
    script(tmp_path, "before-cutover-a", "exit 0\n")
    assert notifier.before_cutover(str(tmp_path), FIGURES) is None
    script(tmp_path, "before-cutover-b", '[ "$STREAM_OSC_EVENT" = before-cutover ] && exit 4\n')
    refused = notifier.before_cutover(str(tmp_path), FIGURES)
    assert (refused.hook, refused.exit_code, refused.describe()) == ("before-cutover-b", 4,
                                                                     "hook before-cutover-b exited 4")
    script(tmp_path, "before-cutover-b", "sleep 30\n")
    refused = notifier.before_cutover(str(tmp_path), FIGURES)
    assert refused.timed_out and not refused.ok   # a hook that hangs does not let the swap through


def test_a_hook_runs_in_its_directory_with_stdin_closed(tmp_path):
    path = script(tmp_path, "started", "pwd; cat; echo done\n")
    run = run_hook(path, {"PATH": "/usr/bin:/bin"}, 5)
    assert run.ok and run.output == f"{tmp_path}\ndone"


# the POST, to a real receiver --------------------------------------------------------------------------------
class Receiver:
    """A local HTTP server on a free port, in a thread, recording what it is sent and answering `status`."""

    def __init__(self, status: int = 200, delay_s: float = 0.0, headers: dict[str, str] | None = None) -> None:
        self.requests: list[dict] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                time.sleep(delay_s)
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]
    yield make
    for each in made:
        each.close()


def test_the_post_carries_the_figures_and_the_urls_login_as_basic_auth_never_shown(receiver, caplog):
    hook = receiver()
    url = f"http://hooks:Url-Secret-1@127.0.0.1:{hook.port}/services/T0/B0/Token-2?x=1"
    with caplog.at_level(logging.INFO, logger="stream_osc.notify"):
        Notifier(environ=ENVIRON).notify("", url, FIGURES)
    [request] = hook.requests
    assert request["path"] == "/services/T0/B0/Token-2?x=1"
    assert json.loads(request["body"]) == payload(FIGURES)
    assert request["headers"]["Authorization"] == "Basic " + base64.b64encode(b"hooks:Url-Secret-1").decode()
    assert request["headers"]["Content-Type"] == "application/json"
    [posted] = [r for r in caplog.records if r.getMessage() == "notification posted"]
    assert posted.fields["url"] == f"http://127.0.0.1:{hook.port}/…" and posted.fields["status"] == 200
    assert "Url-Secret-1" not in caplog.text and "Token-2" not in caplog.text
    assert redacted_url(url) == f"http://127.0.0.1:{hook.port}/…"


def test_an_unreachable_hanging_refusing_or_redirecting_receiver_is_logged_never_raised(receiver, caplog):
    [closed] = free_ports(1)
    slow = receiver(delay_s=3)
    refusing = receiver(status=500)
    elsewhere = receiver()
    redirecting = receiver(status=307, headers={"Location": f"http://127.0.0.1:{elsewhere.port}/stolen"})
    notifier = Notifier(environ=ENVIRON, timeout_s=1.0)
    with caplog.at_level(logging.INFO, logger="stream_osc.notify"):
        for port in (closed, slow.port, refusing.port, redirecting.port):
            started = time.monotonic()
            notifier.notify("", f"http://u:Url-Secret-3@127.0.0.1:{port}/hook", FIGURES)
            assert time.monotonic() - started < 2.5
    reasons = [r.fields["reason"] for r in caplog.records if r.getMessage() == "notification not delivered"]
    assert reasons == ["Connection refused", "no answer within 1 s", "HTTP 500", "HTTP 307"]
    assert elsewhere.requests == []   # a redirect is not followed: the login would go with it
    assert "Url-Secret-3" not in caplog.text


def test_post_json_raises_not_delivered_on_a_refusal(receiver):
    with pytest.raises(NotDelivered, match="HTTP 404"):
        post_json(f"http://127.0.0.1:{receiver(status=404).port}/", {"text": "x"}, 2)


# the options --------------------------------------------------------------------------------------------------
MIGRATE = ["migrate", "--table", "shop.orders", "--alter", "ADD COLUMN c INT"]


def one_line_refusal(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv, message", [
    (["--hook", "/no/such/dir"], "argument --hook: '/no/such/dir' is not a directory"),
    (["--notify-url", "ftp://u:S3cret@host/x"], "argument --notify-url: must be an http:// or https:// URL"),
    (["--notify-url", "https://u:S3cret@/x"], "argument --notify-url: must name a host"),
    (["--notify-url", "https://u:S3cret@host:99999/"], "must be an http:// or https:// URL with a valid host and port"),
    (["--notify-url", "https://host/a b?S3cret"], "must be one URL, without spaces or control characters"),
])
def test_a_bad_hook_directory_or_url_is_refused_at_parse_time_without_its_secret(capsys, argv, message):
    err = one_line_refusal(capsys, [*MIGRATE, *argv])
    assert message in err and "S3cret" not in err


def test_the_options_go_through_the_schema_and_the_config_file(tmp_path, monkeypatch):
    args = build_parser().parse_args([*MIGRATE, "--hook", str(tmp_path), "--notify-url", "https://hooks.example/x"])
    assert (args.hook_dir, args.notify_url) == (str(tmp_path), "https://hooks.example/x")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hooks").mkdir()
    path = tmp_path / "osc.toml"
    path.write_text('[migration]\nhook = "hooks"\nnotify-url = "https://u:S3cret@hooks.example/T/B"\n')
    assert load_migration_file(path) == {"hook_dir": str(tmp_path / "hooks"),   # made absolute: kept for resume
                                         "notify_url": "https://u:S3cret@hooks.example/T/B"}
    path = tmp_path / "wrong-type.toml"   # (a file is read once per process)
    path.write_text("[migration]\nnotify_url = 5\n")
    with pytest.raises(ConfigError, match="notify_url in .* must be an http:// or https:// URL, not an integer"):
        load_migration_file(path)
    path = tmp_path / "wrong-scheme.toml"
    path.write_text('[migration]\nnotify_url = "gopher://u:S3cret@h/"\n')
    with pytest.raises(ConfigError) as refused:
        load_migration_file(path)
    assert "must be an http:// or https:// URL" in str(refused.value) and "S3cret" not in str(refused.value)


def test_the_spec_never_shows_the_url_and_refuses_a_bad_one():
    spec = MigrationSpec(database="shop", table="orders", alter="ADD c INT",
                         notify_url="https://u:S3cret@hooks.example/x").validate()
    assert "S3cret" not in repr(spec)
    with pytest.raises(ConfigError, match="--notify-url must be an http:// or https:// URL"):
        replace(spec, notify_url="file:///etc/passwd").validate()


def test_resume_keeps_the_stored_hooks_and_url_unless_it_is_given_its_own():
    stored = {"hook_dir": "/etc/osc/hooks", "notify_url": "https://hooks.example/x", "partitions": 4}
    assert resumed_values(stored, frozenset())["hook_dir"] == "/etc/osc/hooks"
    assert resumed_values(stored, frozenset())["notify_url"] == "https://hooks.example/x"
    assert "hook_dir" not in resumed_values(stored, frozenset({"hook_dir"}))


# the cutover loop ---------------------------------------------------------------------------------------------
class Told:
    """The events a coordination told, and the before-cutover answers it gives (None: go ahead)."""

    def __init__(self, coordination, answers: list) -> None:
        self.events: list[tuple[str, dict]] = []
        self.answers = answers
        coordination.notify = lambda event, migration_id, **figures: self.events.append((event, figures))
        coordination.before_cutover = self.before_cutover

    def before_cutover(self, migration_id: int):
        self.events.append((GATE, {}))
        return self.answers.pop(0)


ROLLED_BACK = CutoverResult(False, 3100.0, 0, reason="drain did not finish")
SWAPPED = CutoverResult(True, 120.0, 5, locked_at=1.0)


def refusal(code: int):
    from migration.notify import HookRun
    return HookRun("before-cutover", code, 0.1)


def test_the_before_cutover_hook_postpones_the_swap_uncounted_until_it_exits_0():
    coordination = shared(replace(SPEC, cutover_attempts=1, hook_dir="/hooks"))
    loop = cutover_loop(coordination)
    waits: list[dict] = []
    loop.lag.keep_in_sync_until = lambda ctx, ready, event, **fields: waits.append({"event": event, **fields})
    told = Told(coordination, [refusal(1), refusal(1), refusal(2), None])
    cutover = FakeCutover([SWAPPED])
    loop.cut_over(CTX, cutover)
    assert cutover.attempts == 1   # three refusals, none counted against --cutover-attempts 1
    assert [event for event, _ in told.events] == [GATE, GATE, GATE, GATE, "swapped"]
    assert told.events[-1][1] == {"blocked_ms": 120}
    assert waits == [{"event": "cutover postponed by the before-cutover hook", "hook": "before-cutover"}] * 3
    said = coordination.progress.said
    assert [line.split(";")[-1] for line in said if "postponed" in line] == [
        " the new table is kept in sync, and the hook asked again in 2 s",
        " the new table is kept in sync, and the hook asked again in 4 s",
        " the new table is kept in sync, and the hook asked again in 8 s"]
    assert "cutover: the before-cutover hook lets the swap go ahead" in said


def test_without_a_hook_directory_no_hook_is_asked():
    coordination = shared(replace(SPEC, cutover_attempts=1))
    loop = cutover_loop(coordination)
    told = Told(coordination, [])
    loop.cut_over(CTX, FakeCutover([SWAPPED]))
    assert [event for event, _ in told.events] == ["swapped"]


def test_a_rolled_back_attempt_is_told_with_its_number_and_reason():
    coordination = shared(replace(SPEC, cutover_attempts=3, hook_dir="/hooks"))
    loop = cutover_loop(coordination)
    told = Told(coordination, [None, None])
    loop.cut_over(CTX, FakeCutover([ROLLED_BACK, SWAPPED]))
    assert told.events == [(GATE, {}), ("cutover-failed", {"attempt": 1, "attempts": 3, "error": "drain did not finish",
                                                           "retry_in_s": 2}),
                           (GATE, {}), ("swapped", {"blocked_ms": 120})]
