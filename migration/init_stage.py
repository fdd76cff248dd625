"""Stage `init`: checks, new table, metadata, topic, connector, proven start position, copy plan.

Everything is checked before anything is created, the migration row is written before anything it owns,
and whatever init created is removed again if a later step fails, so a failed init leaves the server,
Kafka and Connect as they were, and a killed one leaves a row from which resume and abort clean up.
"""
from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pymysql

from applier.chunks import key_ranges
from connectors.config import DatabaseAccess, connector_config
from connectors.kafka_clients import untranslated
from connectors.rest import POLL_S, ConnectClient, ConnectError, connect_client
from connectors.secrets import (kafka_jaas_reference, password_reference, require_connector_secret,
                                write_connector_secret)
from migration.checks import (PreflightError, check_blocker_privileges, check_load_thresholds, check_privileges,
                              check_server, check_services, check_session_binlog_formats, check_swap_settings_now,
                              check_table, check_target)
from migration.trigger_checks import check_trigger_bodies, check_triggers_movable
from migration.foreign_keys import (carry_foreign_keys, check_children_fit, check_foreign_keys, foreign_key_options,
                                    set_aside_foreign_keys)
from migration.index_stage import defer_indexes, indexes_to_defer
from migration.teardown import Metadata, tear_down
from core.db import DatabaseUnreachable, ServerInfo, connect, qualified, query
from core.keys import Key, KeyColumn, PrimaryKey, dump_key, primary_key
from core.context import target_connection
from core.endpoints import Endpoints
from core.logs import log_event
from core.spec import MigrationSpec
from core.table import is_generated, load_pair
from core.source_check import DEFINITION_OPTION, IDENTITY_OPTION, table_definition, table_identity
from core.state import StateStore
from core.state_records import COPY_UNTIL_OPTION, Migration
from core.stages import Stage, Status
from core.target_identity import record_target
from core.triggers import TRIGGERS_OPTION, read_triggers
from streams.fence import FenceReader, FenceTimeout, fence_consumer, fence_ids_for
from streams.topics import TopicNames, commit_start_offsets, create_capture_heartbeat_topic, create_change_topic

log = logging.getLogger("stream_osc.init")

START_TIMEOUT_S = 120.0
FIRST_STAMP_WAIT_S = 0.25   # how long the first capture-proving fence is awaited before another is written
LAST_STAMP_WAIT_S = 2.0     # the longest wait per fence (the waits double from the first)
PLAN_KILL_S = 5.0           # how long a failed init tries to end the copy plan's statement before waiting for it


def preflight(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
              info: ServerInfo, target: pymysql.connections.Connection | None = None) -> PrimaryKey:
    """All checks that need no change; returns the primary key."""
    check_server(info)
    check_swap_settings_now(conn, info)
    pk = check_table(conn, spec)
    check_foreign_keys(conn, spec)
    if target is not None:
        check_target(conn, target, spec)
    check_privileges(conn, spec)
    check_triggers_movable(conn, spec)
    check_blocker_privileges(conn, spec)
    check_load_thresholds(conn, spec)
    check_services(endpoints, info.flavor)
    require_connector_secret(endpoints)
    check_session_binlog_formats(conn, info)
    return pk


