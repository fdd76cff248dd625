"""A seeded write load for demos, tests and benchmarks: every kind of change a migration must survive."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import pymysql

from migration.db import connect, qualified, query
from migration.endpoints import MySQLAddress

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

PK_MOVE_BASE = 1_000_000_000   # keys given to rows whose primary key is changed


def create_sample_table(conn: pymysql.connections.Connection, db: str, table: str, rows: int, seed: int = 1) -> None:
    """(Re)create `db.table` with `rows` rows in one server-side statement sequence."""
    name = qualified(db, table)
    query(conn, f"CREATE DATABASE IF NOT EXISTS `{db}`")
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, SAMPLE_TABLE_DDL.format(name=name))
    if rows <= 0:
        return
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
                   'latin', (seq % 10000) / 100, CONCAT('legacy-', seq % 97), NOW(6)
            FROM {source}""")


@dataclass
class TrafficStats:
    """What the load did; `keys_after` holds keys written at or after `mark_time` (wall clock)."""

    writes: int = 0
    retried: int = 0
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    key_log: list[tuple[float, int]] = field(default_factory=list)

    def keys_written_since(self, wall_time: float) -> set[int]:
        return {pk for at, pk in self.key_log if at >= wall_time}


class Traffic(threading.Thread):
    """Writes to `db.table` at about `rate` operations/s until stopped; seeded, so runs repeat."""

    RETRYABLE = {1205, 1213}

    def __init__(self, addr: MySQLAddress, db: str, table: str, seed: int, rate: float = 200.0) -> None:
        super().__init__(daemon=True, name=f"traffic-{table}")
        self.addr, self.db, self.table = addr, db, table
        self.rng = random.Random(seed)
        self.rate = rate
        self.stop_event = threading.Event()
        self.stats = TrafficStats()
        self.moved = 0

    def stop(self) -> TrafficStats:
        self.stop_event.set()
        self.join()
        return self.stats

    def run(self) -> None:
        conn = connect(self.addr, database=self.db)
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                self._one(conn)
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.stop_event.wait(delay)
                else:
                    next_at = time.monotonic()
        finally:
            conn.close()

    def _one(self, conn: pymysql.connections.Connection) -> None:
        ops = (self.op_insert, self.op_update, self.op_update, self.op_delete, self.op_move_pk, self.op_reinsert, self.op_swap_unique)
        op = self.rng.choices(ops, weights=(30, 40, 40, 10, 5, 5, 5))[0]
        args = self._args_for(conn, op)
        started = time.monotonic()
        for attempt in range(10):
            try:
                keys = op(conn, *args)
                break
            except pymysql.err.OperationalError as exc:
                conn.rollback()
                if exc.args[0] in self.RETRYABLE and attempt < 9:
                    self.stats.retried += 1
                    continue
                self.stats.failures.append(f"{op.__name__}: {exc}")
                return
            except pymysql.err.MySQLError as exc:
                conn.rollback()
                self.stats.failures.append(f"{op.__name__}: {exc}")
                return
        now = time.time()
        self.stats.writes += 1
        self.stats.latencies_ms.append((time.monotonic() - started) * 1000)
        self.stats.key_log.extend((now, k) for k in keys)

    def _args_for(self, conn: pymysql.connections.Connection, op) -> tuple:
        """Random existing keys for ops that need them (drawn once, so retries repeat the same op)."""
        if op in (self.op_insert,):
            return ()
        lo_hi = query(conn, f"SELECT MIN(id), MAX(id) FROM {qualified(self.db, self.table)} WHERE id < %s",
                      (PK_MOVE_BASE,))[0]
        lo, hi = (lo_hi[0] or 1), (lo_hi[1] or 1)
        picks = [self.rng.randint(lo, hi), self.rng.randint(lo, hi)]
        return tuple(picks[:2 if op == self.op_swap_unique else 1])

    # operations: each returns the primary keys it touched ------------------------------------------
    def _table(self) -> str:
        return qualified(self.db, self.table)

    def op_insert(self, conn) -> list[int]:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self._table()} (k, u, c, note, amount, updated_at) "
                        "VALUES (%s, NULL, %s, 'ins', %s, NOW(6))",
                        (self.rng.randint(0, 99999), f"ins {self.rng.random()}", self.rng.randint(0, 10**6) / 100))
            return [cur.lastrowid]

    def op_update(self, conn, pk: int) -> list[int]:
        query(conn, f"UPDATE {self._table()} SET k = k + 1, c = %s, amount = %s, updated_at = NOW(6) WHERE id = %s",
              (f"upd {self.rng.random()}", self.rng.randint(0, 10**6) / 100, pk))
        return [pk]

    def op_delete(self, conn, pk: int) -> list[int]:
        query(conn, f"DELETE FROM {self._table()} WHERE id = %s", (pk,))
        return [pk]

    def op_move_pk(self, conn, pk: int) -> list[int]:
        self.moved += 1
        new_pk = PK_MOVE_BASE + self.moved * 1000 + self.rng.randint(0, 999)
        query(conn, f"UPDATE {self._table()} SET id = %s WHERE id = %s", (new_pk, pk))
        return [pk, new_pk]

    def op_reinsert(self, conn, pk: int) -> list[int]:
        conn.begin()
        query(conn, f"DELETE FROM {self._table()} WHERE id = %s", (pk,))
        query(conn, f"INSERT INTO {self._table()} (id, k, u, c, note, amount, updated_at) "
                    "VALUES (%s, 1, NULL, 'reinserted', 're', 1.5, NOW(6))", (pk,))
        conn.commit()
        return [pk]

    def op_swap_unique(self, conn, a: int, b: int) -> list[int]:
        if a == b:
            return []
        conn.begin()
        rows = dict(query(conn, f"SELECT id, u FROM {self._table()} WHERE id IN (%s, %s) FOR UPDATE", (a, b)))
        if len(rows) == 2:
            query(conn, f"UPDATE {self._table()} SET u = NULL WHERE id = %s", (a,))
            query(conn, f"UPDATE {self._table()} SET u = %s WHERE id = %s", (rows[a], b))
            query(conn, f"UPDATE {self._table()} SET u = %s WHERE id = %s", (rows[b], a))
        conn.commit()
        return [a, b]
