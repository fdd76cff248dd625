"""One schema for the options of a migration: the command line, a config file's `[migration]` section and
`stream-osc set` all read a value through it, so a name means one thing, a value one type, and an impossible
value (a negative lag, no cutover attempt, a window of nan seconds) is refused wherever it is given.

Each option is known by its long name (`max-lag`; `max_lag` in a config file or `set` too) and sets one
field of `core/spec.py`'s MigrationSpec (`max_lag_events`).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core.config_file import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds of a duration such as "5s", "500ms", "2m", "1h" or "5" (seconds); ConfigError otherwise."""
    match = _DURATION.match(str(text))
    if match is None:
        raise ConfigError(f"invalid duration {text!r}: use a number with ms, s, m or h, e.g. 5s")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


# kind -> (what a value must be, for messages)
KINDS = {
    "count": "a whole number of at least 1",
    "limit": "a whole number of at least 0",
    "seconds": "a finite number of seconds above 0",
    "duration": "a duration such as 5s, 500ms or 2m (or a number of seconds), not negative",
    "flag": "true or false",
    "text": "a string",
    "url": "an http:// or https:// URL",
    "directory": "a directory",
}
# kinds whose values are strings in a config file (quoted)
STRING_KINDS = ("text", "url", "directory")
# kind -> the range of its values, for messages
RANGES = {"count": "at least 1", "limit": "at least 0", "seconds": "a finite number of seconds above 0",
          "duration": "a finite duration of at least 0 s"}


@dataclass(frozen=True)
class Option:
    """One option: its long name, the spec field it sets, the kind of its value."""

    name: str                 # the long option without "--"
    field: str                # the MigrationSpec field
    kind: str                 # a KINDS key
    choices: tuple[str, ...] = ()
    inverted: bool = False    # a flag that sets its field to the opposite (drop-old -> keep_old)

    @property
    def key(self) -> str:
        """The config file's spelling (dashes are accepted too)."""
        return self.name.replace("-", "_")

    def parse(self, text: str, label: str) -> Any:
        """The value of `text` as typed on a command line or in `set`; ConfigError naming `label` if it is not
        one this option takes."""
        value: Any = text.strip()
        if self.kind in ("count", "limit"):
            if not re.fullmatch(r"[+-]?\d+", value):
                raise ConfigError(f"{label}: {text!r} is not {KINDS[self.kind]}")
            value = int(value)
        elif self.kind == "seconds":
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{label}: {text!r} is not {KINDS[self.kind]}") from None
        elif self.kind == "duration":
            try:
                value = parse_duration(value)
            except ConfigError:
                raise ConfigError(f"{label}: {text!r} is not {KINDS[self.kind]}") from None
        elif self.kind == "flag":
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"{label}: {text!r} is not {KINDS[self.kind]}")
            value = value.lower() == "true"
        return self.check(value, label)

    def typed(self, value: Any, label: str) -> Any:
        """A config file's value (TOML-typed) as this option takes it; ConfigError naming `label` and the type
        expected if it is of another type (a string is never read as a number or a flag: `dry_run = "false"`
        is refused, not taken for true)."""
        expected = KINDS[self.kind]
        if self.kind in ("count", "limit"):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind == "seconds":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif self.kind == "duration":
            ok = isinstance(value, (int, float, str)) and not isinstance(value, bool)
            if ok and isinstance(value, str):
                return self.parse(value, label)
        elif self.kind == "flag":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            quotes = "" if self.kind in STRING_KINDS else " (without quotes)"
            raise ConfigError(f"{label} must be {expected}{quotes}, not {toml_type(value)}")
        return self.check(float(value) if self.kind in ("seconds", "duration") else value, label)

    def check(self, value: Any, label: str) -> Any:
        """`value` if it is in this option's range; ConfigError naming `label` otherwise."""
        bad = ((self.kind == "count" and value < 1) or (self.kind == "limit" and value < 0)
               or (self.kind == "seconds" and not (math.isfinite(value) and value > 0))
               or (self.kind == "duration" and not (math.isfinite(value) and value >= 0)))
        if bad:
            raise ConfigError(f"{label} must be {RANGES[self.kind]}, not {value:g}")
        if self.choices and value not in self.choices:
            raise ConfigError(f"{label} must be one of {', '.join(self.choices)}, not {value!r}")
        if self.kind == "url" and value:
            problem = url_problem(value)
            if problem:   # never the URL itself: its user:password or its path (a webhook's token) may be secret
                raise ConfigError(f"{label} {problem}")
        if self.kind == "directory" and value:
            if not os.path.isdir(value):
                raise ConfigError(f"{label}: {value!r} is not a directory")
            return os.path.abspath(value)   # kept with the migration: a resume from elsewhere finds the same one
        return value

    def spec_value(self, value: Any) -> Any:
        """What the spec field holds for the option's value."""
        return (not value) if self.inverted else value