def create_new_table(conn: pymysql.connections.Connection, spec: MigrationSpec, pk: PrimaryKey,
                     target: pymysql.connections.Connection | None = None) -> list[dict[str, str]]:
    """CREATE … LIKE (on another server: the source's own CREATE TABLE, under the target's name), then the
    ALTER; the server's own error if the ALTER fails (and no table left). CREATE … LIKE copies no foreign key: the
    source's are carried around the ALTER and set aside for the cutover (migration/foreign_keys.py); returns them."""
    new = qualified(spec.target_database, spec.new_table)
    where = target or conn
    if target is None:
        query(conn, f"CREATE TABLE {new} LIKE {qualified(spec.database, spec.table)}")
    else:
        definition = query(conn, f"SHOW CREATE TABLE {qualified(spec.database, spec.table)}")[0][1]
        query(target, f"CREATE TABLE {new} (" + definition.split("\n", 1)[1])
    try:
        alter, _ = carry_foreign_keys(conn, spec) if target is None else (spec.alter, [])
        if alter.strip():
            query(where, f"ALTER TABLE {new} {alter}")
        kept = set_aside_foreign_keys(conn, spec) if target is None else []
        if target is None:
            check_children_fit(conn, spec)
        refuse_other_engines(spec, where)
        if target is None:
            check_trigger_bodies(conn, spec)
        new_pk = primary_key(where, spec.target_database, spec.new_table)
        if [n.lower() for n in new_pk.names] != [n.lower() for n in pk.names]:
            raise PreflightError(f"the ALTER changes the primary key (was {', '.join(pk.names)}); that is not "
                                 "supported: the new table is filled and kept in sync by the original's keys")
        for before, after in zip(pk.columns, new_pk.columns):
            if before.comparison != after.comparison:
                raise PreflightError(f"the ALTER changes how primary-key column {before.name} compares "
                                     f"({describe(before)} -> {describe(after)}): rows are matched and key ranges "
                                     "compared by the key in both tables, so it must compare the same; not supported")
        unfilled = columns_nothing_fills(conn, spec, target)
        if unfilled:
            raise PreflightError(f"the ALTER adds column{'s' if len(unfilled) > 1 else ''} {', '.join(unfilled)} "
                                 "NOT NULL without a DEFAULT: the copy writes only the columns the original fills, "
                                 "and the server refuses a row without a value for it (a plain ALTER TABLE gives "
                                 "existing rows the type's implicit value, 0 or ''); add a DEFAULT, the value existing "
                                 "rows are to get")
        return kept
    except pymysql.err.MySQLError as exc:
        query(where, f"DROP TABLE IF EXISTS {new}")
        raise PreflightError(f"the ALTER is not valid for {spec.qualified_name}: {exc.args[1]} "
                             f"(server error {exc.args[0]})") from None
    except BaseException:
        query(where, f"DROP TABLE IF EXISTS {new}")
        raise


def refuse_other_engines(spec: MigrationSpec, where: pymysql.connections.Connection) -> None:
    """PreflightError unless the ALTER leaves the new table InnoDB (preflight found the original so): the copy, the
    re-copies and the swap rest on its row locks and consistent snapshots, and a server makes an engine change by
    copying the table under its lock, even when the ALTER says ALGORITHM=INSTANT (MariaDB 10.11 does)."""
    engine = query(where, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                   (spec.target_database, spec.new_table))[0][0] or ""
    if engine.lower() != "innodb":
        raise PreflightError(f"the ALTER leaves {spec.qualified_name} {engine}: stream-osc migrates InnoDB tables "
                             "into InnoDB tables only (its copy, re-copies and swap rest on InnoDB's row locks and "
                             "consistent snapshots)")


