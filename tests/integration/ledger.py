"""The application's own record of acknowledged writes: the oracle of the data tests.

Writers run unthrottled, each in its own session, and note every write the server acknowledged:
rows inserted, increments of the writer's own counter row, rows deleted. After any number of swaps
the final table must hold exactly that record. Nothing is excluded: no time window, no key set
taken from the tool's idea of when the swap happened.

Writers never retry. A write the server refused for a lock conflict (deadlock, lock-wait timeout) is not in the
record and is noted as a refusal; the ledger attributes every deadlock on its schema from the server's own report
(tests/integration/deadlocks.py): one a stream-osc statement took part in, a 1213 no report explains and any
lock-wait timeout are among `errors()` (the writers share no row: alone, they never wait for one another's locks,
so every lock-wait timeout is one more than the same workload alone has); a deadlock between application
transactions alone is reported.
"""
from __future__ import annotations

import hashlib
import random
import threading
import zlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pymysql

from core.db import connect, qualified, query
from core.endpoints import MySQLAddress
from tests.integration.deadlocks import LOCK_CONFLICTS, Attribution, ConflictWatch, Refusal, refusal

LEDGER_TABLE_DDL = """CREATE TABLE {name} (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  writer INT NOT NULL,
  seq INT NOT NULL,
  counter BIGINT NOT NULL DEFAULT 0,
  payload VARCHAR(64) NOT NULL DEFAULT '',
  KEY writer_seq (writer, seq)
) ENGINE=InnoDB"""

COUNTER_SEQ = -1   # the seq of each writer's counter row
SLOW_WRITE_S = 0.05   # acknowledged writes at least this slow are noted with their time


def create_ledger_table(conn: pymysql.connections.Connection, db: str, table: str, rows: int, writers: int) -> None:
    """(Re)create db.table with `rows` filler rows and one counter row per writer (ids 1..writers)."""
    name = qualified(db, table)
    query(conn, f"CREATE DATABASE IF NOT EXISTS `{db}`")
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, LEDGER_TABLE_DDL.format(name=name))
    query(conn, f"INSERT INTO {name} (id, writer, seq) VALUES " +
          ", ".join(f"({w}, {w}, {COUNTER_SEQ})" for w in range(1, writers + 1)))
    step = 50_000
    for lo in range(writers + 1, writers + rows + 1, step):
        hi = min(lo + step - 1, writers + rows)
        query(conn, f"INSERT INTO {name} (id, writer, seq, payload) SELECT seq, 0, seq, MD5(seq) "
                    f"FROM `{db}`.seq_{lo}_to_{hi}")


