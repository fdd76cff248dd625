"""--max-redo-fill: the work holds back while the server's redo log fills towards its checkpoint limit (opt-in: a
lazily flushing server sits high under an ordinary load, docs/throttling.md).

Near that limit InnoDB must flush pages before any write may go on: every statement of the server waits, the
application's with the tool's. A copy writes every row through the redo log, so it backs off first, before the
server makes the application pay. MariaDB reports the checkpoint age and its limit (`Innodb_checkpoint_age`,
`Innodb_checkpoint_max_age`); MySQL 8.0.30+ its current and checkpoint LSNs, whose distance is measured against
`innodb_redo_log_capacity`. A server reporting neither (Aurora, older MySQL) is not judged here: Aurora's
throttle is CloudWatch's."""
from __future__ import annotations

import pymysql

from core.db import query

OPTION = "--max-redo-fill"
MARIADB_STATUS = ("Innodb_checkpoint_age", "Innodb_checkpoint_max_age")
MYSQL_STATUS = ("Innodb_redo_log_current_lsn", "Innodb_redo_log_checkpoint_lsn")
STATUS_NAMES = (*MARIADB_STATUS, *MYSQL_STATUS)


def redo_fill_percent(values: dict[str, int], capacity: int | None) -> float | None:
    """How full the redo log is, in percent of what may be written before the server must flush (None: not
    reported). `values` are the global status values of STATUS_NAMES, lower-cased; `capacity` MySQL's
    innodb_redo_log_capacity."""
    age, limit = values.get("innodb_checkpoint_age"), values.get("innodb_checkpoint_max_age")
    if age is not None and limit:
        return 100.0 * age / limit
    current, checkpoint = values.get("innodb_redo_log_current_lsn"), values.get("innodb_redo_log_checkpoint_lsn")
    if current is not None and checkpoint is not None and capacity:
        return 100.0 * max(0, current - checkpoint) / capacity
    return None


def redo_capacity(conn: pymysql.connections.Connection) -> int | None:
    """MySQL's innodb_redo_log_capacity (None where the server has no such variable: MariaDB)."""
    rows = query(conn, "SHOW GLOBAL VARIABLES LIKE 'innodb_redo_log_capacity'")
    return int(rows[0][1]) if rows else None


def redo_reason(fill: float | None, limit: int) -> str | None:
    """Why the work holds back for the redo log (None: go ahead, or the limit is off, or nothing reported)."""
    if not limit or fill is None or fill < limit:
        return None
    return f"redo log {fill:.0f}% full >= {limit}% of its checkpoint limit ({OPTION})"
