"""Helpers for integration tests: connections, leftovers, waiting on conditions."""
from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pymysql
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from cli.command_spec import spec_table
from connectors.rest import ConnectClient
from cutover.swap import SENTRY_COMMENT
from core.context import RunContext
from core.process_owner import pid_space
from core.db import connect, query, scalar
from core.endpoints import Endpoints, KafkaAddress, MySQLAddress
from core.keys import Key, KeyColumn, PrimaryKey
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from core.state_records import Migration, capture_heartbeat_table
from core.table import TablePair
from demo.traffic import create_sample_table
from migration.init_stage import topic_prefix
from migration.teardown import remove_capture
from streams.events import decode_event
from streams.fence import fence_ids_for
from streams.topics import admin
from tests.integration.ledger import create_ledger_table
from throttle.sources import throttle_for
from throttle.yielding import never_yielding
from tests.waiting import wait_for  # noqa: F401  (the integration tests' waits come from here too)


def run_context(endpoints: Endpoints, spec: MigrationSpec, migration: Migration, pair: TablePair) -> RunContext:
    """A worker's run context with the spec's throttle, never yielding to the application's latency."""
    return RunContext(endpoints, spec, migration, pair, throttle_for, never_yielding(1))


def existing_topics(kafka: KafkaAddress) -> set[str]:
    """Every topic the broker lists now."""
    return set(admin(kafka).list_topics(timeout=10).topics)


def db_conn(endpoints: Endpoints):
    return connect(endpoints.mysql)


