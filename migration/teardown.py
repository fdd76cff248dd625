"""The one removal of what a migration made, used by init's undo, abort, a refused ALTER and cleanup.

What each caller keeps differs only in the options below; the order is always capture first
(connector, topics, fence and capture heartbeat tables, Redis keys), then tables, then metadata, so
that a removal stopped half-way can be run again and finishes the job.
"""
from __future__ import annotations

import logging
from enum import Enum

import pymysql
import redis

from connectors.rest import connect_client
from connectors.secrets import remove_connector_secret
from core import redis_keys
from core.db import qualified, query, scalar
from core.context import target_connection
from core.endpoints import Endpoints
from core.logs import log_event
from core.spec import MigrationSpec
from core.state import StateStore
from core.state_records import Migration
from core.stages import Stage, Status
from core.target_identity import check_target, forget_token
from core.triggers import recorded_triggers, settle_triggers
from cutover.foreign_keys import drop_old_foreign_keys, rebuild_child_keys
from cutover.swap import SENTRY_COMMENT, drop_sentry
from streams.topics import TopicNames, delete_topics

log = logging.getLogger("stream_osc.teardown")


class Metadata(Enum):
    """What of the migration's metadata rows to remove."""

    KEEP = "keep"          # cleanup: the row and its copy plan stay as history
    WORK = "work"          # abort: the row stays (marked aborted), the copy plan goes
    ALL = "all"            # init's undo, a refused ALTER: as if the migration never was


def tear_down(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
              migration: Migration | None, *, drop_new_table: bool, drop_old_table: bool = False,
              metadata: Metadata, best_effort: bool = False) -> bool:
    """Remove the migration's capture, the tables asked for, and its metadata; True if all of it went.

    With `best_effort` a connector or topic that cannot be removed (Connect or Kafka down) is logged
    and the metadata is kept, so that the same command run again finishes the removal.
    """
    removed = True
    if migration is not None:
        try:
            remove_capture(conn, endpoints, spec, migration)
        except Exception as exc:  # noqa: BLE001 - Connect's, Kafka's and Redis's errors have no common base
            if not best_effort:
                raise
            log_event(log, "could not remove capture; the row stays so that a rerun finishes", logging.ERROR,
                      connector=migration.connector, reason=str(exc))
            removed = False
    if migration is not None:   # before the new table goes: it may hold originals a killed cutover moved there
        settle_triggers(conn, spec, recorded_triggers(migration.options), migration.id)
    if drop_new_table:
        drop_target_table(conn, endpoints, spec, migration)
        drop_sentry(conn, spec)
    if drop_old_table:
        query(conn, f"DROP TABLE IF EXISTS {qualified(spec.database, spec.old_table)}")
    if migration is not None and removed:
        store = StateStore(conn, spec.metadata_schema)
        if metadata is Metadata.ALL:
            store.delete(migration.id)
        elif metadata is Metadata.WORK:
            store.delete_work(migration.id)
    return removed


def remove_capture(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                   migration: Migration) -> None:
    """Remove the connector (and the password file it read), topics, fence and capture heartbeat tables, latency
    probe rows and Redis keys of a migration."""
    connect_client(endpoints).remove(migration.connector)
    remove_connector_secret(endpoints, migration.connector)
    delete_topics(endpoints.kafka, TopicNames(migration.prefix, spec.database, spec.table).all())
    store = StateStore(conn, spec.metadata_schema)
    store.drop_capture_tables(migration.id)
    store.remove_latency_probes(migration.id)
    redis_keys.clear_migration(redis.Redis.from_url(endpoints.redis_url), migration.id)


def drop_target_table(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                      migration: Migration | None = None) -> None:
    """Drop the table the copy fills: the helper beside the original, or the table on the target server (whose
    name init found free there, so the table is the migration's), and the token init wrote there. A target
    server other than the one init wrote to is refused (TargetMismatch) before anything is dropped there: its
    table of the same name is someone else's."""
    target = target_connection(endpoints, spec)
    try:
        options = _options_now(conn, spec, migration) if target is not None else {}
        if target is not None:
            check_target(target, spec.metadata_schema, options, endpoints.target(spec.target_dsn).where())
        query(target or conn, f"DROP TABLE IF EXISTS {qualified(spec.target_database, spec.new_table)}")
        if target is not None:
            forget_token(target, spec.metadata_schema, options)
    finally:
        if target is not None:
            target.close()


def verify_target(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                  migration: Migration) -> None:
    """Raise TargetMismatch unless the target DSN reaches the server init wrote to: `abort` asks before it changes
    anything, so that, refused, it can be run again once the environment names the target."""
    target = target_connection(endpoints, spec)
    if target is None:
        return
    try:
        check_target(target, spec.metadata_schema, _options_now(conn, spec, migration),
                     endpoints.target(spec.target_dsn).where())
    finally:
        target.close()


def _options_now(conn: pymysql.connections.Connection, spec: MigrationSpec,
                 migration: Migration | None) -> dict:
    """The migration's options as stored now (init records the target's identity after its row is read)."""
    if migration is None:
        return {}
    current = StateStore(conn, spec.metadata_schema).find(migration.id)
    return (current or migration).options


def tables_swapped(conn: pymysql.connections.Connection, spec: MigrationSpec) -> bool:
    """True if the swap's RENAME ran, whatever the metadata says (a coordinator can die between the RENAME
    and recording it): the new table's name is free and the old name holds a real table, not the sentry.
    On a move to another server the RENAME takes the original's name away: the original's name is free."""
    new_exists = scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                        (spec.database, spec.table if spec.target_server else spec.new_table))
    old_comment = scalar(conn, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                               "AND TABLE_NAME=%s", (spec.database, spec.old_table))
    return not new_exists and old_comment is not None and old_comment != SENTRY_COMMENT


def finish_swapped(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                   migration: Migration) -> None:
    """The cleanup of a migration whose tables are swapped: capture removed, the original kept under the old
    name (whatever --drop-old said: nobody asked for it to go this way), the children's foreign keys rebuilt on the
    new table if the swap stopped before, the migration recorded as done."""
    drop_old_foreign_keys(conn, spec)
    rebuild_child_keys(conn, spec, migration.options)
    tear_down(conn, endpoints, spec, migration, drop_new_table=False, metadata=Metadata.KEEP)
    StateStore(conn, spec.metadata_schema).enter_stage(migration.id, Stage.DONE, status=Status.DONE, error=None)
    log_event(log, "swapped migration finished by abort", logging.WARNING, migration=migration.id)
