"""Foreign keys at the swap: the new table's own constraints added in the cutover's lock; right after the swap the
original's dropped from it and the children's rebuilt to reference the new table (docs/foreign-keys.md).

Every statement runs with foreign_key_checks=0, which makes it metadata only: InnoDB reads no row and takes no
lock on a parent's or a child's rows (measured on MariaDB 10.11: 12 ms to add a constraint to a 1M-row table under
the lock; 16-41 ms to rebuild one of a 300k-row child). What makes the additions sound without that check:
- the new table's constraints are added after the last drain, with the original write-locked: the new table then
  holds exactly the original's rows, which the same constraints hold (InnoDB enforced them on the original), and
  the parents cannot change meanwhile (a write to a parent waits for the lock on its child, the original);
- a child's rebuilt constraint is the one it held to the original, whose rows the swapped-in table holds.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any

import pymysql

from core.db import qualified, query, quote_ident
from core.foreign_keys import CHILD_KEYS_OPTION, FOREIGN_KEYS_OPTION, own_foreign_keys
from core.logs import log_event
from core.spec import MigrationSpec

log = logging.getLogger("stream_osc.cutover")


def _without_checks(conn: pymysql.connections.Connection, sql: str) -> None:
    """`sql` with foreign_key_checks=0 for this statement only (the session's setting is put back)."""
    query(conn, "SET SESSION foreign_key_checks = 0")
    try:
        query(conn, sql)
    finally:
        query(conn, "SET SESSION foreign_key_checks = 1")


def add_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec, options: dict[str, Any]) -> list[str]:
    """In the lock session, after the last drain: the constraints recorded at init, in one ALTER; returns their
    names. Nothing is looked up under the lock (information_schema's view of constraints may open every table of
    the server): the attempt's preparation removed any an earlier attempt left (remove_foreign_keys)."""
    recorded = options.get(FOREIGN_KEYS_OPTION) or []
    if recorded:
        _without_checks(conn, f"ALTER TABLE {qualified(spec.database, spec.new_table)} "
                              + ", ".join(fk["sql"] for fk in recorded))
    return [fk["name"] for fk in recorded]


def remove_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec, options: dict[str, Any],
                        added: list[str] | None = None) -> None:
    """The recorded constraints off the new table again: `added` by this attempt, which rolls back (under the lock:
    dropped without a look), or, before an attempt's lock, whichever one that stopped left (looked up). While the
    new table lags the original, an application DELETE of a parent row would be checked against its rows."""
    if added is None:
        recorded = {fk["name"].lower() for fk in options.get(FOREIGN_KEYS_OPTION) or []}
        if not recorded:
            return
        added = [fk.name for fk in own_foreign_keys(conn, spec.database, spec.new_table)
                 if fk.name.lower() in recorded]
    if added:
        _without_checks(conn, f"ALTER TABLE {qualified(spec.database, spec.new_table)} "
                              + ", ".join(f"DROP FOREIGN KEY {quote_ident(name)}" for name in added))


def drop_old_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec,
                          names: list[str] | None = None) -> int:
    """Right after the swap: the original's own constraints (`names`, read before the lock; else read now), which
    InnoDB kept on it under the old-table name, dropped (metadata only). Kept, they would go on refusing the
    application's DELETE of a parent row the original still references: a child row deleted from the swapped-in
    table stays in the original. Returns how many were."""
    if names is None:
        names = [fk.name for fk in own_foreign_keys(conn, spec.database, spec.old_table)]
    if names:
        started = time.monotonic()
        _without_checks(conn, f"ALTER TABLE {qualified(spec.database, spec.old_table)} "
                              + ", ".join(f"DROP FOREIGN KEY {quote_ident(name)}" for name in names))
        log_event(log, "foreign keys dropped from the old table", table=spec.old_table, constraints=", ".join(names),
                  took_ms=round((time.monotonic() - started) * 1000, 1))
    return len(names)


LOCK_WAIT_TIMEOUT = 1205


def _rebuild_briefly(conn: pymysql.connections.Connection, spec: MigrationSpec, sql: str) -> None:
    """`sql` on a child, each try queueing at most --lock-wait-timeout (whole seconds) in front of the
    application's statements on it, --lock-tries tries a second apart; the last failure is raised (a resume or an
    abort does the rest)."""
    query(conn, "SET SESSION lock_wait_timeout = %s", (max(1, math.ceil(spec.lock_wait_s)),))
    try:
        for tried in range(1, spec.lock_tries + 1):
            try:
                _without_checks(conn, sql)
                return
            except pymysql.err.MySQLError as exc:
                if exc.args[0] != LOCK_WAIT_TIMEOUT or tried == spec.lock_tries:
                    raise
                log_event(log, "child foreign key rebuild waited too long for the child; trying again",
                          logging.WARNING, tried=tried)
                time.sleep(1)
    finally:
        query(conn, "SET SESSION lock_wait_timeout = DEFAULT")


def rebuild_child_keys(conn: pymysql.connections.Connection, spec: MigrationSpec, options: dict[str, Any]) -> int:
    """After the swap (--alter-foreign-keys-method rebuild): each child's constraint, which InnoDB moved with the
    original to the old-table name, dropped and made again under its new name referencing the swapped-in table, in
    one ALTER per child. Done again after a kill, it skips the children already rebuilt; returns how many were."""
    rebuilt = 0
    for child in options.get(CHILD_KEYS_OPTION) or []:
        present = {fk.name.lower(): fk for fk in own_foreign_keys(conn, child["schema"], child["table"])}
        old = present.get(child["name"].lower())
        if child["new_name"].lower() in present or old is None:
            continue   # rebuilt already (or dropped by the application meanwhile: nothing to point anywhere)
        started = time.monotonic()
        _rebuild_briefly(conn, spec, f"ALTER TABLE {qualified(child['schema'], child['table'])} DROP FOREIGN KEY "
                                     f"{quote_ident(old.name)}, {child['sql']}, ALGORITHM=INPLACE, LOCK=NONE")
        log_event(log, "child foreign key rebuilt on the new table", child=f"{child['schema']}.{child['table']}",
                  constraint=child["new_name"], took_ms=round((time.monotonic() - started) * 1000, 1))
        rebuilt += 1
    return rebuilt
