"""Durable migration state in the metadata schema: the migration row, its chunks, its fence and capture heartbeat
tables. The rows are read back as the records of core/state_records.py; the tables are defined (and an earlier
version's brought up to date) in core/metadata_schema.py."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pymysql

from core.db import qualified, query, query_count, quote_ident
from core.keys import Key, dump_key, load_key
from core.logs import log_event
from core.metadata_schema import create_tables, upgrade_earlier_schema
from core.stages import FINISHED, IllegalTransition, Stage, Status, require_transition
from core.state_records import APP_LATENCY_BASELINE_OPTION, Chunk, ChunkCheck, Migration, capture_heartbeat_table

log = logging.getLogger("stream_osc.state")

FENCE_KEY_COLUMN = "__stream_osc_fence"   # the fence table's key column; its change keys carry it

# How the processes of one migration work together, raised whenever that changes in a way an older process
# would get wrong (2: each copy batch publishes its key range in its chunk's row, and appliers wait only for
# the batch whose range holds a row: applier/uncopied.py). The coordinator stamps it on the migration when it
# claims it; a `worker` process of another protocol refuses to join, and a joined one stops when it changes.
PROTOCOL = 2

# The rows the application latency probes update, one per probing process (throttle/app_latency.py).
LATENCY_PROBES = "latency_probes"
ER_NO_SUCH_TABLE = 1146

# The coordinator lease (migration/lease.py): renewed this often; a coordinator silent for STALE_S is taken
# for dead and another may take over.
HEARTBEAT_S = 2.0
STALE_S = 15.0

_CHUNK_COLUMNS = "chunk_no, start_key, end_key, next_key, rows_copied, done"
_COLUMNS = ("id, db, tbl, alter_sql, stage, status, prefix, COALESCE(pk_columns, JSON_ARRAY(pk_column)), error, "
            "validation_diffs, cutover_blocked_ms, cutover_at, options, protocol")
OPTIONS_WRITE_TRIES = 50   # compare-and-set writes of the options before giving up (each lost to another writer)


class StateStore:
    """Reads and writes the metadata schema; every write is a committed transaction."""

    def __init__(self, conn: pymysql.connections.Connection, schema: str) -> None:
        self.conn = conn
        self.schema = schema
        self._upgraded = False

    def t(self, name: str) -> str:
        return qualified(self.schema, name)

    def ensure_schema(self) -> None:
        """Create the metadata schema and its tables if missing."""
        create_tables(self.conn, self.schema)
        self._upgrade_earlier_schema()

    def _upgrade_earlier_schema(self) -> None:
        """Bring a metadata schema made by an earlier version to this one, once per store."""
        if self._upgraded:
            return
        self._upgraded = True
        upgrade_earlier_schema(self.conn, self.schema)

    def _row(self, row: tuple) -> Migration:
        (mid, db, tbl, alter_sql, stage, status, prefix, pk_columns, error, diffs, blocked, cutover_at, options,
         protocol) = row
        return Migration(mid, db, tbl, alter_sql, Stage(stage), Status(status), prefix, tuple(json.loads(pk_columns)),
                         error, diffs, blocked, cutover_at, json.loads(options or "{}"), protocol)

    def schema_exists(self) -> bool:
        """Whether the metadata schema exists; one made by an earlier version is brought up to date first."""
        exists = bool(query(self.conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                                       "AND TABLE_NAME='migrations'", (self.schema,)))
        if exists:
            self._upgrade_earlier_schema()
        return exists

    def active(self, database: str, table: str) -> Migration | None:
        """The unfinished migration of this table, if any."""
        if not self.schema_exists():
            return None
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE active_key=%s",
                     (f"{database}.{table}",))
        return self._row(rows[0]) if rows else None

    def latest(self, database: str, table: str) -> Migration | None:
        """The most recent migration of this table, finished or not."""
        if not self.schema_exists():
            return None
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE db=%s AND tbl=%s "
                                "ORDER BY id DESC LIMIT 1", (database, table))
        return self._row(rows[0]) if rows else None

    def exists(self, migration_id: int) -> bool:
        return bool(query(self.conn, f"SELECT 1 FROM {self.t('migrations')} WHERE id=%s", (migration_id,)))

    def get(self, migration_id: int) -> Migration:
        migration = self.find(migration_id)
        if migration is None:
            raise LookupError(f"migration {migration_id} is not recorded in {self.schema}.migrations")
        return migration

    def status(self, migration_id: int) -> str | None:
        """The migration's status alone (None if it has no row): what pause, abort and waiting change."""
        rows = query(self.conn, f"SELECT status FROM {self.t('migrations')} WHERE id=%s", (migration_id,))
        return rows[0][0] if rows else None

    def set_status(self, migration_id: int, status: str, only_from: tuple[str, ...]) -> bool:
        """Set the status only if it is one of `only_from` now, so that an operator's pause or abort written
        meanwhile is never overwritten; True if it was set."""
        marks = ", ".join(["%s"] * len(only_from))
        return bool(query_count(self.conn, f"UPDATE {self.t('migrations')} SET status=%s WHERE id=%s "
                                           f"AND status IN ({marks})", (status, migration_id, *only_from)))

    def find(self, migration_id: int) -> Migration | None:
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE id=%s", (migration_id,))
        return self._row(rows[0]) if rows else None

    def create(self, database: str, table: str, alter_sql: str, prefix: str, pk_columns: tuple[str, ...],
               options: dict[str, Any], coordinator: str | None = None) -> Migration:
        """Insert the migration row (stage init), owned by `coordinator` if given."""
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.t('migrations')} (db, tbl, alter_sql, stage, status, prefix, pk_column, "
                        "pk_columns, options, active_key, coordinator, heartbeat_at, protocol) "
                        "VALUES (%s,%s,%s,'init','running',%s,%s,%s,%s,%s,%s,NOW(6),%s)",
                        (database, table, alter_sql, prefix, pk_columns[0], json.dumps(list(pk_columns)),
                         json.dumps(options), f"{database}.{table}", coordinator, PROTOCOL))
            return self.get(cur.lastrowid)

    # coordinator lease ----------------------------------------------------------------------------
    def claim_coordinator(self, migration_id: int, owner: str, stale_s: float, dead_owner: str | None = None) -> bool:
        """Become (or stay) the migration's coordinator unless another one's heartbeat is fresh.

        `dead_owner` names a coordinator known to be dead, whose fresh heartbeat does not count. The claim stamps
        this version's PROTOCOL: joined workers of another one stop (migration/worker_process.py).
        """
        return bool(query_count(self.conn, f"UPDATE {self.t('migrations')} SET coordinator=%s, heartbeat_at=NOW(6), "
                                           f"protocol={PROTOCOL} "
                                           "WHERE id=%s AND (coordinator IS NULL OR coordinator=%s OR coordinator=%s "
                                           "OR heartbeat_at IS NULL OR heartbeat_at < NOW(6) - INTERVAL %s SECOND)",
                                (owner, migration_id, owner, dead_owner, stale_s)))

    def heartbeat(self, migration_id: int, owner: str) -> bool:
        """Renew our lease; False if another coordinator has taken over."""
        return bool(query_count(self.conn, f"UPDATE {self.t('migrations')} SET heartbeat_at=NOW(6) "
                                           "WHERE id=%s AND coordinator=%s", (migration_id, owner)))

    def coordinator(self, migration_id: int) -> str | None:
        """Who holds the migration's lease now, however old its heartbeat (read by the cutover under its lock)."""
        rows = query(self.conn, f"SELECT coordinator FROM {self.t('migrations')} WHERE id=%s", (migration_id,))
        return rows[0][0] if rows else None

    def release_coordinator(self, migration_id: int, owner: str) -> None:
        query(self.conn, f"UPDATE {self.t('migrations')} SET coordinator=NULL WHERE id=%s AND coordinator=%s",
              (migration_id, owner))

    def live_coordinator(self, migration_id: int, stale_s: float) -> tuple[str, float] | None:
        """(owner, seconds since its heartbeat) of a coordinator whose heartbeat is fresh, else None."""
        rows = query(self.conn, f"SELECT coordinator, TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) / 1e6 "
                                f"FROM {self.t('migrations')} WHERE id=%s AND coordinator IS NOT NULL "
                                "AND heartbeat_at >= NOW(6) - INTERVAL %s SECOND", (migration_id, stale_s))
        return (rows[0][0], float(rows[0][1])) if rows else None

    # cutover asked of a running coordinator -----------------------------------------------------------
    def request_cutover(self, migration_id: int) -> None:
        """Ask the migration's running coordinator to cut over now (`stream-osc cutover`, as `pause` asks it to
        pause); an earlier error is cleared, so that one recorded from now on answers this request."""
        query(self.conn, f"UPDATE {self.t('migrations')} SET cutover_requested_at=NOW(6), error=NULL WHERE id=%s",
              (migration_id,))

    def cutover_requested(self, migration_id: int) -> bool:
        return bool(query(self.conn, f"SELECT 1 FROM {self.t('migrations')} WHERE id=%s "
                                     "AND cutover_requested_at IS NOT NULL", (migration_id,)))

    def clear_cutover_request(self, migration_id: int) -> None:
        query(self.conn, f"UPDATE {self.t('migrations')} SET cutover_requested_at=NULL WHERE id=%s", (migration_id,))

    def update(self, migration_id: int, **values: Any) -> None:
        """Set columns of the migration row (status, error, ...; a stage only through enter_stage)."""
        self._update(migration_id, values)

    def _update(self, migration_id: int, values: dict[str, Any], only_from_stage: str | None = None) -> int:
        """update(), only while the row's stage is `only_from_stage` when given; returns rows changed."""
        if "options" in values:
            values["options"] = json.dumps(values["options"])
        if values.get("status") in FINISHED:
            values["active_key"] = None
        sets = ", ".join(f"{quote_ident(k)}=%s" for k in values)
        where, params = ("id=%s", (migration_id,)) if only_from_stage is None else \
            ("id=%s AND stage=%s", (migration_id, str(only_from_stage)))
        return query_count(self.conn, f"UPDATE {self.t('migrations')} SET {sets} WHERE {where}",
                           (*values.values(), *params))

    def change_options(self, migration_id: int, change: Callable[[Migration], dict[str, Any]]) -> dict[str, Any]:
        """Store `change(migration)` as the migration's options, computed from the row as it is when written, and
        return them. `set`, a resume and init each rewrite the whole options document; the write is a
        compare-and-set on the stored text, computed again from the new row when another wrote meanwhile, so
        that neither change is lost."""
        for _ in range(OPTIONS_WRITE_TRIES):
            rows = query(self.conn, f"SELECT {_COLUMNS}, options FROM {self.t('migrations')} WHERE id=%s",
                         (migration_id,))
            if not rows:
                raise LookupError(f"migration {migration_id} is not recorded in {self.schema}.migrations")
            stored = rows[0][-1]
            options = change(self._row(rows[0][:-1]))
            text = json.dumps(options)
            if text == stored or query_count(
                    self.conn, f"UPDATE {self.t('migrations')} SET options=%s WHERE id=%s "
                               "AND CAST(options AS BINARY) = CAST(%s AS BINARY)", (text, migration_id, stored)):
                return options
        raise RuntimeError(f"the options of migration {migration_id} kept changing under {OPTIONS_WRITE_TRIES} "
                           "writes in a row (or the stored text never compares equal to what was read)")

    def enter_stage(self, migration_id: int, stage: Stage, **values: Any) -> None:
        """The one way into a stage: allowed by TRANSITIONS from the stage recorded now, recorded with `values` in
        one committed update (a compare-and-set on that stage, so two processes cannot both move it), then logged."""
        current = self.get(migration_id).stage
        require_transition(current, stage)
        if not self._update(migration_id, {"stage": stage, **values}, only_from_stage=current):
            raise IllegalTransition(f"migration {migration_id} left stage {current} while it was entering {stage} "
                                    f"(now {self.get(migration_id).stage})")
        log_event(log, "stage", migration=migration_id, stage=str(stage))

    def delete(self, migration_id: int) -> None:
        """Remove every metadata row of a migration (used when init fails: nothing is left)."""
        self.delete_work(migration_id)
        query(self.conn, f"DELETE FROM {self.t('migrations')} WHERE id=%s", (migration_id,))

    def delete_work(self, migration_id: int) -> None:
        """Remove the chunk plan, fence table and capture heartbeat table of a migration, keeping its row as
        history."""
        query(self.conn, f"DELETE FROM {self.t('chunks')} WHERE migration_id=%s", (migration_id,))
        self.drop_capture_tables(migration_id)

    def drop_capture_tables(self, migration_id: int) -> None:
        """Drop the tables the migration's connector captures besides the source: fence and capture heartbeat."""
        query(self.conn, f"DROP TABLE IF EXISTS {self.t(f'fence_{migration_id}')}, "
                         f"{self.t(capture_heartbeat_table(migration_id))}")

    # application latency probes (throttle/app_latency.py) ---------------------------------------------
    def create_latency_probes_table(self) -> None:
        query(self.conn, f"CREATE TABLE IF NOT EXISTS {self.t(LATENCY_PROBES)} (migration_id BIGINT NOT NULL, "
                         "probe CHAR(32) NOT NULL, n BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (migration_id, probe)) "
                         "ENGINE=InnoDB")

    def add_latency_probe(self, migration_id: int, probe: str) -> None:
        """The row one process's probe updates: its own, so that probes never wait on each other's row lock."""
        self.create_latency_probes_table()
        query(self.conn, f"INSERT IGNORE INTO {self.t(LATENCY_PROBES)} (migration_id, probe) VALUES (%s, %s)",
              (migration_id, probe))

    def record_app_latency_baseline(self, migration_id: int, baseline_ms: float) -> None:
        """Kept in the migration's options, so a resumed run or a joined worker yields against the latency
        measured before the copy, not one measured while it runs."""
        query(self.conn, f"UPDATE {self.t('migrations')} SET options = "
                         f"JSON_SET(options, '$.{APP_LATENCY_BASELINE_OPTION}', %s) WHERE id=%s",
              (round(baseline_ms, 3), migration_id))

    def stamp_latency_probe(self, migration_id: int, probe: str) -> None:
        query(self.conn, f"UPDATE {self.t(LATENCY_PROBES)} SET n = n + 1 WHERE migration_id=%s AND probe=%s",
              (migration_id, probe))

    def remove_latency_probes(self, migration_id: int) -> None:
        """Forget the migration's probe rows (a missing table means none was ever made)."""
        try:
            query(self.conn, f"DELETE FROM {self.t(LATENCY_PROBES)} WHERE migration_id=%s", (migration_id,))
        except pymysql.err.ProgrammingError as exc:
            if exc.args[0] != ER_NO_SUCH_TABLE:
                raise

    # chunks -------------------------------------------------------------------------------------
    def add_chunks(self, migration_id: int, ranges: list[tuple[Key | None, Key | None]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT IGNORE INTO {self.t('chunks')} "
                            "(migration_id, chunk_no, start_key, end_key, next_key) VALUES (%s,%s,%s,%s,%s)",
                            [(migration_id, n, dump_key(lo), dump_key(hi), dump_key(lo))
                             for n, (lo, hi) in enumerate(ranges)])

    def chunks(self, migration_id: int) -> list[Chunk]:
        """Every chunk of the migration's copy plan, in key order."""
        return [self.chunk(row) for row in query(
            self.conn, f"SELECT {_CHUNK_COLUMNS} FROM {self.t('chunks')} WHERE migration_id=%s ORDER BY chunk_no",
            (migration_id,))]

    def find_chunk(self, migration_id: int, chunk_no: int) -> Chunk:
        rows = query(self.conn, f"SELECT {_CHUNK_COLUMNS} FROM {self.t('chunks')} WHERE migration_id=%s "
                                "AND chunk_no=%s", (migration_id, chunk_no))
        return self.chunk(rows[0])

    @staticmethod
    def chunk(row: tuple) -> Chunk:
        number, start, end, next_key, rows, done = row
        return Chunk(number, load_key(start), load_key(end), load_key(next_key), int(rows), bool(done))

    def record_check(self, migration_id: int, chunk_no: int, offsets: dict[int, int], differing: list[Key]) -> None:
        """The chunk's rows matched in both tables but for `differing`, with the applier group's committed
        `offsets` read before the check began."""
        document = {"offsets": offsets, "at": time.time(), "differing": [dump_key(k) for k in differing]}
        query(self.conn, f"UPDATE {self.t('chunks')} SET checked_from=%s WHERE migration_id=%s AND chunk_no=%s",
              (json.dumps(document), migration_id, chunk_no))

    def checks(self, migration_id: int) -> list[ChunkCheck]:
        """The chunks checked ahead of validation, in key order."""
        checks = []
        for number, start, end, checked_from in query(
                self.conn, f"SELECT chunk_no, start_key, end_key, checked_from FROM {self.t('chunks')} "
                           "WHERE migration_id=%s AND checked_from IS NOT NULL ORDER BY chunk_no", (migration_id,)):
            recorded = json.loads(checked_from)
            checks.append(ChunkCheck(number, load_key(start), load_key(end),
                                     {int(p): int(o) for p, o in recorded["offsets"].items()}, float(recorded["at"]),
                                     tuple(load_key(k) for k in recorded.get("differing", ()))))
        return checks

    def checked_count(self, migration_id: int) -> int:
        """How many chunks were checked ahead of validation (counted by the server, for `status`)."""
        return int(query(self.conn, f"SELECT COUNT(*) FROM {self.t('chunks')} "
                                    "WHERE migration_id=%s AND checked_from IS NOT NULL", (migration_id,))[0][0])

    def copy_progress(self, migration_id: int) -> tuple[int, int, int]:
        """(rows copied, chunks done, chunks total)."""
        row = query(self.conn, f"SELECT COALESCE(SUM(rows_copied),0), COALESCE(SUM(done),0), COUNT(*) "
                               f"FROM {self.t('chunks')} WHERE migration_id=%s", (migration_id,))[0]
        return int(row[0]), int(row[1]), int(row[2])

    # fence ----------------------------------------------------------------------------------------
    def create_fence_table(self, migration_id: int, fence_ids: list[int]) -> None:
        """The table whose rows, captured with the source table, mark positions in every partition."""
        table = self.t(f"fence_{migration_id}")
        query(self.conn, f"CREATE TABLE IF NOT EXISTS {table} ({quote_ident(FENCE_KEY_COLUMN)} BIGINT NOT NULL "
                         "PRIMARY KEY, token VARCHAR(64) NOT NULL) ENGINE=InnoDB")
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT IGNORE INTO {table} VALUES (%s, '')", [(i,) for i in fence_ids])

    def create_capture_heartbeat_table(self, migration_id: int) -> None:
        """The table of the capture heartbeat row, captured into its own topic (never the change topic, so
        that its stamps never count as the appliers' lag). The row is inserted here, before capture starts:
        a running migration only updates it."""
        table = self.t(capture_heartbeat_table(migration_id))
        query(self.conn, f"CREATE TABLE IF NOT EXISTS {table} (id TINYINT NOT NULL PRIMARY KEY, "
                         "stamped_us BIGINT NOT NULL) ENGINE=InnoDB")
        query(self.conn, f"INSERT IGNORE INTO {table} VALUES (1, 0)")

    def fence_ids(self, migration_id: int) -> list[int]:
        return [r[0] for r in query(self.conn, f"SELECT {quote_ident(FENCE_KEY_COLUMN)} FROM "
                                               f"{self.t(f'fence_{migration_id}')} ORDER BY 1")]

    def write_fence(self, migration_id: int, token: str) -> None:
        """Stamp every fence row with `token` in one autocommitted statement."""
        query(self.conn, f"UPDATE {self.t(f'fence_{migration_id}')} SET token=%s", (token,))
