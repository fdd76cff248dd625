"""Structured logs on stderr: logfmt (default) or one JSON object per line.

Fields bound with `bind_fields` (the migration id, once known) are on every line of the process: one
process coordinates or works on one migration, and its worker threads log on its behalf.
"""
from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("logfmt", "json")

_bound: dict[str, object] = {}


def bind_fields(**fields: object) -> None:
    """Add `fields` to every later log line of this process (a None value removes the field)."""
    for name, value in fields.items():
        if value is None:
            _bound.pop(name, None)
        else:
            _bound[name] = value


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The line's fields in order: time, level, logger, message, bound fields, the event's own fields."""
    parts: dict[str, object] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    parts.update(_bound)
    parts.update(getattr(record, "fields", {}) or {})
    return parts


class LogfmtFormatter(logging.Formatter):
    """`ts=… level=… logger=… msg=… key=value …`; extra fields come from `extra={"fields": {...}}`.

    A traceback goes into the `exc` field, so every record stays one line a logfmt parser can read.
    """

    def format(self, record: logging.LogRecord) -> str:
        parts = _fields(record)
        if record.exc_info:
            parts["exc"] = self.formatException(record.exc_info)
        return " ".join(f"{key}={logfmt_value(value)}" for key, value in parts.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line; field values keep their JSON types (numbers stay numbers)."""

    def format(self, record: logging.LogRecord) -> str:
        parts = _fields(record)
        if record.exc_info:
            parts["exc"] = self.formatException(record.exc_info)
        return json.dumps(parts, default=str, ensure_ascii=False)


def logfmt_value(value: object) -> str:
    """A value as logfmt writes it: bare when it is one plain token, else double-quoted with `\\`, `"`,
    newlines and other control characters escaped (as Go's strconv.Quote, which logfmt parsers read)."""
    text = "" if value is None else str(value)
    if text and all(c > " " and c not in '="\\' and c.isprintable() for c in text):
        return text
    return json.dumps(text, ensure_ascii=False)


def configure_logging(level: str = "WARNING", fmt: str = "logfmt") -> None:
    """Send structured lines to stderr at the given level, in `fmt` (logfmt or json)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: object) -> None:
    """Log `msg` with key=value fields."""
    logger.log(level, msg, extra={"fields": fields})
