"""Telling people what a migration does: hook executables (`--hook DIR`, as gh-ost's `--hooks-path`) and a JSON POST
(`--notify-url URL`, Slack-compatible) at its events, with its figures.

Every hook and POST runs in the coordinator's thread, outside any lock the tool holds on the table (the cutover's
hooks before an attempt begins and after it has ended), for at most TIMEOUT_S each. What fails, hangs or cannot be
reached is logged and forgotten: a notification never stops a migration. The one exception is the documented
gate: a `before-cutover` hook that does not exit 0 postpones the swap (migration/cutover_loop.py).

A hook's environment is the tool's own without anything that may hold a password: no STREAM_OSC_* variable the tool
was given (DSNs, URLs, passwords, the config file), nothing named like a password, secret, token or credential,
no value holding a URL's user:password or one of the passwords the tool knows; then the event's figures as
STREAM_OSC_<FIGURE>. The POST's body holds the same figures and a `text` line (docs/options.md, "Notifications").
"""
from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from core.endpoints import Endpoints
from core.logs import log_event
from core.options import redacted_url
from core.source_check import SourceChanged
from core.state_records import Migration
from throttle.load import CriticalLoad

log = logging.getLogger("stream_osc.notify")

TIMEOUT_S = 10.0        # longest one hook, or one POST, may take; a hook still running then is killed
OUTPUT_TAIL = 300       # characters of a failed hook's output kept in its log line
ENV_PREFIX = "STREAM_OSC_"

# event -> when it happens (the hook's file name; the POST's `event` field)
EVENTS = {
    "started": "a coordinator took the migration up: after init, or resuming one under way",
    "copy-done": "the bulk copy is done",
    "in-sync": "validated and in sync: the cutover comes next, or is waited for (a window, `stream-osc cutover`)",
    "before-cutover": "right before each cutover attempt (a hook only, no POST): a non-zero exit postpones the swap",
    "cutover-failed": "a cutover attempt was rolled back (the table unchanged); it is tried again",
    "swapped": "the tables were swapped",
    "failed": "the migration stopped with an error",
    "aborted": "the migration was aborted",
}
GATE = "before-cutover"

# variables a hook never sees: names that say they hold a secret; values holding a URL's user:password
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|PRIVATE_KEY|^MYSQL_PWD$", re.IGNORECASE)
URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s@:]*:[^/\s@]+@")
MIN_SECRET_CHARS = 4    # a known password shorter than this is not looked for in other values (it would be everywhere)


# what may not be shown ----------------------------------------------------------------------------------------
def url_password(text: str) -> str | None:
    """The password of a URL's user:password (None without one, or if `text` is no URL)."""
    try:
        password = urlsplit(text.strip()).password
    except ValueError:
        return None
    return unquote(password) if password else None


def known_secrets(environ: Mapping[str, str], extra: Iterable[str] = ()) -> frozenset[str]:
    """The passwords the tool knows of: `extra` (the endpoints' own, which may come from a config file or a secret
    store), every value of a variable named like a secret, and the password of every URL a variable holds."""
    found = {value for value in extra if value}
    for name, value in environ.items():
        if SECRET_NAME.search(name) and value:
            found.add(value)
        password = url_password(value) if URL_PASSWORD.search(value) else None
        if password:
            found.add(password)
    return frozenset(found)


def endpoint_secrets(endpoints: Endpoints) -> set[str]:
    """The passwords in the tool's endpoints, wherever they came from (variables, config file): the database's, the
    target server's, Redis's, Kafka Connect's REST password."""
    found: set[str] = set()
    for read in (lambda: endpoints.mysql.password, lambda: endpoints.target_password,
                 lambda: url_password(endpoints.target_dsn), lambda: url_password(endpoints.redis_url),
                 lambda: endpoints.connect_password, lambda: url_password(endpoints.connect_url)):
        try:
            value = read()
        except Exception:  # noqa: BLE001 - an endpoint that does not parse holds no password worth hiding here
            continue
        if value:
            found.add(value)
    return found