def leftovers(endpoints: Endpoints, db: str, table: str) -> list[str]:
    """Everything a migration of db.table could have left behind (rows of finished or aborted ones excepted).

    Connectors and topics are found by their name, which holds the table's name but not its schema's: those of a
    recorded migration of a table of the same name in another schema (another test's, running beside) are not
    this table's."""
    found: list[str] = []
    others: set[str] = set()   # prefixes of migrations of another schema's table of this name
    conn = db_conn(endpoints)
    try:
        for name in (helper_table_name(table, 'new'), helper_table_name(table, 'old')):
            if query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                     (db, name)):
                found.append(f"table {db}.{name}")
        if query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='stream_osc' "
                       "AND TABLE_NAME='migrations'"):
            rows = query(conn, "SELECT id, stage, status FROM stream_osc.migrations WHERE db=%s AND tbl=%s "
                               "AND status NOT IN ('done', 'aborted')", (db, table))
            found += [f"metadata row {r}" for r in rows]
            ended = [r[0] for r in query(conn, "SELECT id FROM stream_osc.migrations WHERE db=%s AND tbl=%s "
                                               "AND status IN ('done', 'aborted')", (db, table))]
            captured = {name for i in ended for name in (f"fence_{i}", capture_heartbeat_table(i))}
            found += [f"table stream_osc.{r[0]}" for r in query(
                conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA='stream_osc'")
                if r[0] in captured]
            others = {r[0] for r in query(conn, "SELECT prefix FROM stream_osc.migrations WHERE tbl=%s AND db<>%s",
                                          (table, db))}
    finally:
        conn.close()
    marker = f"streamosc_{re.sub('[^A-Za-z0-9_]', '_', table)}_"
    others_connectors = {prefix.replace("_", "-") for prefix in others}
    found += [f"connector {c}" for c in ConnectClient(endpoints.connect_url).names()
              if c.startswith(marker.replace("_", "-")) and c not in others_connectors]
    found += [f"topic {t}" for t in existing_topics(endpoints.kafka)
              if marker in t and not any(prefix in t for prefix in others)]
    return found


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `stream-osc ARGS` in a subprocess, as an operator would, and wait for it."""
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start_cli(*args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """Start `stream-osc ARGS` in a subprocess; its stdout and stderr go to `log` (appended) if given."""
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-m", "cli.main", *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    finally:
        if log is not None:
            out.close()


def migration_row(conn, db: str, table: str) -> Migration | None:
    """The latest migration of db.table, read fresh from the metadata schema."""
    store = StateStore(conn, "stream_osc")
    return store.latest(db, table)


def latest_migration_id(conn, db: str, table: str) -> int:
    """Id of the latest migration of db.table (0 if none), to tell a new migration from earlier ones."""
    latest = migration_row(conn, db, table)
    return latest.id if latest else 0


def new_migration_row(conn, db: str, table: str, after_id: int) -> Migration | None:
    """The migration of db.table started after `after_id`, once its row exists."""
    latest = migration_row(conn, db, table)
    return latest if latest is not None and latest.id > after_id else None


@contextmanager
def target_schema(endpoints: Endpoints, move: bool, db: str) -> Iterator[object | None]:
    """For a move, a session of the target server in which the schema `db` was just made afresh (closed after);
    None on the same server."""
    if not move:
        yield None
        return
    target = connect(endpoints.target())
    try:
        query(target, f"DROP DATABASE IF EXISTS {db}")
        query(target, f"CREATE DATABASE {db}")
        yield target
    finally:
        target.close()


def table_columns(conn, db: str, table: str) -> list[str]:
    """db.table's column names in order ([] when there is no such table)."""
    return [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                      "AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table))]


def table_is_original(conn, db: str, table: str) -> bool:
    """db.table is still the original (schema unchanged) and no real table holds the _<table>_old name."""
    types = dict(query(conn, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                             "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table)))
    old_comment = query(conn, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                              "AND TABLE_NAME=%s", (db, helper_table_name(table, 'old')))
    return types.get("k") == "int" and "flag" not in types and (not old_comment or
                                                                old_comment[0][0] == SENTRY_COMMENT)


def abort_leftover(conn, db: str, table: str) -> None:
    """`stream-osc abort` of what an earlier, interrupted run left of db.table's migration. The command (a process
    start of half a second, before nearly every migration of the suite) runs only when the metadata holds the
    unfinished migration it would look up; otherwise it would refuse and do nothing."""
    if StateStore(conn, "stream_osc").active(*spec_table(f"{db}.{table}")) is not None:
        cli("abort", "--table", f"{db}.{table}")


def fresh_table(conn, db: str, table: str, rows: int, seed: int) -> None:
    """A new sample table db.table, with whatever an earlier, interrupted run left of its migration removed."""
    abort_leftover(conn, db, table)
    query(conn, f"DROP TABLE IF EXISTS `{db}`.`{helper_table_name(table, 'old')}`")
    create_sample_table(conn, db, table, rows=rows, seed=seed)


def fresh_ledger_table(conn, db: str, table: str, rows: int, writers: int) -> None:
    """A new ledger table db.table (tests/integration/ledger.py), with whatever an earlier, interrupted run left of
    its migration removed."""
    abort_leftover(conn, db, table)
    query(conn, f"DROP TABLE IF EXISTS `{db}`.`{helper_table_name(table, 'old')}`")
    create_ledger_table(conn, db, table, rows=rows, writers=writers)


# Options that keep a migration's copy going after its first chunk (one worker, 100-row batches), long enough for
# the copy to be held there (held_copy)
HELD_COPY = ("--copy-workers", "1", "--batch-size", "100", "--target-batch-time", "0")


@contextmanager
def held_copy(conn, holder, db: str, table: str, migration_id: int) -> Iterator[None]:
    """Hold the copy of a migration started with HELD_COPY once its first chunk is copied, until the block ends:
    `holder` locks the gap above the rows copied so far in the new table (a key the copy has yet to write,
    read FOR UPDATE), and the copy's next write waits for it."""
    wait_for(lambda: [tuple(r) for r in query(conn, "SELECT done FROM stream_osc.chunks WHERE migration_id=%s "
                                                    "AND chunk_no=0", (migration_id,))] == [(1,)],
             60, "the first chunk copied")
    top = scalar(conn, f"SELECT MAX(id) FROM {db}.{table}")
    query(holder, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")   # a gap lock, not a row's
    query(holder, "BEGIN")
    try:
        assert not query(holder, f"SELECT id FROM {db}.{helper_table_name(table, 'new')} WHERE id = %s FOR UPDATE",
                         (top,)), "the copy ended before it could be held"
        yield
    finally:
        query(holder, "ROLLBACK")


def waits_on_session(conn, holder) -> bool:
    """Whether some transaction waits for a row lock `holder`'s transaction holds."""
    return _lock_waits(conn, holder)


def make_an_applier_wait(conn, blocker, db: str, table: str) -> None:
    """Make an applier re-copying id 5 wait on `blocker`'s row lock in the new table (the copy held, so that id 5 is
    copied and the change reaches the applier during the copy); returns once it waits. `blocker` ROLLBACK
    releases it."""
    query(blocker, "BEGIN")
    query(blocker, f"SELECT * FROM {db}.{helper_table_name(table, 'new')} WHERE id = 5 FOR UPDATE")
    query(conn, f"UPDATE {db}.{table} SET c = 'changed during the copy' WHERE id = 5")
    # within the held copy batch's own lock wait (the server's 50 s), which would restart the run
    wait_for(lambda: waits_on_session(conn, blocker), 40, "an applier waiting on the row lock")


def hold_apply_open(endpoints: Endpoints, conn, blocker, db: str, table: str, migration_id: int) -> None:
    """Make apply unable to finish: an applier re-copying id 5 waits on `blocker`'s row lock in the new table.

    The migration must have been started with HELD_COPY. Apply ends as soon as the group's lag is within
    --max-lag, and a change not yet captured is in no lag: made at the copy's end, it could reach the applier
    after apply had already ended (a capture a second late, on a freshly started stack). So the copy is held
    until the applier waits. Returns once the migration is in stage apply with that applier waiting; `blocker`
    ROLLBACK releases it.
    """
    holder = db_conn(endpoints)
    try:
        with held_copy(conn, holder, db, table, migration_id):
            make_an_applier_wait(conn, blocker, db, table)
    finally:
        holder.close()
    wait_for(lambda: migration_row(conn, db, table).stage == "apply" and waits_on_session(conn, blocker), 60,
             "stage apply with an applier waiting on the row lock")


@dataclass
class BatchPlan:
    """What a copy batch and an applier's sort read of a RunContext: the pair, the store, the migration's id and
    the copy's top key. Its chunk rows are the test's own (an id no real migration has)."""

    pair: TablePair
    id: int
    copy_until: Key | None
    stop: threading.Event = field(default_factory=threading.Event)   # a worker's, never set here

    @property
    def migration(self) -> "BatchPlan":
        return self

    def store(self, conn) -> StateStore:
        return StateStore(conn, "stream_osc")


def waiting_on(conn, session, holder) -> bool:
    """Whether `session` waits for a row lock `holder` holds (not merely for some lock)."""
    return _lock_waits(conn, holder, session)


def _lock_waits(conn, holder, session=None) -> bool:
    """Whether `session` (or, without one, any transaction) waits for a row lock `holder` holds."""
    requester = "" if session is None else " AND r.trx_mysql_thread_id=%s"
    ids = (holder.thread_id(),) if session is None else (holder.thread_id(), session.thread_id())
    return bool(query(conn, "SELECT 1 FROM information_schema.INNODB_LOCK_WAITS w "
                            "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                            "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
                            "WHERE b.trx_mysql_thread_id=%s" + requester, ids))


def chunk_progress(conn, migration_id: int) -> tuple[int, int, int]:
    """(rows copied, chunks done, chunks) from the durable chunk table."""
    return tuple(int(v) for v in query(conn, "SELECT COALESCE(SUM(rows_copied),0), COALESCE(SUM(done),0), COUNT(*) "
                                             "FROM stream_osc.chunks WHERE migration_id=%s", (migration_id,))[0])


def status_doc(db: str, table: str) -> dict:
    """`stream-osc status --json` of db.table, parsed."""
    result = cli("status", "--table", f"{db}.{table}", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def waiting_for_cutover(conn, db: str, table: str, *migrate_args: str, log: Path | None = None) -> subprocess.Popen:
    """Start `migrate --cutover manual ARGS` on db.table and return its process once the migration waits, in
    sync, for its cutover (the process keeps running and applying)."""
    earlier = latest_migration_id(conn, db, table)
    proc = start_cli("migrate", "--table", f"{db}.{table}", "--cutover", "manual", *migrate_args, log=log)
    try:
        wait_for(lambda: proc.poll() is not None or getattr(new_migration_row(conn, db, table, earlier), "status", "")
                 == "waiting", 300, "the migration to wait for its cutover")
        assert proc.poll() is None, f"migrate --cutover manual exited ({proc.returncode}) instead of waiting"
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    return proc


def waiting_without_coordinator(conn, db: str, table: str, *migrate_args: str) -> None:
    """A migration of db.table in sync and waiting for its cutover, its coordinator killed (as after a crash)."""
    proc = waiting_for_cutover(conn, db, table, *migrate_args)
    proc.kill()
    proc.wait(30)


def scrape(port: int) -> dict[tuple[str, tuple], float] | None:
    """{(sample name, sorted labels): value} of /metrics on 127.0.0.1:`port`, or None while nothing answers (a
    response cut short counts as none: the process serving it may have exited mid-answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def forms(password: str) -> list[bytes]:
    """The password as it would appear in a document: raw, and JSON-escaped both ways."""
    return [password.encode(), json.dumps(password)[1:-1].encode(), json.dumps(password, ensure_ascii=False)[1:-1]
            .encode()]


ID_KEY = PrimaryKey((KeyColumn("id", "int", "int(11)", None, None),))


def changed_keys(bootstrap: str, topic: str, partitions: int, table: str = "items") -> list[int]:
    """Keys of `table`'s change events in the topic (fence rows left out; its key is one INT `id`), waiting up
    to 30 s for one."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secrets-test", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    keys: list[int] = []
    try:
        for _ in range(150):
            for msg in consumer.consume(100, timeout=0.2):
                event = decode_event(msg.key(), msg.value(), ID_KEY)
                if event is not None and event.table == table:
                    keys.append(event.pk[0])
            if keys:
                return keys
        return keys
    finally:
        consumer.close()


@dataclass(frozen=True)
class RecordedMigration:
    spec: MigrationSpec
    store: StateStore
    migration: Migration


@contextmanager
def recorded_migration(conn, endpoints: Endpoints, db: str, table: str,
                       columns: str = "id INT PRIMARY KEY, v VARCHAR(20)", rows: Sequence[tuple] = (),
                       alter: str = "ADD COLUMN x INT", partitions: int = 2) -> Iterator[RecordedMigration]:
    """db.table created afresh (`columns`, holding `rows`) and a migration of it recorded as init records one:
    validated spec, metadata row and fence table; capture is the test's to start. On leaving, whatever capture
    it started is removed with the migration's metadata, the table and its helper tables (all idempotent: an
    `abort` the test ran may have removed some already)."""
    query(conn, f"CREATE DATABASE IF NOT EXISTS {db}")
    helpers = [f"{db}.{helper_table_name(table, kind)}" for kind in ("new", "old")]
    query(conn, f"DROP TABLE IF EXISTS {db}.{table}, {', '.join(helpers)}")
    query(conn, f"CREATE TABLE {db}.{table} ({columns})")
    for row in rows:
        query(conn, f"INSERT INTO {db}.{table} VALUES ({', '.join(['%s'] * len(row))})", row)
    spec = MigrationSpec(database=db, table=table, alter=alter, partitions=partitions).validate()
    store = StateStore(conn, spec.metadata_schema)
    store.ensure_schema()
    migration = store.create(db, table, spec.alter, topic_prefix(spec), ("id",), {})
    try:
        store.create_fence_table(migration.id, fence_ids_for(spec.partitions))
        yield RecordedMigration(spec, store, migration)
    finally:
        remove_capture(conn, endpoints, spec, migration)
        store.delete(migration.id)
        query(conn, f"DROP TABLE IF EXISTS {db}.{table}, {', '.join(helpers)}")


def owner_of(pid: int) -> str:
    """A lease holder's name (core/process_owner.py) for process `pid` of this pid space."""
    return f"{socket.gethostname()}:{pid}:a1b2c3:{pid_space()}"


def application_session(addr: MySQLAddress, sql_mode: str | None = None,
                        time_zone: str | None = None) -> pymysql.connections.Connection:
    """A session as an application opens it: the server's isolation level and sql_mode (the tool's sessions run
    READ COMMITTED and strict), unless `sql_mode` or `time_zone` say otherwise."""
    conn = pymysql.connect(host=addr.host, port=addr.port, user=addr.user, password=addr.password, autocommit=True,
                           charset="utf8mb4")
    if time_zone is not None:
        query(conn, "SET time_zone = %s", (time_zone,))
    if sql_mode is not None:
        query(conn, "SET sql_mode = %s", (sql_mode,))
    return conn