class AcknowledgedWriter(threading.Thread):
    """One application session writing until stopped; subclasses implement `write` (one write, noting in
    their own record what the server acknowledged) and may give their own `session`.

    A refused write (MySQLError) is noted in `errors` and the session is opened again; one refused for a lock
    conflict (1213, 1205) is noted in `refusals` instead, never retried, and the session goes on. `write` may note
    errors of its own in `errors`. `writes` counts the writes that returned; one returning False ends the session.
    """

    def __init__(self, addr: MySQLAddress, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.addr = addr
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.refusals: list[Refusal] = []
        self.writes = 0
        self.doing = ""   # the write under way, named in an error's note

    def session(self) -> pymysql.connections.Connection:
        """An application's session: its statements carry no tag, so the tool counts them (throttle/app_activity.py)."""
        return connect(self.addr, tagged=False)

    def write(self, conn: pymysql.connections.Connection) -> bool | None:
        raise NotImplementedError

    def run(self) -> None:
        conn = self.session()
        try:
            while not self.stop_event.is_set():
                try:
                    if self.write(conn) is False:
                        return
                    self.writes += 1
                except pymysql.err.MySQLError as exc:
                    refused = refusal(exc, conn, self.doing)
                    if refused is not None:
                        self.refusals.append(refused)
                        continue
                    self.errors.append(f"{time.strftime('%H:%M:%S')} {self.name} {self.doing}: "
                                       f"{type(exc).__name__}: {exc}")
                    conn.close()
                    time.sleep(0.05)
                    conn = self.session()
        finally:
            conn.close()


@dataclass
class WriterRecord:
    """What one writer was told: committed inserts (id -> seq), deletes, increments; and the unknowns."""

    inserted: dict[int, int] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    increments: int = 0
    uncertain_increments: int = 0   # the connection broke before the answer: applied or not
    slow: list[tuple[float, float]] = field(default_factory=list)   # (wall-clock start, seconds) of slow writes


class LedgerWriter(AcknowledgedWriter):
    """One application session writing as fast as it can and recording what was acknowledged."""

    def __init__(self, addr: MySQLAddress, db: str, table: str, writer: int, seed: int) -> None:
        super().__init__(addr, name=f"writer-{writer}")
        self.name_sql, self.writer = qualified(db, table), writer
        self.rng = random.Random(seed * 1000 + writer)
        self.record = WriterRecord()
        self.seq = 0

    def write(self, conn: pymysql.connections.Connection) -> None:
        roll = self.rng.random()
        started, clock = time.time(), time.monotonic()
        if roll < 0.5:
            self.seq += 1
            self.doing = f"insert seq {self.seq}"
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {self.name_sql} (writer, seq, payload) VALUES (%s, %s, %s)",
                            (self.writer, self.seq, f"w{self.writer}s{self.seq}"))
                self.record.inserted[cur.lastrowid] = self.seq
        elif roll < 0.85:
            self.doing = f"increment id {self.writer}"
            try:
                query(conn, f"UPDATE {self.name_sql} SET counter = counter + 1 WHERE id = %s", (self.writer,))
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in LOCK_CONFLICTS:   # refused for a lock conflict: certainly not applied
                    self.record.uncertain_increments += 1
                raise
            self.record.increments += 1
        else:
            mine = [k for k in self.record.inserted if k not in self.record.deleted]
            if mine:
                victim = self.rng.choice(mine)
                self.doing = f"delete id {victim}"
                query(conn, f"DELETE FROM {self.name_sql} WHERE id = %s", (victim,))
                self.record.deleted.add(victim)
        took = time.monotonic() - clock
        if took >= SLOW_WRITE_S:
            self.record.slow.append((started, took))


