"""Structured (logfmt) logs on stderr."""
from __future__ import annotations

import logging
import sys
import time


class LogfmtFormatter(logging.Formatter):
    """`ts=… level=… logger=… msg=… key=value …`; extra fields come from `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        parts = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        parts.update(getattr(record, "fields", {}) or {})
        line = " ".join(f"{k}={_quote(v)}" for k, v in parts.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _quote(value: object) -> str:
    text = str(value)
    return f'"{text}"' if (" " in text or "=" in text or not text) else text


def configure_logging(level: str = "WARNING") -> None:
    """Send logfmt lines to stderr at the given level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def log_event(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: object) -> None:
    """Log `msg` with key=value fields."""
    logger.log(level, msg, extra={"fields": fields})
