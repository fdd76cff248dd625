"""A seeded write load for demos, tests and benchmarks, and the application's own record of it.

Each writer session makes every kind of change a migration must survive (inserts, updates, deletes,
primary-key changes, delete+reinsert, swaps of UNIQUE values, a REPLACE whose UNIQUE value deletes another
row) and records, for every key it wrote,
the row its last acknowledged write left (or that there is none). That record, never the tool's own
idea of when the swap happened, is the oracle of `Traffic.check` (docs/invariants.md, 8).
"""
from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import product
from typing import Any

import pymysql
import pymysql.cursors

from core.db import DatabaseUnreachable, connect, qualified, query
from core.endpoints import MySQLAddress

SAMPLE_TABLE_DDL = """CREATE TABLE {name} (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  k INT NOT NULL DEFAULT 0,
  u VARCHAR(40) NULL,
  c VARCHAR(120) NOT NULL,
  note VARCHAR(60) CHARACTER SET latin1 NOT NULL DEFAULT '',
  amount DECIMAL(12,2) NULL,
  legacy VARCHAR(20) NULL,
  updated_at DATETIME(6) NOT NULL,
  UNIQUE KEY u (u),
  KEY k (k)
) ENGINE=InnoDB"""

COLUMNS = ("k", "u", "c", "note", "amount", "legacy", "updated_at")   # every column but the key
Row = tuple[Any, ...]        # values of COLUMNS
State = Row | None           # None: no row under the key
K, U = COLUMNS.index("k"), COLUMNS.index("u")
SEEDED_AT = datetime(2024, 1, 1)   # seeded row n has updated_at SEEDED_AT + n s: known, unlike NOW()
MOVE_GAP = 1_000_000         # a primary-key change moves a row this far above every key in use


@dataclass(frozen=True)
class SampleRows:
    """The rows create_sample_table wrote, recomputed: the expected state of every key never written."""

    rows: int
    seed: int

    def state(self, pk: int) -> State:
        if not 1 <= pk <= self.rows:
            return None
        digest = hashlib.md5(str(pk + self.seed).encode()).hexdigest()
        return ((pk * 7919 + self.seed) % 100000, f"u-{pk}", f"row {pk} {digest}", "latin",
                Decimal(pk % 10000) / 100, f"legacy-{pk % 97}", SEEDED_AT + timedelta(seconds=pk))


def create_sample_table(conn: pymysql.connections.Connection, db: str, table: str, rows: int,
                        seed: int = 1) -> SampleRows:
    """(Re)create `db.table` with `rows` rows in one server-side statement sequence; returns what it wrote."""
    name = qualified(db, table)
    query(conn, f"CREATE DATABASE IF NOT EXISTS `{db}`")
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, SAMPLE_TABLE_DDL.format(name=name))
    mariadb = "mariadb" in str(query(conn, "SELECT VERSION()")[0][0]).lower()
    if not mariadb:
        query(conn, "SET SESSION cte_max_recursion_depth = 100000")
    step = 50_000
    for lo in range(1, rows + 1, step):
        hi = min(lo + step - 1, rows)
        source = (f"`{db}`.seq_{lo}_to_{hi}" if mariadb else
                  f"(WITH RECURSIVE s(seq) AS (SELECT {lo} UNION ALL SELECT seq + 1 FROM s WHERE seq < {hi}) "
                  "SELECT seq FROM s) AS s")
        query(conn, f"""INSERT INTO {name} (id, k, u, c, note, amount, legacy, updated_at)
            SELECT seq, (seq * 7919 + {seed}) % 100000, CONCAT('u-', seq), CONCAT('row ', seq, ' ', MD5(seq + {seed})),
                   'latin', (seq % 10000) / 100, CONCAT('legacy-', seq % 97),
                   TIMESTAMP'{SEEDED_AT:%Y-%m-%d %H:%M:%S}' + INTERVAL seq SECOND
            FROM {source}""")
    return SampleRows(max(rows, 0), seed)