class Ledger:
    """N unthrottled writers on one table; `check` compares the final table with their record."""

    def __init__(self, addr: MySQLAddress, db: str, table: str, writers: int = 8, seed: int = 1) -> None:
        self.addr, self.db, self.table = addr, db, table
        self.writers = [LedgerWriter(addr, db, table, w, seed) for w in range(1, writers + 1)]
        self.attribution: Attribution | None = None   # once stopped

    def __enter__(self) -> "Ledger":
        self.watch = ConflictWatch(self.addr, [self.db], f"ledger on {self.db}.{self.table}")
        conn = connect(self.addr)
        try:
            self.filler = self._filler(conn)   # the rows no writer touches, as they were before any swap
        finally:
            conn.close()
        for writer in self.writers:
            writer.start()
        return self

    def filler_rewritten(self, ids: Iterable[int], payload: str) -> None:
        """Take into the expected filler rows an acknowledged write of the test's own that set their payload
        (each row as create_ledger_table made it: id = seq, counter 0, payload MD5(seq))."""
        count, checksum = self.filler
        for pk in ids:
            checksum += zlib.crc32(f"{pk}:{pk}:0:{payload}".encode()) ** 2 - \
                zlib.crc32(f"{pk}:{pk}:0:{hashlib.md5(str(pk).encode()).hexdigest()}".encode()) ** 2
        self.filler = (count, checksum)

    def _filler(self, conn: pymysql.connections.Connection, name: str | None = None) -> tuple[int, int]:
        """(count, checksum) of the filler rows (writer 0), every column the ledger wrote: the sum of the squares
        of the rows' CRC32s (CRC32 is linear: the same change in two rows can cancel in a plain sum)."""
        crc = "CRC32(CONCAT_WS(':', id, seq, counter, payload))"
        row = query(conn, f"SELECT COUNT(*), COALESCE(SUM({crc} * {crc}), 0) "
                          f"FROM {name or qualified(self.db, self.table)} WHERE writer = 0")[0]
        return int(row[0]), int(row[1])

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for writer in self.writers:
            writer.stop_event.set()
        for writer in self.writers:
            writer.join()
        if self.attribution is None:
            self.attribution = self.watch.attribute(r for w in self.writers for r in w.refusals)
            self.attribution.report()

    @property
    def writes(self) -> int:
        return sum(w.writes for w in self.writers)

    def wait_for_writes(self, more: int, timeout: float = 60.0) -> None:
        """Block until the writers acknowledged `more` further writes (they are running, not stalled)."""
        target = self.writes + more
        deadline = time.monotonic() + timeout
        while self.writes < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"writers stalled: {self.writes} of {target} writes after {timeout:.0f} s")
            time.sleep(0.01)

    def missing(self, conn: pymysql.connections.Connection, where: tuple[str, str] | None = None) -> list[str]:
        """Every acknowledged write the final table (the writers' own, or `where` = (db, table), e.g. on
        another server) does not show (empty when the promise held); once the writers stopped, with what the
        attribution of their lock conflicts found wrong (`conflicts`: a write refused because of the tool is one
        the application lost to it)."""
        name = qualified(*(where or (self.db, self.table)))
        problems: list[str] = self.conflicts()
        filler = self._filler(conn, name)
        if filler != self.filler:
            problems.append(f"filler rows (count, checksum) {filler}, before the migration {self.filler}")
        for w in self.writers:
            rec = w.record
            rows = {pk: (seq, counter, payload) for pk, seq, counter, payload in
                    query(conn, f"SELECT id, seq, counter, payload FROM {name} WHERE writer = %s", (w.writer,))}
            counter = rows.get(w.writer, (None, None, None))[1]
            if counter is None or not rec.increments <= counter <= rec.increments + rec.uncertain_increments:
                problems.append(f"writer {w.writer}: counter {counter}, acknowledged increments {rec.increments} "
                                f"(+{rec.uncertain_increments} uncertain)")
            for pk, seq in rec.inserted.items():
                if pk in rec.deleted:
                    if pk in rows:
                        problems.append(f"writer {w.writer}: row {pk} deleted (acknowledged) but present")
                elif rows.get(pk, (None,))[0] != seq:
                    problems.append(f"writer {w.writer}: inserted row {pk} (seq {seq}) is "
                                    f"{'missing' if pk not in rows else 'wrong: seq ' + str(rows[pk][0])}")
                elif rows[pk][2] != f"w{w.writer}s{seq}":
                    problems.append(f"writer {w.writer}: inserted row {pk} has payload {rows[pk][2]!r}")
        return problems

    def worst_latency(self, since: float = 0.0, until: float = float("inf")) -> float:
        """The longest an acknowledged write took among those running at some point between two wall-clock
        times (0.0 when none took SLOW_WRITE_S)."""
        return max((took for w in self.writers for start, took in w.record.slow
                    if start <= until and start + took >= since), default=0.0)

    def errors(self) -> list[str]:
        """The writers' errors and, once stopped, what the attribution of their lock conflicts found wrong."""
        return [e for w in self.writers for e in w.errors] + self.conflicts()

    def conflicts(self) -> list[str]:
        """Once stopped: deadlocks a stream-osc statement took part in, refusals no report explains, and every
        lock-wait timeout (the same workload alone has none: its writers share no row)."""
        if self.attribution is None:
            return []
        return self.attribution.problems() + [f"{self.attribution.what}: {r} (the workload alone has none)"
                                              for r in self.attribution.lock_wait_timeouts]

    def assert_kept(self, conn: pymysql.connections.Connection,
                    moved: tuple[pymysql.connections.Connection, tuple[str, str]] | None = None) -> None:
        """Every acknowledged write is in the final table: the source table, with no write refused, or for a move
        `moved` = (target session, (db, table)) the target's table (the source, renamed away, refuses late writes
        by design)."""
        if moved is not None:
            assert self.conflicts() == []
            assert self.missing(moved[0], where=moved[1]) == []
        else:
            assert self.errors() == []
            assert self.missing(conn) == []
