"""What a failed connector's error means for a migration, in the operator's terms."""
from __future__ import annotations

from connectors.rest import ConnectorState

# How a purged position shows: Debezium's own check at start (MySQL), or the server refusing the
# position (error 1236; MariaDB: "Could not find GTID state requested by slave in any binlog files")
BINLOG_GONE_MARKERS = ("no longer available on the server", "required binlog files have been purged",
                       "Error code: 1236")


def binlog_gone(state: ConnectorState) -> bool:
    """The failure is the connector's binlog position having been purged: restarting cannot help."""
    return any(marker in (state.trace or "") for marker in BINLOG_GONE_MARKERS)


def describe_failure(name: str, state: ConnectorState, table: str) -> str:
    """One sentence: what failed and what to do about it."""
    error = state.error_line()
    if binlog_gone(state):
        return (f"connector {name} cannot continue: its binlog position is no longer on the server (the binlog was "
                "purged while capture was stopped or paused). Changes made since then cannot be captured, so this "
                f"migration cannot finish: run `stream-osc abort --table {table}` and start again, with binlog "
                "retention (binlog_expire_logs_seconds) longer than any pause")
    return f"connector {name} failed: {error} (fix the cause, then `stream-osc resume --table {table}`)"
