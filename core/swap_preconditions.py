"""Server settings the swap's proof rests on, checked at preflight and again at every cutover attempt: at its
start, and on MariaDB once more inside the lock just before the RENAME is queued (they are global variables an
operator can change while a migration runs).

- **One node takes writes**: a Galera node (a `wsrep_provider` loaded, or `wsrep_on`) and MySQL Group Replication
  in multi-primary mode are refused; both tests lean to refusing (a standalone Percona XtraDB Cluster server, a
  multi-primary Group Replication plugin configured but not running).
- **The RENAME is granted before the writes waiting with it**: on MariaDB, `max_write_lock_count` of at least
  MIN_WRITE_LOCK_COUNT. MySQL 8 renames inside the lock session, before any write is let in: not affected.

The argument: docs/cutover.md, "This is safe only if the RENAME queues on `t` itself"; what was measured:
docs/cutover-measurements.md."""
from __future__ import annotations

import pymysql

from core.db import query

MIN_WRITE_LOCK_COUNT = 1_000


class UnsafeServerSetting(Exception):
    """A server setting under which the swap could lose acknowledged writes."""

    user_facing = True


def swap_setting_problem(variables: dict[str, str], is_mariadb: bool) -> str | None:
    """Why the swap would be unsafe on a server with these global variables; None when it is safe."""
    provider = variables.get("wsrep_provider", "none").strip().lower()
    if provider not in ("", "none") or variables.get("wsrep_on", "OFF").upper() in ("ON", "1"):
        return ("this server is a Galera node (wsrep_provider/wsrep_on): LOCK TABLES holds writes off on this node "
                "only, so a write through another node during the cutover would be lost. Run the migration on a "
                "server that is not part of a multi-writer cluster")
    if variables.get("group_replication_single_primary_mode", "ON").upper() in ("OFF", "0"):
        return ("Group Replication runs in multi-primary mode (group_replication_single_primary_mode=OFF): LOCK "
                "TABLES holds writes off on this member only, so a write through another member during the cutover "
                "would be lost")
    count = variables.get("max_write_lock_count")
    if is_mariadb and count is not None and int(count) < MIN_WRITE_LOCK_COUNT:
        return (f"max_write_lock_count is {count}: below {MIN_WRITE_LOCK_COUNT:,} the server may let writes waiting "
                "on the table run before the cutover's RENAME, on the original table, and they would be lost. Set "
                "it back to its default (SET GLOBAL max_write_lock_count = DEFAULT, and remove it from the server's "
                "configuration)")
    return None


def read_swap_settings(conn: pymysql.connections.Connection) -> dict[str, str]:
    """The global variables swap_setting_problem judges (a server without Galera or Group Replication has not
    their variables)."""
    return {str(name).lower(): str(value) for name, value in
            query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider', "
                        "'group_replication_single_primary_mode', 'max_write_lock_count')")}


def check_swap_settings(conn: pymysql.connections.Connection, is_mariadb: bool) -> None:
    """Raise UnsafeServerSetting when the server's settings now would make the swap unsafe."""
    problem = swap_setting_problem(read_swap_settings(conn), is_mariadb)
    if problem is not None:
        raise UnsafeServerSetting(problem)
