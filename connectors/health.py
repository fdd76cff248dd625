"""What a failed connector's error means for a migration, in the operator's terms."""
from __future__ import annotations

from connectors.rest import ConnectorState

BINLOG_GONE = "no longer available on the server"   # Debezium's words when its position was purged


def describe_failure(name: str, state: ConnectorState, table: str) -> str:
    """One sentence: what failed and what to do about it."""
    error = state.error_line()
    if BINLOG_GONE in (state.trace or ""):
        return (f"connector {name} cannot continue: its binlog position is no longer on the server (the binlog was "
                "purged while capture was stopped or paused). Changes made since then cannot be captured, so this "
                f"migration cannot finish: run `stream-osc abort --table {table}` and start again, with binlog "
                "retention (binlog_expire_logs_seconds) longer than any pause")
    return f"connector {name} failed: {error} (fix the cause, then `stream-osc resume --table {table}`)"