@dataclass
class TrafficStats:
    """What the load did: `writes` were acknowledged, `uncertain` lost the connection before the answer."""

    writes: int = 0
    uncertain: int = 0
    # writes the server refused for a lock conflict (error code, op, session id, time.monotonic()): never retried,
    # not acknowledged, so not in the record; whose the conflict was is told by the server's deadlock report
    refused: list[tuple[int, str, int, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class WriteCheck:
    """The final table against the application's record of acknowledged writes."""

    rows: int                      # rows in the final table
    keys_written: int              # keys whose expected state is the last acknowledged write's
    uncertain: int                 # writes of unknown outcome (both states were accepted)
    columns: tuple[str, ...]       # columns compared: those of the record the final table still has
    mismatches: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass
class _Op:
    """One application write: its statements, the keys it touches and what it does to their rows."""

    name: str
    keys: tuple[int, ...]
    run: Callable[[pymysql.connections.Connection], int | None]   # an AUTO_INCREMENT insert returns its key
    effect: Callable[[tuple[State, ...]], tuple[State, ...]] = lambda states: states
    inserted: Row | None = None    # the row of an AUTO_INCREMENT insert (its key is known only afterwards)
    new_key: int | None = None     # a key the op may create, to be written by later ops too


def _set(row: Row, **values: Any) -> Row:
    return tuple(values.get(column, value) for column, value in zip(COLUMNS, row))


def _statement(sql: str, args: tuple) -> Callable[[pymysql.connections.Connection], None]:
    def run(conn: pymysql.connections.Connection) -> None:
        query(conn, sql, args)
    return run


def connection_lost(exc: pymysql.err.MySQLError) -> bool:
    """The session broke before the server's answer arrived: the write may or may not have committed."""
    return isinstance(exc, pymysql.err.InterfaceError) or bool(exc.args and exc.args[0] in {1053, 1927, 2006,
                                                                                              2013, 2055})


class _Writer(threading.Thread):
    """One application session: writes only keys it owns, so its record alone says what they hold."""

    LOCK_CONFLICTS = frozenset({1205, 1213})   # lock wait timeout, deadlock: nothing was applied
    OPS = ("insert", "update", "delete", "move", "reinsert", "swap", "replace")
    WEIGHTS = (30, 80, 10, 5, 5, 5, 5)

    def __init__(self, traffic: Traffic, index: int, seed: int) -> None:
        super().__init__(daemon=True, name=f"traffic-{traffic.table}-{index}")
        self.t = traffic
        self.rng = random.Random(seed * 1009 + index)
        self.pool = list(range(index + 1, traffic.original.rows + 1, traffic.writers))   # keys it may write
        self.expected: dict[int, frozenset[State]] = {}
        self.uncertain_inserts: list[Row] = []
        self.stats = TrafficStats()

    def run(self) -> None:
        interval = self.t.writers / self.t.rate if self.t.rate else 0.0
        next_at = time.monotonic()
        conn = self._connect()
        try:
            while conn is not None and not self.t.stop_event.is_set():
                conn = self._one(conn)
                if interval:
                    next_at = max(next_at + interval, time.monotonic() - 1.0)   # catch up at most 1 s
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        self.t.stop_event.wait(delay)
        except Exception as exc:  # noqa: BLE001 - a dead writer must show in the stats, not only on stderr
            self.stats.failures.append(f"writer stopped: {exc!r}")
        finally:
            if conn is not None and conn.open:
                conn.close()

    def _connect(self) -> pymysql.connections.Connection | None:
        """A new session, waiting while the server is unreachable; None once the load is stopped."""
        while not self.t.stop_event.is_set():
            try:
                return connect(self.t.addr, database=self.t.db, tagged=False)   # the application's
            except DatabaseUnreachable:
                self.t.stop_event.wait(0.1)
        return None

    def _reconnect(self, conn: pymysql.connections.Connection) -> pymysql.connections.Connection | None:
        if conn.open:
            conn.close()
        return self._connect()

    def _rollback(self, conn: pymysql.connections.Connection) -> pymysql.connections.Connection | None:
        """Undo a refused write's transaction (a session that broke meanwhile is rolled back by the server)."""
        try:
            conn.rollback()
            return conn
        except pymysql.err.MySQLError:
            return self._reconnect(conn)

    def _one(self, conn: pymysql.connections.Connection) -> pymysql.connections.Connection | None:
        kind = self.rng.choices(self.OPS, weights=self.WEIGHTS)[0]
        op = getattr(self, f"_plan_{kind if self.pool else 'insert'}")()
        started = time.monotonic()
        try:
            new_key = op.run(conn)
        except pymysql.err.MySQLError as exc:
            if connection_lost(exc):
                self._record(op, None, certain=False)
                return self._reconnect(conn)
            session = conn.thread_id()
            conn = self._rollback(conn)
            if exc.args and exc.args[0] in self.LOCK_CONFLICTS:   # not acknowledged, not retried: counted
                self.stats.refused.append((exc.args[0], op.name, session, time.monotonic()))
            else:
                self.stats.failures.append(f"{op.name}: {exc}")
            return conn
        self.stats.latencies_ms.append((time.monotonic() - started) * 1000)
        self._record(op, new_key, certain=True)
        return conn

    def _states(self, pk: int) -> frozenset[State]:
        return self.expected[pk] if pk in self.expected else frozenset({self.t.original.state(pk)})

    def _record(self, op: _Op, new_key: int | None, certain: bool) -> None:
        """Note what an acknowledged write left; of a write of unknown outcome, both states."""
        if op.inserted is not None:
            if certain:
                self.t.issue_key(new_key, self.stats)
                self.expected[new_key] = frozenset({op.inserted})
                self.pool.append(new_key)
            else:
                self.uncertain_inserts.append(op.inserted)
        else:
            befores = [self._states(k) for k in op.keys]
            afters: list[set[State]] = [set() for _ in op.keys]
            for combination in product(*befores):
                for i, state in enumerate(op.effect(combination)):
                    afters[i].add(state)
            for key, before, after in zip(op.keys, befores, afters):
                self.expected[key] = frozenset(after if certain else after | before)
            if op.new_key is not None:
                self.pool.append(op.new_key)
        if certain:
            self.stats.writes += 1
        else:
            self.stats.uncertain += 1
        self.t.note_write()

    # operations, each planned once with this writer's random numbers (a retry repeats the same write) ----
    def _values(self) -> tuple[str, Decimal, datetime]:
        return f"w {self.rng.random()}", Decimal(self.rng.randint(0, 10**6)) / 100, datetime.now()

    def _plan_insert(self) -> _Op:
        c, amount, at = self._values()
        row = (self.rng.randint(0, 99999), None, c, "ins", amount, None, at)

        def run(conn: pymysql.connections.Connection) -> int:
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {self.t.name} (k, c, note, amount, updated_at) "
                            "VALUES (%s, %s, 'ins', %s, %s)", (row[0], c, amount, at))
                return cur.lastrowid
        return _Op("insert", (), run, inserted=row)

    def _plan_update(self) -> _Op:
        """k is incremented, not set: an increment lost earlier still shows after later ones."""
        pk = self.rng.choice(self.pool)
        c, amount, at = self._values()

        def effect(s: tuple[State, ...]) -> tuple[State, ...]:
            return (None if s[0] is None else _set(s[0], k=s[0][K] + 1, c=c, amount=amount, updated_at=at),)
        return _Op("update", (pk,), _statement(f"UPDATE {self.t.name} SET k = k + 1, c = %s, amount = %s, "
                                               "updated_at = %s WHERE id = %s", (c, amount, at, pk)), effect)

    def _plan_delete(self) -> _Op:
        pk = self.rng.choice(self.pool)
        return _Op("delete", (pk,), _statement(f"DELETE FROM {self.t.name} WHERE id = %s", (pk,)), lambda s: (None,))

    def _plan_move(self) -> _Op:
        pk, new_pk = self.rng.choice(self.pool), self.t.move_target()
        return _Op("move", (pk, new_pk), _statement(f"UPDATE {self.t.name} SET id = %s WHERE id = %s", (new_pk, pk)),
                   lambda s: (None, s[0]) if s[0] is not None else s, new_key=new_pk)

    def _plan_reinsert(self) -> _Op:
        pk = self.rng.choice(self.pool)
        c, amount, at = self._values()
        row = (self.rng.randint(0, 99999), None, c, "re", amount, None, at)

        def run(conn: pymysql.connections.Connection) -> None:
            conn.begin()
            query(conn, f"DELETE FROM {self.t.name} WHERE id = %s", (pk,))
            query(conn, f"INSERT INTO {self.t.name} (id, k, c, note, amount, updated_at) "
                        "VALUES (%s, %s, %s, 're', %s, %s)", (pk, row[0], c, amount, at))
            conn.commit()
        return _Op("reinsert", (pk,), run, lambda s: (row,))

    def _plan_swap(self) -> _Op:
        """Two rows exchange their UNIQUE values, as the server holds them; the record predicts the result."""
        if len(self.pool) < 2:
            return self._plan_update()
        a, b = self.rng.sample(self.pool, 2)

        def run(conn: pymysql.connections.Connection) -> None:
            conn.begin()
            held = dict(query(conn, f"SELECT id, u FROM {self.t.name} WHERE id IN (%s, %s) FOR UPDATE", (a, b)))
            if len(held) == 2:
                query(conn, f"UPDATE {self.t.name} SET u = NULL WHERE id = %s", (a,))
                query(conn, f"UPDATE {self.t.name} SET u = %s WHERE id = %s", (held[a], b))
                query(conn, f"UPDATE {self.t.name} SET u = %s WHERE id = %s", (held[b], a))
            conn.commit()

        def effect(s: tuple[State, ...]) -> tuple[State, ...]:
            if s[0] is None or s[1] is None:
                return s
            return _set(s[0], u=s[1][U]), _set(s[1], u=s[0][U])
        return _Op("swap", (a, b), run, effect)

    def _plan_replace(self) -> _Op:
        """REPLACE writes row a with row b's UNIQUE value, so the server removes row b, and row a if it had one.
        With both rows there, MariaDB logs one statement as a delete of a and an update of b's key to a; when b
        has no row or no UNIQUE value, only a is replaced."""
        if len(self.pool) < 2:
            return self._plan_update()
        a, b = self.rng.sample(self.pool, 2)
        c, amount, at = self._values()
        k = self.rng.randint(0, 99999)

        def run(conn: pymysql.connections.Connection) -> None:
            conn.begin()
            held = query(conn, f"SELECT u FROM {self.t.name} WHERE id = %s FOR UPDATE", (b,))
            query(conn, f"REPLACE INTO {self.t.name} (id, k, u, c, note, amount, updated_at) "
                        "VALUES (%s, %s, %s, %s, 'rep', %s, %s)", (a, k, held[0][0] if held else None, c, amount, at))
            conn.commit()

        def effect(s: tuple[State, ...]) -> tuple[State, ...]:
            taken = None if s[1] is None else s[1][U]
            return (k, taken, c, "rep", amount, None, at), (s[1] if taken is None else None)
        return _Op("replace", (a, b), run, effect)


class Traffic:
    """`writers` sessions writing to `db.table` at about `rate` writes/s in all (None: as fast as they can).

    Seeded, so the choices repeat (the keys AUTO_INCREMENT hands out depend on timing). `original`
    describes the table's rows before the load (create_sample_table's answer).
    """

    def __init__(self, addr: MySQLAddress, db: str, table: str, original: SampleRows, seed: int,
                 writers: int = 1, rate: float | None = 200.0) -> None:
        self.addr, self.db, self.table, self.name = addr, db, table, qualified(db, table)
        self.original, self.writers, self.rate = original, writers, rate
        self.stop_event = threading.Event()
        self._lock = threading.Condition()
        self._writes = 0
        self._issued: set[int] = set()
        self._top = original.rows
        self._sessions = [_Writer(self, i, seed) for i in range(writers)]

    def start(self) -> None:
        for session in self._sessions:
            session.start()

    def stop(self) -> TrafficStats:
        self.stop_event.set()
        for session in self._sessions:
            session.join()
        return self.stats

    @property
    def stats(self) -> TrafficStats:
        total = TrafficStats()
        for s in (session.stats for session in self._sessions):
            total.writes += s.writes
            total.uncertain += s.uncertain
            total.refused += s.refused
            total.failures += s.failures
            total.latencies_ms += s.latencies_ms
        return total

    def note_write(self) -> None:
        with self._lock:
            self._writes += 1
            self._lock.notify_all()

    def wait_for_writes(self, more: int, timeout: float = 60.0) -> None:
        """Block until the load made `more` further writes (it is running, not stalled)."""
        with self._lock:
            target = self._writes + more
            if not self._lock.wait_for(lambda: self._writes >= target, timeout):
                raise AssertionError(f"traffic stalled: {self._writes} of {target} writes after {timeout:.0f} s")

    def move_target(self) -> int:
        """A key far above every key in use, so no AUTO_INCREMENT insert in flight can take it."""
        with self._lock:
            self._top += MOVE_GAP
            self._issued.add(self._top)
            return self._top

    def issue_key(self, pk: int, stats: TrafficStats) -> None:
        """Note the key an insert got; one used before means AUTO_INCREMENT went back (invariant 9)."""
        with self._lock:
            if pk in self._issued or self.original.state(pk) is not None:
                stats.failures.append(f"insert: AUTO_INCREMENT gave key {pk}, which was in use before")
            self._issued.add(pk)
            self._top = max(self._top, pk)

    def check(self, conn: pymysql.connections.Connection) -> WriteCheck:
        """Compare the final table, row by row, with the application's record; call after `stop`.

        A key some writer wrote must hold the state its last acknowledged write left (for a write of
        unknown outcome, the state before or after it). A key no writer wrote must hold its seeded row,
        recomputed from the seed by SampleRows: no table the tool made or kept (not even the old one)
        is the reference, so a row the tool lost or changed shows whenever it happened. A row under
        any other key must be an insert of unknown outcome, each at most once. Nothing is left out:
        there is no time window and no key set taken from the tool's idea of when the swap happened.
        Columns the ALTER dropped are not compared; columns it added are the schema checks' business.
        """
        expected: dict[int, frozenset[State]] = {}
        spare: Counter[Row] = Counter()
        for session in self._sessions:
            expected.update(session.expected)
        have = {r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
                                          "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (self.db, self.table))}
        positions = [i for i, column in enumerate(COLUMNS) if column in have]
        columns = tuple(COLUMNS[i] for i in positions)

        def project(state: State) -> Row | None:
            return None if state is None else tuple(state[i] for i in positions)

        for session in self._sessions:
            spare.update(project(row) for row in session.uncertain_inserts)
        mismatches: list[str] = []
        seen: set[int] = set()
        select = ", ".join(["id", *(f"`{c}`" for c in columns)])
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(f"SELECT {select} FROM {self.name}")
            for pk, *values in cur:
                row, states = tuple(values), self._expected_states(expected, pk)
                seen.add(pk)
                accepted = {project(s) for s in states}
                if row in accepted:
                    continue
                if states == {None} and spare[row] > 0:
                    spare[row] -= 1
                    continue
                wanted = " or ".join(self._describe(columns, s) for s in accepted)
                mismatches.append(f"key {pk}: holds {dict(zip(columns, row))}, expected {wanted}")
        for pk in sorted((set(expected) | set(range(1, self.original.rows + 1))) - seen):
            states = self._expected_states(expected, pk)
            if None not in states:
                wanted = " or ".join(self._describe(columns, project(s)) for s in states)
                mismatches.append(f"key {pk}: missing, expected {wanted}")
        stats = self.stats
        return WriteCheck(len(seen), len(expected), stats.uncertain, columns, mismatches)

    def _expected_states(self, expected: dict[int, frozenset[State]], pk: int) -> frozenset[State]:
        return expected[pk] if pk in expected else frozenset({self.original.state(pk)})

    @staticmethod
    def _describe(columns: tuple[str, ...], row: Row | None) -> str:
        return "no row" if row is None else str(dict(zip(columns, row)))