def hides_secret(value: str, secrets: Iterable[str]) -> bool:
    """Whether `value` holds a URL's user:password or one of `secrets`."""
    return bool(URL_PASSWORD.search(value)) or any(len(s) >= MIN_SECRET_CHARS and s in value for s in secrets)


def scrubbed_environment(environ: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """`environ` without what may hold a password: every STREAM_OSC_* variable (the tool's DSNs, URLs, passwords,
    config file), every variable named like a password, secret, token or credential, and every value holding a
    URL's user:password or one of `secrets`."""
    secrets = tuple(secrets)
    return {name: value for name, value in environ.items()
            if not name.startswith(ENV_PREFIX) and not SECRET_NAME.search(name) and not hides_secret(value, secrets)}


def without_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets`, and a URL's user:password, replaced by ***."""
    for secret in sorted((s for s in secrets if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True):
        text = text.replace(secret, "***")
    return URL_PASSWORD.sub(lambda m: m.group(0)[:m.group(0).index("://") + 3] + "***@", text)


# what is told ------------------------------------------------------------------------------------------------
def hook_environment(base: Mapping[str, str], figures: Mapping[str, Any]) -> dict[str, str]:
    """A hook's environment: `base` (scrubbed) and each known figure as STREAM_OSC_<NAME> (an unknown one, None, is
    absent)."""
    env = dict(base)
    env.update({ENV_PREFIX + name.upper(): env_value(value) for name, value in figures.items() if value is not None})
    return env


def env_value(value: Any) -> str:
    """A figure as an environment variable holds it: true/false, whole numbers without a fraction."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def notice_text(figures: Mapping[str, Any]) -> str:
    """The one line a chat channel shows for an event."""
    event, table, migration = figures.get("event"), figures.get("table"), figures.get("migration_id")
    rows = figures.get("rows_copied")
    what = {
        "started": (f"resumed at stage {figures.get('stage')}" if figures.get("resumed") else "started")
                   + (f" (ALTER {figures['alter']})" if figures.get("alter") else ""),
        "copy-done": "copy done" + (f": {rows:,} rows" if isinstance(rows, int) else ""),
        "in-sync": "in sync; " + {"cutover-request": "waiting for `stream-osc cutover`",
                                  "window": f"waiting for the cutover window (opens {figures.get('window_opens_at')})",
                                  }.get(str(figures.get("waiting_for")), "cutting over"),
        "before-cutover": "about to cut over",
        "cutover-failed": f"cutover attempt {figures.get('attempt')} of {figures.get('attempts')} rolled back "
                          f"({figures.get('error')}); the table is unchanged and the cutover is tried again",
        "swapped": "swapped" + (f"; application writes were blocked for {figures['blocked_ms']} ms"
                                if figures.get("blocked_ms") is not None else ""),
        "failed": f"stopped with an error: {figures.get('error')}"
                  + {True: " (resumable: `stream-osc resume`)", False: " (cannot continue: `stream-osc abort`)"}
                  .get(figures.get("resumable"), ""),
        "aborted": "aborted",
    }.get(str(event), str(event))
    return f"stream-osc: {table} (migration {migration}): {what}"


def payload(figures: Mapping[str, Any]) -> dict[str, Any]:
    """The POST's JSON body: Slack's `text`, then every known figure by its name."""
    return {"text": notice_text(figures), **{name: value for name, value in figures.items() if value is not None}}


def stop_figures(exc: BaseException, aborted: bool) -> tuple[str, dict[str, Any]]:
    """The event (`aborted` or `failed`) and figures of a coordinator that stopped on `exc`; `aborted`: the
    migration's row says it was aborted."""
    if aborted:
        return "aborted", {}
    resumable = getattr(exc, "resumable", None)
    if isinstance(exc, SourceChanged):
        resumable = False
    elif isinstance(exc, CriticalLoad):
        resumable = True
    error = str(exc) if getattr(exc, "user_facing", False) else f"{type(exc).__name__}: {exc}"
    return "failed", {"error": error[:2000], "resumable": resumable}


# hooks -------------------------------------------------------------------------------------------------------
def hooks_for(directory: str | Path, event: str) -> list[Path]:
    """The executables of `directory` that `event` runs, in name order: the one named after it, and any named
    `<event>-…` or `<event>.…` (several per event, as gh-ost's hooks: `failed-pager`, `failed.sh`)."""
    try:
        entries = sorted(Path(directory).iterdir())
    except OSError as exc:
        log_event(log, "hook directory unreadable", logging.WARNING, directory=str(directory), event=event,
                  reason=exc.strerror or type(exc).__name__)
        return []
    return [path for path in entries if (path.name == event or path.name.startswith((f"{event}-", f"{event}.")))
            and not path.is_dir()]


@dataclass(frozen=True)
class HookRun:
    """How one hook ended: its exit code (None when it could not start or was killed), whether it was killed at the
    timeout, how long it ran and the end of its output."""

    hook: str
    exit_code: int | None
    seconds: float
    output: str = ""
    timed_out: bool = False
    error: str | None = None    # why it could not start

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if self.error:
            return f"hook {self.hook} could not run ({self.error})"
        if self.timed_out:
            return f"hook {self.hook} still ran after {self.seconds:.0f} s and was killed"
        return f"hook {self.hook} exited {self.exit_code}"


def run_hook(path: Path, env: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> HookRun:
    """Run one hook in its directory, stdin closed, its output kept in a file (a pipe would hold this process as
    long as any process the hook started lives); killed with its whole process group after `timeout_s`."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen([str(path)], cwd=path.parent, env=dict(env), stdin=subprocess.DEVNULL,
                                    stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return HookRun(path.name, None, time.monotonic() - started,
                           error=exc.strerror or type(exc).__name__)
        timed_out = False
        try:
            code: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # the hook and whatever it started in its session
            except ProcessLookupError:
                pass
            proc.wait()
            code = None
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    return HookRun(path.name, code, time.monotonic() - started, text[-OUTPUT_TAIL:].strip(), timed_out)


# the POST ----------------------------------------------------------------------------------------------------
class NotDelivered(Exception):
    """A POST that did not get a 2xx answer within the timeout; the message never holds the URL."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: following it would carry the Authorization header to another URL."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def post_json(url: str, body: Mapping[str, Any], timeout_s: float = TIMEOUT_S) -> int:
    """POST `body` as JSON to `url` (its user:password, if any, sent as HTTP basic auth and taken out of the URL);
    the answer's status. NotDelivered when there is no 2xx answer within `timeout_s` in all: the request runs in a
    thread of its own, so a server that answers a byte at a time does not hold the migration either."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    netloc = f"[{netloc}]" if ":" in netloc else netloc
    if parts.port:
        netloc += f":{parts.port}"
    request = urllib.request.Request(urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
                                     data=json.dumps(body, default=str).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "stream-osc"})
    if parts.username is not None or parts.password is not None:
        login = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    answer: dict[str, Any] = {}
    too_slow = f"no answer within {timeout_s:g} s"

    def send() -> None:
        try:
            with _OPENER.open(request, timeout=timeout_s) as response:
                answer["status"] = response.status
        except urllib.error.HTTPError as exc:
            answer["error"] = f"HTTP {exc.code}"
        except urllib.error.URLError as exc:
            reason = exc.reason
            answer["error"] = (too_slow if isinstance(reason, TimeoutError)
                               else getattr(reason, "strerror", None) or str(reason))
        except TimeoutError:
            answer["error"] = too_slow
        except Exception as exc:  # noqa: BLE001 - any failure is reported by its kind
            answer["error"] = getattr(exc, "strerror", None) or type(exc).__name__

    thread = threading.Thread(target=send, name="notify-post", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise NotDelivered(too_slow)
    if "error" in answer:
        raise NotDelivered(str(answer["error"]))
    if not 200 <= answer["status"] < 300:
        raise NotDelivered(f"HTTP {answer['status']}")
    return answer["status"]


# both --------------------------------------------------------------------------------------------------------
class Notifier:
    """Runs an event's hooks and POSTs it; logs what failed and never raises (but for the before-cutover gate's
    answer, which the cutover loop acts on)."""

    def __init__(self, secrets: Iterable[str] = (), environ: Mapping[str, str] | None = None,
                 timeout_s: float = TIMEOUT_S) -> None:
        environ = os.environ if environ is None else environ
        self.secrets = known_secrets(environ, secrets)
        self.base_env = scrubbed_environment(environ, self.secrets)
        self.timeout_s = timeout_s

    def clean(self, figures: Mapping[str, Any]) -> dict[str, Any]:
        """The figures, any text among them without a password the tool knows."""
        return {name: without_secrets(value, self.secrets) if isinstance(value, str) else value
                for name, value in figures.items()}

    def notify(self, hook_dir: str, url: str, figures: Mapping[str, Any]) -> None:
        """Run the event's hooks (figures["event"]) in name order, then POST it; a failure is logged, never raised."""
        try:
            figures = self.clean(figures)
            if hook_dir:
                self.run_hooks(hook_dir, figures)
            if url and figures.get("event") != GATE:
                self.post(url, figures)
        except Exception as exc:  # noqa: BLE001 - telling someone must never stop the migration
            log_event(log, "notification failed", logging.WARNING, event=figures.get("event"),
                      reason=f"{type(exc).__name__}: {without_secrets(str(exc), self.secrets)}")

    def before_cutover(self, hook_dir: str, figures: Mapping[str, Any]) -> HookRun | None:
        """Run the before-cutover hooks until one does not exit 0: that one's run (the swap is postponed), or None
        (every one exited 0, or there is none)."""
        figures = self.clean({**figures, "event": GATE})
        try:
            return next((run for run in self.run_hooks(hook_dir, figures, stop_at_failure=True) if not run.ok), None)
        except Exception as exc:  # noqa: BLE001 - a gate that cannot be asked does not open
            log_event(log, "before-cutover hook failed", logging.WARNING,
                      reason=f"{type(exc).__name__}: {without_secrets(str(exc), self.secrets)}")
            return HookRun(GATE, None, 0.0, error=type(exc).__name__)

    def run_hooks(self, hook_dir: str, figures: Mapping[str, Any], stop_at_failure: bool = False) -> list[HookRun]:
        """Run the hooks of figures["event"]; each logged (a failure as a warning)."""
        event = str(figures["event"])
        runs = []
        env = hook_environment(self.base_env, figures)
        for path in hooks_for(hook_dir, event):
            run = run_hook(path, env, self.timeout_s)
            runs.append(run)
            fields = {"event": event, "hook": run.hook, "exit_code": run.exit_code, "seconds": round(run.seconds, 2)}
            if run.ok:
                log_event(log, "hook ran", **fields)
                continue
            fields.update(timed_out=run.timed_out or None, reason=run.error,
                          output=without_secrets(run.output, self.secrets) or None)
            log_event(log, "hook failed", logging.WARNING, **{k: v for k, v in fields.items() if v is not None})
            if stop_at_failure:
                break
        return runs

    def post(self, url: str, figures: Mapping[str, Any]) -> None:
        """POST the event; logged either way, with the URL's scheme, host and port only."""
        started = time.monotonic()
        shown = redacted_url(url)
        try:
            status = post_json(url, payload(figures), self.timeout_s)
        except NotDelivered as exc:
            log_event(log, "notification not delivered", logging.WARNING, event=figures.get("event"), url=shown,
                      reason=without_secrets(str(exc), self.secrets), seconds=round(time.monotonic() - started, 2))
            return
        log_event(log, "notification posted", event=figures.get("event"), url=shown, status=status,
                  seconds=round(time.monotonic() - started, 2))


def tell_aborted(endpoints: Endpoints, migration: Migration) -> None:
    """`aborted` to the hooks and URL kept with the migration: `stream-osc abort` says it when no coordinator ran
    the migration to say it itself."""
    options = migration.options
    if options.get("hook_dir") or options.get("notify_url"):
        Notifier(endpoint_secrets(endpoints)).notify(
            options.get("hook_dir", ""), options.get("notify_url", ""),
            {"event": "aborted", "table": f"{migration.database}.{migration.table}", "migration_id": migration.id,
             "alter": migration.alter_sql or None, "stage": str(migration.stage)})