def url_problem(text: str) -> str | None:
    """What makes `text` no http(s) URL a notification can be posted to, in words that never repeat it (None if it
    is one); "" is no URL and fine (the option is off)."""
    if any(c.isspace() or not c.isprintable() for c in text):
        return "must be one URL, without spaces or control characters"
    try:
        parts = urlsplit(text)
        _ = parts.port   # ValueError for a port that is not a number in range
    except ValueError:
        return "must be an http:// or https:// URL with a valid host and port"
    if parts.scheme.lower() not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "must name a host (http://HOST[:PORT]/PATH)"
    return None


def redacted_url(text: str) -> str:
    """A URL as logs and messages show it: scheme, host and port only. Its user:password never, nor its path and
    query (a webhook's URL often carries its token there, as Slack's does)."""
    try:
        parts = urlsplit(text)
        host, port = parts.hostname or "?", parts.port
    except ValueError:
        return "(an invalid URL)"
    host = f"[{host}]" if ":" in host else host
    hidden = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{hidden}"


def toml_type(value: Any) -> str:
    """How a config file's value reads (never the value itself: it may be a secret)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a fractional number" if math.isfinite(value) else f"{value}"
    if isinstance(value, str):
        return "a string"
    return {list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


OPTIONS: tuple[Option, ...] = (
    Option("copy-workers", "copy_workers", "count"),
    Option("apply-workers", "apply_workers", "count"),
    Option("chunk-size", "chunk_size", "count"),
    Option("batch-size", "batch_size", "count"),
    Option("target-batch-time", "target_batch_time", "text"),
    Option("max-app-latency", "max_app_latency", "text"),
    Option("validate-ahead", "validate_ahead", "flag"),
    Option("apply-batch-size", "apply_batch_size", "count"),
    Option("partitions", "partitions", "count"),
    Option("cutover", "cutover", "text", choices=("auto", "manual")),
    Option("keep-old", "keep_old", "flag"),
    Option("drop-old", "keep_old", "flag", inverted=True),
    Option("cutover-window", "cutover_window_s", "seconds"),
    Option("cutover-attempts", "cutover_attempts", "count"),
    Option("max-lag", "max_lag_events", "limit"),
    Option("max-load", "max_load", "text"),
    Option("critical-load", "critical_load", "text"),
    Option("metadata-schema", "metadata_schema", "text"),
    Option("dry-run", "dry_run", "flag"),
    Option("cloudwatch-max-load", "cloudwatch_max_load", "text"),
    Option("rds-instance", "rds_instance", "text"),
    Option("throttle-replicas", "throttle_replicas", "text"),
    Option("max-replica-lag", "max_replica_lag", "count"),
    Option("max-redo-fill", "max_redo_fill", "limit"),
    Option("lock-wait-timeout", "lock_wait_s", "seconds"),
    Option("lock-tries", "lock_tries", "count"),
    Option("force-kill-blockers-after", "force_kill_blockers_after_s", "duration"),
    Option("force-kill-max-rows", "force_kill_max_rows", "limit"),
    Option("cutover-window-schedule", "cutover_window_schedule", "text"),
    Option("cutover-timezone", "cutover_timezone", "text"),
    Option("target-dsn", "target_dsn", "text"),
    Option("target-table", "target_table", "text"),
    Option("where", "where", "text"),
    Option("defer-indexes", "defer_indexes", "flag"),
    Option("hook", "hook_dir", "directory"),
    Option("notify-url", "notify_url", "url"),
    Option("algorithm", "algorithm", "text", choices=("auto", "copy")),
    Option("alter-foreign-keys-method", "alter_foreign_keys_method", "text", choices=("none", "rebuild")),
)
BY_NAME = {option.name: option for option in OPTIONS}
# the option that sets each field (for a field two options set, the one that says it directly: keep-old)
BY_FIELD = {option.field: option for option in reversed(OPTIONS)}


def option_named(name: str) -> Option | None:
    """The option called `name`, written with dashes or underscores, with or without its leading "--"."""
    return BY_NAME.get(name.strip().removeprefix("--").replace("_", "-"))


def check_spec_values(values: dict[str, Any]) -> None:
    """ConfigError for the first spec field (of `values`, {field: value}) out of its option's range, naming the
    option as on the command line."""
    for field, value in values.items():
        option = BY_FIELD.get(field)
        if option is not None and value is not None and option.kind in ("count", "limit", "seconds", "duration", "url"):
            option.check(value, f"--{option.name}")   # (a directory is looked for when given, not at every resume)
