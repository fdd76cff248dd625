"""Every acknowledged write survives a migration whatever the primary key and the names.

Writers change keys while the table is migrated: a composite key moves to another tenant, a
`_general_ci` string key changes only in case, accent or trailing space (equal under the collation,
different bytes), a BINARY(16) UUID whose last bytes are zero changes, temporal and decimal keys move.
The oracle is each writer's own record of the rows it was told committed, byte for byte: the final
table must hold exactly those rows, nothing else. Python never decides two keys are the same row;
the record only follows what each writer did to the keys it owns.

Writers never retry. An UPDATE moving a row to another key locks the old key and then the new key's place in
the index, and a delete and re-insert lock gaps their neighbours (other writers' keys): the writers can deadlock
among themselves. A statement the server refused for a lock conflict changed nothing and is not in the record;
every deadlock is attributed from the server's own report (tests/integration/deadlocks.py): one a stream-osc
statement took part in fails the test, one between the writers alone is reported. Lock-wait timeouts during the
migration must be no more than the writers' own rate alone (measured before the migration) allows.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from core.db import qualified, query, query_count, quote_ident
from core.endpoints import MySQLAddress
from core.spec import MigrationSpec
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.deadlocks import ConflictWatch, assert_no_tool_deadlock
from tests.integration.helpers import application_session, db_conn, leftovers, wait_for
from tests.integration.ledger import AcknowledgedWriter

pytestmark = pytest.mark.integration

DB = "osc_any_key"
WRITERS = 3
SEED_SLOTS = 1_500          # per writer
Key = tuple[Any, ...]


@dataclass
class Shape:
    """A table shape: its key columns' DDL, and the key of writer w's slot n (and its variants)."""

    key_ddl: str
    key_columns: tuple[str, ...]
    make_key: Callable[[int, int], Key]
    variant: Callable[[Key, random.Random], Key | None] = lambda key, rng: None   # same row under the collation
    sql_mode: str | None = None   # the application sessions' own, when not the server's


# the values the server reads back as text (not dates), and the date the change events give for each of them
ZERO_FAMILY = ("0000-00-00", "2024-00-10", "2024-05-00", "0000-05-10", date(1970, 1, 1), date(2024, 5, 1))
DEFAULT_FAMILY = ("0000-00-00", "2024-00-10", "0000-05-10", date(2000, 1, 1), date(1970, 1, 1))
ZERO_DATETIMES = ("0000-00-00 00:00:00.000", "2024-00-10 12:00:00.500", "2024-05-00 00:00:00.000",
                  datetime(1970, 1, 1), datetime(2024, 5, 1, 7, 30))
ZERO_TIMESTAMPS = ("0000-00-00 00:00:00", datetime(1970, 1, 1, 5, 30, 1))   # the first second a TIMESTAMP holds


def recase(key: Key, rng: random.Random) -> Key:
    """The key in other letters' case, an accent toggled or a trailing space toggled: equal under
    utf8mb4_general_ci (PAD SPACE), different bytes."""
    text = key[0]
    choice = rng.random()
    if choice < 0.6:
        changed = "".join(c.swapcase() if c.isalpha() and rng.random() < 0.5 else c for c in text)
        changed = changed if changed != text else text.swapcase()
    elif choice < 0.8:
        changed = text.replace("e", "é", 1) if "e" in text else text.replace("é", "e", 1)
    else:
        changed = text[:-1] if text.endswith(" ") else text + " "
    return (changed if changed != text else text.swapcase(),)   # always other bytes: the UPDATE must touch it


def uuid_key(w: int, n: int) -> Key:
    body = random.Random(w * 1_000_003 + n).randbytes(15)
    raw = bytes([w]) + body
    return (raw[:12] + b"\0\0\0\0",) if n % 3 == 0 else (raw,)   # zero tails: the binlog drops them


SHAPES = {
    "composite_int": Shape("tenant INT NOT NULL, seq BIGINT NOT NULL", ("tenant", "seq"),
                           lambda w, n: (n % 7, n * WRITERS + w),
                           lambda key, rng: ((key[0] + rng.randint(1, 6)) % 7, key[1])),   # to another tenant
    "varchar_general_ci": Shape("k VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL", ("k",),
                                lambda w, n: (f"w{w}-User{n}@example.com",), recase),
    "varchar_bin": Shape("k VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL", ("k",),
                         lambda w, n: (f"w{w}-User{n}@example.com",)),
    "binary16_uuid": Shape("id BINARY(16) NOT NULL", ("id",), uuid_key),
    "temporal_decimal": Shape("d DATE NOT NULL, at DATETIME(6) NOT NULL, "
                              "ts TIMESTAMP(3) NOT NULL DEFAULT '2000-01-01 00:00:00', amount DECIMAL(12,2) NOT NULL",
                              ("d", "at", "ts", "amount"),
                              lambda w, n: (date(2001, 1, 1) + timedelta(days=n % 400),
                                            datetime(2020, 3, 29, 1, 30) + timedelta(seconds=n, microseconds=w),
                                            datetime(2021, 10, 31, 1, 30) + timedelta(milliseconds=n * 1000 + w),
                                            (Decimal(n % 50) + Decimal(w) / 100).quantize(Decimal("0.01")))),
    # Debezium sends a zero date, or one with a zero month or day, in a NOT NULL column as the epoch: the
    # change's key then names 1970-01-01, which is also a key of its own here
    "zero_dates": Shape("d DATE NOT NULL, n INT NOT NULL", ("d", "n"),
                        lambda w, n: (ZERO_FAMILY[n % len(ZERO_FAMILY)], n // len(ZERO_FAMILY) * WRITERS + w),
                        sql_mode=""),
    # ... and as the column's DEFAULT where it has one
    "zero_dates_default": Shape("d DATE NOT NULL DEFAULT '2000-01-01', n INT NOT NULL", ("d", "n"),
                                lambda w, n: (DEFAULT_FAMILY[n % len(DEFAULT_FAMILY)],
                                              n // len(DEFAULT_FAMILY) * WRITERS + w),
                                sql_mode=""),
    "zero_datetimes": Shape("at DATETIME(3) NOT NULL, ts TIMESTAMP NOT NULL, n INT NOT NULL", ("at", "ts", "n"),
                            lambda w, n: (ZERO_DATETIMES[n % len(ZERO_DATETIMES)], ZERO_TIMESTAMPS[n % 2],
                                          n // len(ZERO_DATETIMES) * WRITERS + w),
                            sql_mode=""),
}


@dataclass
class Record:
    """What one writer was told committed: its live rows (key -> counter), in its own slots."""

    rows: dict[int, tuple[Key, int]] = field(default_factory=dict)
    next_slot: int = SEED_SLOTS


class KeyWriter(AcknowledgedWriter):
    """An application session changing keys as fast as it can; the record follows every acknowledged
    statement. Its sessions use a UTC+05:30 time zone (the tool's are UTC)."""

    def __init__(self, addr: MySQLAddress, table: str, shape: Shape, writer: int) -> None:
        super().__init__(addr, name=f"key-writer-{writer}")
        self.table, self.shape, self.writer = table, shape, writer
        self.rng = random.Random(7919 * writer + len(table))
        self.record = Record({n: (shape.make_key(writer, n), 0) for n in range(SEED_SLOTS)})
        self.where = " AND ".join(f"{quote_ident(c)} = %s" for c in shape.key_columns)
        self.columns = ", ".join(quote_ident(c) for c in shape.key_columns)

    def session(self) -> pymysql.connections.Connection:
        return application_session(self.addr, self.shape.sql_mode, time_zone="+05:30")

    def statement(self, conn: pymysql.connections.Connection, sql: str, params: tuple) -> None:
        """Run one statement of the application; it must touch exactly its one row (the row the record
        says is there): a row the tool lost or duplicated would show here too, not only at the end. A statement
        refused raises (AcknowledgedWriter.run notes it): the record is changed only after it returned."""
        self.doing = f"{sql.split()[0]} {params!r}"
        touched = query_count(conn, sql, params)
        if touched != 1:
            self.errors.append(f"{sql.split()[0]} {params!r} touched {touched} rows, the record says 1")

    def write(self, conn: pymysql.connections.Connection) -> None:
        rows, roll = self.record.rows, self.rng.random()
        slot = self.rng.choice(list(rows))
        key, counter = rows[slot]
        values = ", ".join(["%s"] * (len(key) + 2))
        if roll < 0.35:
            self.statement(conn, f"UPDATE {self.table} SET counter = counter + 1 WHERE {self.where}", key)
            rows[slot] = (key, counter + 1)
        elif roll < 0.55:                                    # a key change: the row moves to a new slot
            new_slot, self.record.next_slot = self.record.next_slot, self.record.next_slot + 1
            new_key = self.shape.make_key(self.writer, new_slot)
            sets = ", ".join(f"{quote_ident(c)} = %s" for c in self.shape.key_columns)
            self.statement(conn, f"UPDATE {self.table} SET {sets} WHERE {self.where}", (*new_key, *key))
            del rows[slot]
            rows[new_slot] = (new_key, counter)
        elif roll < 0.7:                                     # same row under the collation, other bytes
            other = self.shape.variant(key, self.rng)
            if other is None:
                return
            sets = ", ".join(f"{quote_ident(c)} = %s" for c in self.shape.key_columns)
            self.statement(conn, f"UPDATE {self.table} SET {sets} WHERE {self.where}", (*other, *key))
            rows[slot] = (other, counter)
        elif roll < 0.8:                                     # delete, then insert the key again (maybe recased)
            self.statement(conn, f"DELETE FROM {self.table} WHERE {self.where}", key)
            del rows[slot]
            again = self.shape.variant(key, self.rng) or key
            self.statement(conn, f"INSERT INTO {self.table} ({self.columns}, counter, note) VALUES ({values})",
                  (*again, 0, f"again {slot}"))
            rows[slot] = (again, 0)
        elif roll < 0.9:
            self.statement(conn, f"DELETE FROM {self.table} WHERE {self.where}", key)
            del rows[slot]
        else:
            new_slot, self.record.next_slot = self.record.next_slot, self.record.next_slot + 1
            new_key = self.shape.make_key(self.writer, new_slot)
            self.statement(conn, f"INSERT INTO {self.table} ({self.columns}, counter, note) VALUES ({values})",
                  (*new_key, 0, f"again {new_slot}"))
            rows[new_slot] = (new_key, 0)


def create_table(conn: pymysql.connections.Connection, db: str, table: str, shape: Shape,
                 writers: list[KeyWriter]) -> None:
    query(conn, f"CREATE DATABASE IF NOT EXISTS {quote_ident(db)}")
    query(conn, f"DROP TABLE IF EXISTS {qualified(db, table)}")
    query(conn, f"CREATE TABLE {qualified(db, table)} ({shape.key_ddl}, counter BIGINT NOT NULL, "
                f"note VARCHAR(40) NOT NULL, PRIMARY KEY ({', '.join(quote_ident(c) for c in shape.key_columns)})) "
                "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    session = writers[0].session()
    try:
        marks = ", ".join(["%s"] * (len(shape.key_columns) + 2))
        with session.cursor() as cur:
            cur.executemany(f"INSERT INTO {qualified(db, table)} VALUES ({marks})",
                            [(*key, 0, f"seed {n}") for w in writers for n, (key, _) in w.record.rows.items()])
    finally:
        session.close()


def final_rows(writer: KeyWriter, db: str, table: str) -> set[tuple]:
    """The table's rows (key, counter), read in a writer's session (its time zone)."""
    session = writer.session()
    try:
        return {tuple(r) for r in query(session, f"SELECT {writer.columns}, counter FROM {qualified(db, table)}")}
    finally:
        session.close()


def migrate_under_key_changes(endpoints, db: str, table: str, shape: Shape) -> None:
    writers = [KeyWriter(endpoints.mysql, qualified(db, table), shape, w) for w in range(WRITERS)]
    conn = db_conn(endpoints)
    try:
        create_table(conn, db, table, shape, writers)
    finally:
        conn.close()
    watch = ConflictWatch(endpoints.mysql, [db], f"writers changing keys of {db}.{table}")
    for writer in writers:
        writer.start()
    try:
        wait_for(lambda: sum(w.writes for w in writers) >= 300, what="writes before the migration")
        spec = MigrationSpec(algorithm="copy", database=db, table=table, alter="ADD COLUMN extra INT NULL",
                             copy_workers=2,
                             apply_workers=2, chunk_size=1_000, batch_size=300, partitions=4, keep_old=False,
                             max_lag_events=200).validate()
        migration_started = time.monotonic()
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        migration_ended = time.monotonic()
        done = sum(w.writes for w in writers)
        wait_for(lambda: sum(w.writes for w in writers) >= done + 200, what="writes after the swap")
    finally:
        for writer in writers:
            writer.stop_event.set()
        for writer in writers:
            writer.join(timeout=30)
    assert_no_tool_deadlock(watch, [r for w in writers for r in w.refusals], (migration_started, migration_ended))
    assert [e for w in writers for e in w.errors] == []
    acknowledged = {(*key, counter) for w in writers for key, counter in w.record.rows.values()}
    found = final_rows(writers[0], db, table)
    assert sorted(map(repr, acknowledged - found))[:10] == [], "acknowledged rows missing or stale"
    assert sorted(map(repr, found - acknowledged))[:10] == [], "rows no writer left there"
    assert len(found) == len(acknowledged)
    assert leftovers(endpoints, db, table) == []


@pytest.mark.parametrize("kind", list(SHAPES))
def test_every_acknowledged_write_survives_whatever_the_key(endpoints, kind):
    migrate_under_key_changes(endpoints, DB, f"keys_{kind}", SHAPES[kind])


ODD_KEY_COLUMNS = ("ténant-id", "seq `no` $1")
ODD_NAMES = Shape(f"{quote_ident(ODD_KEY_COLUMNS[0])} INT NOT NULL, {quote_ident(ODD_KEY_COLUMNS[1])} BIGINT NOT NULL",
                  ODD_KEY_COLUMNS, SHAPES["composite_int"].make_key, SHAPES["composite_int"].variant)


def test_names_with_spaces_hyphens_backticks_and_non_ascii_letters_are_migrated(endpoints):
    """Schema, table and key columns named as the server allows but as no unquoted identifier could be."""
    migrate_under_key_changes(endpoints, "osc any key schema", "Ördérs-2024 ünïcode", ODD_NAMES)