def columns_nothing_fills(conn: pymysql.connections.Connection, spec: MigrationSpec,
                          target: pymysql.connections.Connection | None) -> list[str]:
    """The new table's columns that no source column fills and that take no value of their own: NOT NULL, no
    DEFAULT, not AUTO_INCREMENT, not generated."""
    pair = load_pair(conn, spec.database, spec.table, spec.new_table, spec.alter, target, spec.target_database)
    filled = {name.lower() for name in pair.target_columns}
    columns = query(target or conn, "SELECT COLUMN_NAME, IS_NULLABLE, COLUMN_DEFAULT, EXTRA FROM "
                                    "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                                    "ORDER BY ORDINAL_POSITION", (spec.target_database, spec.new_table))
    return [name for name, nullable, default, extra in columns
            if name.lower() not in filled and nullable == "NO" and default is None
            and "auto_increment" not in (extra or "").lower() and not is_generated(extra)]


def describe(column: KeyColumn) -> str:
    return f"{column.column_type} {column.collation}" if column.collation else column.column_type


def topic_prefix(spec: MigrationSpec) -> str:
    """A connector/topic prefix never used before (Connect keeps offsets per connector name)."""
    return f"streamosc_{re.sub('[^A-Za-z0-9_]', '_', spec.table)}_{uuid.uuid4().hex[:8]}"


def wait_for_recorded_position(connect: ConnectClient, name: str, timeout: float) -> None:
    """Wait until Connect has committed a source offset for the connector (a restart resumes there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if connect.offsets(name):
            return
        state = connect.state(name)
        if state and state.failed:
            raise ConnectError(f"connector {name} failed: {state.error_line()}")
        time.sleep(POLL_S)
    raise ConnectError(f"connector {name} recorded no source offset within {timeout:.0f} s "
                       "(check offset.flush.interval.ms of the Connect worker)")


def connector_access(endpoints: Endpoints) -> DatabaseAccess:
    """The database as the Connect workers reach and trust it."""
    return DatabaseAccess(*endpoints.connector_database, endpoints.connector_ssl_truststore,
                          endpoints.connector_ssl_truststore_password)


def start_capture(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                  info: ServerInfo, migration: Migration) -> None:
    """Topics, capture heartbeat table, connector, and proof that capture runs (a fence seen in every partition)
    before any copy; then the applier group's start offsets committed, so that lag tools see its backlog from the
    start."""
    names = TopicNames(migration.prefix, spec.database, spec.table)
    store = StateStore(conn, spec.metadata_schema)
    store.create_capture_heartbeat_table(migration.id)
    create_change_topic(endpoints.kafka, names.changes, spec.partitions)
    create_capture_heartbeat_topic(endpoints.kafka, names.capture_heartbeat)
    connect = connect_client(endpoints)
    write_connector_secret(endpoints, migration.connector)
    left_out = untranslated(endpoints.kafka.settings())
    if left_out:   # the worker's own settings must cover them (docs/connectivity.md)
        log_event(log, "Kafka client properties not handed to the connector's clients", logging.WARNING,
                  properties=", ".join(left_out))
    captured = (spec.metadata_schema, migration.fence_table), (spec.metadata_schema, migration.capture_heartbeat_table)
    connect.create(migration.connector, connector_config(
        info.flavor, endpoints.mysql, password_reference(endpoints, migration.connector), endpoints.kafka, names,
        *captured, kafka_jaas_reference(endpoints, migration.connector), connector_access(endpoints)))
    connect.wait_running(migration.connector, timeout=START_TIMEOUT_S)
    consumer = fence_consumer(endpoints.kafka, migration.group_id)
    stamped: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        reader = FenceReader(consumer, names.changes, spec.partitions)
        # Debezium may need a moment after RUNNING to reach the binlog: re-stamp until a fence is seen.
        # Any stamp seen proves capture ran from before it, and under heavy writes capture can lag by
        # more than one read: every stamp written so far counts, so a lagging connector still proves it.
        # A stamp written before the connector took its binlog position is never seen: re-stamping soon
        # (then less often) keeps that from costing a long wait (measured: a 2 s wait in some starts).
        wait_s = FIRST_STAMP_WAIT_S
        while True:
            stamped.append(f"init-{uuid.uuid4().hex[:12]}")
            store.write_fence(migration.id, stamped[-1])
            try:
                reader.read({p: 0 for p in range(spec.partitions)}, stamped, wait_s)
                break
            except FenceTimeout:
                wait_s = min(wait_s * 2, LAST_STAMP_WAIT_S)
                state = connect.state(migration.connector)
                if state and state.failed:
                    raise ConnectError(f"connector {migration.connector} failed: {state.error_line()}") from None
                if time.monotonic() > deadline:
                    raise ConnectError(f"connector {migration.connector} captured nothing within "
                                       f"{START_TIMEOUT_S:.0f} s") from None
    finally:
        consumer.close()
    wait_for_recorded_position(connect, migration.connector, START_TIMEOUT_S)
    commit_start_offsets(endpoints.kafka, migration.group_id, names.changes, spec.partitions)


def plan_copy_while_capture_starts(start: Callable[[], None], endpoints: Endpoints, source: str, pk: PrimaryKey,
                                   rows: int) -> list[tuple[Key | None, Key | None]]:
    """Run `start` (the capture's start) while the copy's key ranges are read on a session of their own; returns
    the ranges. Both take about a second at 5M rows (the connector's start; 50 walks of 100,000 index rows), so
    side by side they cost one.

    The plan may be read before capture runs: its ranges are bounds only, and cover every key whatever is
    written since. What must be read after capture runs is the largest key (the copy's end): a row above it is
    written after capture started, and arrives as a change. When the start fails, or the wait for the plan is
    interrupted, the walk stops before its next bound and its statement is killed (it may be waiting for a lock
    on the table), so that init's undo does not wait for it."""
    abandoned = threading.Event()
    session: list[pymysql.connections.Connection] = []

    def plan() -> list[tuple[Key | None, Key | None]]:
        session.append(connect(endpoints.mysql))
        try:
            return key_ranges(session[0], source, pk, None, None, rows, stopped=abandoned.is_set)
        finally:
            session[0].close()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="copy-plan") as aside:
        planned = aside.submit(plan)
        try:
            start()
            return planned.result()
        except BaseException:
            abandoned.set()
            _end_plan(endpoints, planned, session)
            raise


def _end_plan(endpoints: Endpoints, planned: Future, session: list[pymysql.connections.Connection]) -> None:
    """Kill the abandoned plan's statement until its walk has ended (a kill that lands between two statements
    ends nothing), through a session of its own: the caller's may be cut mid-statement by the interrupt."""
    deadline = time.monotonic() + PLAN_KILL_S
    killer: pymysql.connections.Connection | None = None
    try:
        while not planned.done() and time.monotonic() < deadline:
            if session:
                killer = killer or connect(endpoints.mysql)
                query(killer, f"KILL QUERY {int(session[0].thread_id())}")
            wait([planned], timeout=0.1)
    except (pymysql.err.MySQLError, DatabaseUnreachable) as exc:   # the session ended (unknown thread id), or the
        # server is gone: the wait for the walk is then the server's to end
        log_event(log, "the copy plan's statement was not killed", logging.DEBUG, reason=str(exc))
    finally:
        if killer is not None:
            killer.close()


def run_init(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
             info: ServerInfo, coordinator: str,
             on_created: Callable[[Migration], None] = lambda migration: None,
             before_capture: Callable[[], None] = lambda: None,
             instant: Callable[[Migration], bool] = lambda migration: False) -> Migration | None:
    """Run init as `coordinator`; returns the migration at stage `copy`, or at stage `done` when `instant` made the
    change (None for a dry run, after its checks).

    `on_created` is called once the migration row exists (to start its coordinator heartbeat and latency probe);
    `instant` right after it, before anything else is made: True when the server made the change instantly
    (migration/instant_stage.py); `before_capture` just before the connector and the copy plan add their load (to
    take the application's latency baseline without it).
    """
    target = target_connection(endpoints, spec)
    try:
        return _run_init(conn, target, endpoints, spec, info, coordinator, on_created, before_capture, instant)
    finally:
        if target is not None:
            target.close()


def _run_init(conn: pymysql.connections.Connection, target: pymysql.connections.Connection | None,
              endpoints: Endpoints, spec: MigrationSpec, info: ServerInfo, coordinator: str,
              on_created: Callable[[Migration], None], before_capture: Callable[[], None],
              instant: Callable[[Migration], bool]) -> Migration | None:
    """run_init, with the target server's session when the new table moves to another server."""
    pk = preflight(conn, endpoints, spec, info, target)
    # read first: a DDL, TRUNCATE or replacement from here on is caught (core/source_check.py)
    definition = table_definition(conn, spec.database, spec.table)
    identity = table_identity(conn, spec.database, spec.table) or None
    if identity is None:
        log_event(log, "the source's InnoDB table id was not found (not an InnoDB table, or a name stored "
                       "otherwise): a TRUNCATE or a table replaced in place during the migration cannot be caught; "
                       "only its definition is compared", logging.WARNING, table=spec.qualified_name)
    if spec.dry_run:
        return _dry_run(conn, target, spec, pk)
    store = StateStore(conn, spec.metadata_schema)
    store.ensure_schema()
    if store.active(spec.database, spec.table):
        raise PreflightError(f"a migration of {spec.qualified_name} is already in progress")
    # The row comes before anything it owns: a process killed at any later statement leaves a row at stage
    # init, from which resume, migrate and abort remove what exists. The new table under it is provably the
    # tool's: preflight found its name free, and the row (holding the table's active key) was written first.
    triggers = [t.as_dict() for t in read_triggers(conn, spec.database, spec.table)]   # moved at the swap
    migration = store.create(spec.database, spec.table, spec.alter, topic_prefix(spec), pk.names,
                             {**spec_options(spec), DEFINITION_OPTION: definition,
                              IDENTITY_OPTION: identity, TRIGGERS_OPTION: triggers}, coordinator)
    new_table_created = False
    try:
        on_created(migration)
        if instant(migration):   # the server made the change: nothing else is made
            return store.get(migration.id)
        if target is not None:   # before anything is written there (core/target_identity.py)
            record_target(target, store, migration.id, f"{endpoints.mysql.where()} {spec.qualified_name}")
        kept = create_new_table(conn, spec, pk, target)
        new_table_created = True
        recorded = foreign_key_options(conn, spec, kept)
        if recorded:
            store.change_options(migration.id, lambda current: {**current.options, **recorded})
        if spec.defer_indexes:
            defer_indexes(target or conn, store, migration, spec)
        store.create_fence_table(migration.id, fence_ids_for(spec.partitions))
        source = qualified(spec.database, spec.table)
        before_capture()
        ranges = plan_copy_while_capture_starts(lambda: start_capture(conn, endpoints, spec, info, migration),
                                                endpoints, source, pk, spec.chunk_size)
        top = query(conn, f"SELECT {pk.column_list()} FROM {source} ORDER BY "
                          f"{', '.join(c.ident + ' DESC' for c in pk.columns)} LIMIT 1")
        ranges = ranges if top else []   # an empty table has nothing to copy
        store.add_chunks(migration.id, ranges)
        copy_until = dump_key(tuple(top[0])) if top else None
        store.change_options(migration.id, lambda current: {**current.options, COPY_UNTIL_OPTION: copy_until})
        store.enter_stage(migration.id, Stage.COPY)   # (killed before this, init starts over)
        log_event(log, "capture running; copy planned", migration=migration.id, chunks=len(ranges))
        return store.get(migration.id)
    except BaseException:
        # a CREATE refused because the name was taken since preflight leaves that table alone; an abort asked
        # meanwhile (while the instant change waited for the table) keeps the row, marked aborted, as abort does
        tear_down(conn, endpoints, spec, migration, drop_new_table=new_table_created, best_effort=True,
                  metadata=Metadata.WORK if _aborted(store, migration.id) else Metadata.ALL)
        raise


def _aborted(store: StateStore, migration_id: int) -> bool:
    """Whether the migration was aborted (False when that cannot be read: the session may be what failed)."""
    try:
        return store.status(migration_id) == Status.ABORTED
    except pymysql.err.Error:
        return False


def _dry_run(conn: pymysql.connections.Connection, target: pymysql.connections.Connection | None,
             spec: MigrationSpec, pk: PrimaryKey) -> None:
    """The dry run's ALTER on a new table, dropped after (and the indexes --defer-indexes would defer)."""
    create_new_table(conn, spec, pk, target)
    try:
        if spec.defer_indexes:
            indexes_to_defer(target or conn, spec)
    finally:
        query(target or conn, f"DROP TABLE {qualified(spec.target_database, spec.new_table)}")


def spec_options(spec: MigrationSpec) -> dict:
    """The spec fields worth keeping with the migration (so resume uses the same settings)."""
    return {k: v for k, v in vars(spec).items() if k not in ("database", "table", "alter", "dry_run")}
