"""`--defer-indexes`: at init, record the new table's deferrable indexes and drop them; after the copy (stage
`indexes`), add them back in one ALTER before the appliers start (core/deferred_indexes.py says which and why)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pymysql

from core.deferred_indexes import (DEFERRED_INDEXES_OPTION, DeferredIndex, add_indexes, deferrable_indexes,
                                   drop_indexes)
from core.logs import log_event
from core.spec import MigrationSpec
from core.state import StateStore
from core.state_records import Migration
from migration.checks import PreflightError

log = logging.getLogger("stream_osc.indexes")


def indexes_to_defer(conn: pymysql.connections.Connection, spec: MigrationSpec) -> list[DeferredIndex]:
    """The new table's indexes `--defer-indexes` defers, read through `conn`, a session of the new table's server;
    PreflightError when there is none (the flag would do nothing: every secondary index is UNIQUE, or needed by a
    foreign key)."""
    indexes, kept = deferrable_indexes(conn, spec.target_database, spec.new_table)
    if not indexes:
        why = f"; kept for foreign keys: {', '.join(kept)}" if kept else ""
        raise PreflightError(f"--defer-indexes: {spec.qualified_name} after the ALTER has no non-unique secondary "
                             f"index to defer (PRIMARY and UNIQUE keys are kept for the copy{why}); leave the "
                             "option out")
    if kept:
        log_event(log, "indexes kept for foreign keys", table=spec.qualified_name, indexes=", ".join(kept))
    return indexes


def defer_indexes(conn: pymysql.connections.Connection, store: StateStore, migration: Migration,
                  spec: MigrationSpec) -> None:
    """Record the deferred indexes in the migration's options, then drop them from the new table through `conn`,
    a session of its server (recorded first: a table without them is never left without the record of what to
    add back)."""
    indexes = indexes_to_defer(conn, spec)
    recorded = [i.as_json() for i in indexes]
    store.change_options(migration.id, lambda current: {**current.options, DEFERRED_INDEXES_OPTION: recorded})
    drop_indexes(conn, spec.target_database, spec.new_table, indexes)
    log_event(log, "indexes deferred", migration=migration.id, table=spec.new_table,
              indexes=", ".join(i.name for i in indexes))


def deferred(migration: Migration) -> list[DeferredIndex]:
    """The indexes the migration deferred at init (none without `--defer-indexes`)."""
    return [DeferredIndex.from_json(value) for value in migration.options.get(DEFERRED_INDEXES_OPTION) or []]


def build_deferred_indexes(conn: pymysql.connections.Connection, migration: Migration, spec: MigrationSpec,
                           say: Callable[[str], None]) -> None:
    """Add the deferred indexes the new table lacks, in one ALTER through `conn`, a session of the new table's
    server; logged with its duration."""
    indexes = deferred(migration)
    names = ", ".join(i.name for i in indexes)
    say(f"indexes: adding {len(indexes)} deferred indexes to {spec.new_table} ({names})")
    log_event(log, "deferred indexes build started", migration=migration.id, table=spec.new_table, indexes=names)
    started = time.monotonic()
    added = add_indexes(conn, spec.target_database, spec.new_table, indexes)
    seconds = round(time.monotonic() - started, 3)
    log_event(log, "deferred indexes build finished", migration=migration.id, table=spec.new_table,
              added=", ".join(i.name for i in added), already_present=len(indexes) - len(added), seconds=seconds)
    say(f"indexes: {len(added)} added in {seconds:.1f} s ({len(indexes) - len(added)} already present)")
