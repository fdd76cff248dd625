"""A table moved to another server (`migrate --target-dsn`): copied (its secondary index deferred) and kept in
sync there, under writers that never pause, through a SIGKILL mid-copy; then the source is renamed away and the
target must hold every write the application was told committed, and exactly its declared indexes. With
--where, only the rows matching the predicate, as the writers last left them, may be there. Every value comes
through exactly although the rows travel through the tool.
"""
from __future__ import annotations

import logging
import random
import signal
import struct
import threading

import pymysql
import pytest

import applier.copy as copy_module
from applier.apply import APPLIER_LOCK_WAIT_S
from applier import recopy, remote
from applier.conflicts import ConstraintViolated
from applier.recopy import recopy_keys
from cli.exit_codes import ExitCode
from throttle.sources import throttle_for
from core.db import connect, qualified, query, scalar
from throttle.load import CriticalLoad
from core.spec import MigrationSpec
from core.table import load_pair
from throttle.target_load import TargetLoad
from tests.integration.helpers import BatchPlan, abort_leftover, chunk_progress, cli, latest_migration_id, leftovers, \
    new_migration_row, start_cli, wait_for, waiting_on, waiting_without_coordinator
from tests.integration.ledger import AcknowledgedWriter, Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "osc_move"
MOVED_DB = "osc_moved"       # the schema on the target server
OPTIONS = ["--copy-workers", "2", "--apply-workers", "2", "--partitions", "4", "--chunk-size", "5000",
           "--batch-size", "500", "--target-batch-time", "0", "--cutover-window", "3", "--max-lag", "500"]


@pytest.fixture
def target(endpoints, monkeypatch):
    """A session on the target server, with its schema made fresh; the CLI finds the server in the environment."""
    monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
    conn = connect(endpoints.target())
    query(conn, f"DROP DATABASE IF EXISTS {MOVED_DB}")
    query(conn, f"CREATE DATABASE {MOVED_DB}")
    yield conn
    conn.close()


def fresh_start(conn: pymysql.connections.Connection, table: str) -> None:
    """Whatever an earlier, interrupted run left of a migration of DB.table removed, and its old table."""
    abort_leftover(conn, DB, table)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table + '_osc_old')}")


def table_exists(conn: pymysql.connections.Connection, db: str, table: str) -> bool:
    return bool(scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                       (db, table)))


def test_a_moved_table_holds_every_acknowledged_write_after_a_kill_mid_copy(endpoints, conn, target, cli_log):
    table = "Orders"   # upper case: names are compared as the server compares them
    fresh_start(conn, table)
    create_ledger_table(conn, DB, table, rows=80_000, writers=4)
    moved = (MOVED_DB, table)
    before = latest_migration_id(conn, DB, table)
    with Ledger(endpoints.mysql, DB, table, writers=4, seed=16) as ledger:
        proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note VARCHAR(20) NOT NULL "
                         "DEFAULT 'moved'", "--target-dsn", "--target-table", f"{MOVED_DB}.{table}", "--defer-indexes",
                         *OPTIONS, log=cli_log)
        try:
            migration_id = wait_for(lambda: new_migration_row(conn, DB, table, before), 120, "a migration row").id
            wait_for(lambda: chunk_progress(conn, migration_id)[0] > 0, 120, "the copy to start")
            assert chunk_progress(conn, migration_id)[1] < chunk_progress(conn, migration_id)[2], \
                "the copy ended before the kill: the test no longer kills it mid-copy"
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        ledger.wait_for_writes(200)
        resumed = cli("resume", "--table", f"{DB}.{table}", "--max-lag", "500", timeout=600)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "switch the application to the target" in resumed.stdout + resumed.stderr
        ledger.stop()

    assert ledger.missing(target, moved) == []
    assert not table_exists(conn, DB, table), "the source table must be renamed away, so late writes fail"
    assert table_exists(conn, DB, f"{table}_osc_old")
    with pytest.raises(pymysql.err.ProgrammingError) as late:
        query(conn, f"INSERT INTO {qualified(DB, table)} (writer, seq) VALUES (9, 1)")
    assert late.value.args[0] == 1146   # table does not exist: a late writer fails loudly
    assert scalar(target, f"SELECT COUNT(*) FROM {qualified(*moved)} WHERE note <> 'moved'") == 0
    indexes = query(target, "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                            "TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX", moved)
    assert [tuple(r) for r in indexes] == [("PRIMARY", 1, "id"), ("writer_seq", 1, "writer"), ("writer_seq", 2, "seq")]


class RegionWriter(AcknowledgedWriter):
    """Moves its own rows between regions and bumps their value; records each row's last acknowledged state."""

    def __init__(self, addr, name_sql: str, writer: int, writers: int, rows: int, seed: int) -> None:
        super().__init__(addr, name=f"region-writer-{writer}")
        self.name_sql = name_sql
        self.rng = random.Random(seed * 100 + writer)
        self.mine = [i for i in range(1, rows + 1) if i % writers == writer % writers]
        self.state: dict[int, tuple[str, int] | None] = {}   # id -> (region, value), None once deleted
        self.next_id = rows + writer
        self.step = writers
        self.lock = threading.Lock()

    def write(self, conn: pymysql.connections.Connection) -> None:
        roll = self.rng.random()
        region = self.rng.choice(["eu", "us"])
        if roll < 0.15:
            self.next_id += self.step * 1000
            query(conn, f"INSERT INTO {self.name_sql} (id, region, value) VALUES (%s, %s, 0)", (self.next_id, region))
            self.state[self.next_id] = (region, 0)
            self.mine.append(self.next_id)
        elif roll < 0.9:
            pk = self.rng.choice(self.mine)
            changed = query(conn, f"SELECT value FROM {self.name_sql} WHERE id = %s", (pk,))
            if not changed:
                return
            value = changed[0][0] + 1
            query(conn, f"UPDATE {self.name_sql} SET region = %s, value = %s WHERE id = %s", (region, value, pk))
            self.state[pk] = (region, value)
        else:
            pk = self.rng.choice(self.mine)
            query(conn, f"DELETE FROM {self.name_sql} WHERE id = %s", (pk,))
            self.state[pk] = None


def test_where_keeps_exactly_the_rows_the_writers_left_inside_the_predicate(endpoints, conn, target, cli_log):
    table = "accounts"
    rows, writers = 20_000, 3
    name = qualified(DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, region CHAR(2) NOT NULL, value INT NOT NULL)")
    query(conn, f"INSERT INTO {name} SELECT seq, IF(seq % 2, 'eu', 'us'), 0 FROM {DB}.seq_1_to_{rows}")
    initial = {i: ("eu" if i % 2 else "us", 0) for i in range(1, rows + 1)}
    team = [RegionWriter(endpoints.mysql, name, w, writers, rows, seed=5) for w in range(writers)]
    for writer in team:
        writer.start()
    try:
        result = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD INDEX by_region (region)",
                     "--target-dsn", "--target-table", f"{MOVED_DB}.{table}", "--where", "region = 'eu'", *OPTIONS,
                     timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        for writer in team:
            writer.stop_event.set()
        for writer in team:
            writer.join()
    expected = dict(initial)
    for writer in team:
        expected.update(writer.state)
    wanted = {pk: state for pk, state in expected.items() if state is not None and state[0] == "eu"}
    found = {pk: (region, value) for pk, region, value in
             query(target, f"SELECT id, region, value FROM {qualified(MOVED_DB, table)}")}
    moved_out = sum(1 for w in team for pk, s in w.state.items() if s is not None and s[0] == "us" and pk % 2)
    assert moved_out > 0 and sum(len(w.state) for w in team) > 500, "the writers moved too few rows to tell"
    assert found == wanted, (f"{len(found.keys() - wanted.keys())} rows on the target that the predicate excludes, "
                             f"{len(wanted.keys() - found.keys())} missing, "
                             f"{sum(1 for k in found.keys() & wanted.keys() if found[k] != wanted[k])} stale")


@pytest.mark.exclusive   # the target server's connection count is its load
def test_load_limits_hold_the_work_back_for_the_target_server_too(endpoints, target):
    """--max-load / --critical-load are read on the target server as well: a move writes there."""
    spec = MigrationSpec(database=DB, table="t", alter="", target_server=True,
                         max_load="Threads_connected=1").validate()
    sources = throttle_for(spec, endpoints)
    try:
        assert any("target server" in (source() or "") for source in sources.more), \
            "no throttle source reads the target server"
    finally:
        sources.close()
    crowd = [connect(endpoints.target()) for _ in range(3)]
    try:
        busy = int(query(target, "SHOW GLOBAL STATUS LIKE 'Threads_connected'")[0][1])
        load = TargetLoad(endpoints.target(), {}, {"Threads_connected": busy})
        with pytest.raises(CriticalLoad, match="on the target server"):
            load.reason()
        load.close()
    finally:
        for session in crowd:
            session.close()


@pytest.mark.parametrize("args, says", [
    (["--target-dsn", "mysql://osc_target:Pw-on-the-line@127.0.0.1:1/", "--target-table", f"{MOVED_DB}.small"],
     "holds a password"),
    (["--target-dsn", "--target-table", "no_such_schema.small"], "has no database no_such_schema"),
    (["--target-dsn", "--target-table", f"{MOVED_DB}.small", "--where", "no_such_column = 1"],
     "--where is not a predicate"),
    # a subquery's rows change without a change event of this table's rows (and cannot be read under its lock)
    (["--target-dsn", "--target-table", f"{MOVED_DB}.small", "--where", f"v > (SELECT MIN(v) FROM {DB}.small)"],
     "--where must be decided by the row alone"),
    (["--where", "id > 0"], "--where needs --target-dsn"),
    # rows would come to match without a write, and never be copied: named from the text, or judged by the server
    (["--target-dsn", "--target-table", f"{MOVED_DB}.small", "--where", "v < UNIX_TIMESTAMP() AND id > @floor"],
     "uses UNIX_TIMESTAMP() (the clock), @floor (a user variable)"),
    (["--target-dsn", "--target-table", f"{MOVED_DB}.small", "--where", f"{DB}.plus_one(v) > 1"],
     "plus_one"),
])
def test_bad_move_options_are_refused_with_exit_2_and_change_nothing(endpoints, conn, target, args, says):
    table = "small"
    fresh_start(conn, table)
    query(conn, f"CREATE FUNCTION IF NOT EXISTS {DB}.plus_one(x INT) RETURNS INT DETERMINISTIC RETURN x + 1")
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table)}")
    query(conn, f"CREATE TABLE {qualified(DB, table)} (id INT PRIMARY KEY, v INT)")
    query(conn, f"INSERT INTO {qualified(DB, table)} VALUES (1, 1), (2, 2)")
    result = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN x INT", *args)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert says in output
    assert "Pw-on-the-line" not in output
    assert leftovers(endpoints, DB, table) == []
    assert not table_exists(target, MOVED_DB, table)
    assert scalar(conn, f"SELECT COUNT(*) FROM {qualified(DB, table)}") == 2


def test_abort_of_a_move_removes_the_target_table_and_keeps_the_source(endpoints, conn, target, cli_log):
    table = "aborted"
    fresh_start(conn, table)
    create_ledger_table(conn, DB, table, rows=40_000, writers=2)
    before = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--target-dsn", "--target-table", f"{MOVED_DB}.{table}",
                     "--cutover", "manual", *OPTIONS, log=cli_log)
    try:
        wait_for(lambda: new_migration_row(conn, DB, table, before), 120, "a migration row")
        wait_for(lambda: table_exists(target, MOVED_DB, table), 120, "the target table")
        result = cli("abort", "--table", f"{DB}.{table}")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "on the target server" in result.stdout
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not table_exists(target, MOVED_DB, table)
    assert leftovers(endpoints, DB, table) == []
    assert scalar(conn, f"SELECT COUNT(*) FROM {qualified(DB, table)}") == 40_002


# Rows travel through the tool (applier/remote.py): each value is read into Python and written back on the target.
COLUMNS = """
    id INT AUTO_INCREMENT PRIMARY KEY,
    d DOUBLE, f FLOAT, f2 FLOAT(7,3), dm DECIMAL(65,30), b64 BIT(64), b1 BIT(1),
    tm TIME(6), dt DATETIME(6), dz DATE, ts TIMESTAMP(6) NULL, y YEAR,
    j JSON, l1 VARCHAR(20) CHARACTER SET latin1, vb VARBINARY(300), fb BINARY(4), ch CHAR(5),
    e ENUM('x', 'y'), s SET('a', 'b', 'c'), g POINT,
    gen VARCHAR(40) AS (CONCAT(ch, '|', e)) VIRTUAL
"""
# every column in a form that shows all of its bits, the same SQL on both servers
SHOWN = ("id, CAST(d AS CHAR), CAST(f AS DOUBLE), CAST(f2 AS DOUBLE), CAST(dm AS CHAR), HEX(b64), HEX(b1), "
         "CAST(tm AS CHAR), CAST(dt AS CHAR), CAST(dz AS CHAR), IF(ts = 0, 'zero', UNIX_TIMESTAMP(ts)), "
         "CAST(y AS CHAR), HEX(j), HEX(l1), HEX(vb), HEX(fb), HEX(ch), HEX(e), HEX(s), HEX(g), HEX(gen)")
INSERT = ("INSERT INTO {t} (id, d, f, f2, dm, b64, b1, tm, dt, dz, ts, y, j, l1, vb, fb, ch, e, s, g) VALUES "
          "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, ST_GeomFromText(%s))")


LATIN1 = [*range(32, 127), *range(160, 256)]


def day(rng: random.Random, first_year: int, last_year: int) -> str:
    return f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def edge_rows(rng: random.Random, first: int, count: int) -> list[tuple]:
    """Rows of values a round trip through Python could change: random bit patterns of doubles and floats, the
    ends of each type's range, zero dates, negative and fractional times, bytes of every value."""
    fixed = [
        (-0.0, 1.1754943508222875e-38, 9999.999, "-" + "9" * 35 + "." + "9" * 30, b"\xff" * 8, b"\x01",
         "-838:59:59.000000", "0000-00-00 00:00:00", "0000-00-00", "0000-00-00 00:00:00", 0,
         '{"k": "\\u00e9\\ud83d\\ude00", "n": 1.0000000000000002}', "caf\u00e9 \u00ff", bytes(range(256)),
         b"a\x00\x00\x00", "ab  ", "x", "a,c", "POINT(0.1 -0.2)"),
        (5e-324, -3.4028234663852886e38, -0.001, "0." + "0" * 29 + "1", b"\x00" * 8, b"\x00",
         "-00:00:00.000001", "9999-12-31 23:59:59.999999", "2020-00-00", "2038-01-19 03:14:07.999999", 2155,
         "[]", "", b"", b"\x00\x00\x00\x00", "", "y", "", "POINT(1e300 -1e-300)"),
        (None,) * 19,
    ]
    rows = []
    for i in range(count):
        values = list(fixed[i]) if i < len(fixed) else [
            struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0],
            struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0],
            round(rng.uniform(-9999, 9999), 3),
            f"{rng.randint(-10**30, 10**30)}.{rng.randint(0, 10**30 - 1):030d}",
            rng.getrandbits(64).to_bytes(8, "big"), bytes([rng.getrandbits(1)]),
            f"{'-' if rng.random() < 0.5 else ''}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:"
            f"{rng.randint(0, 59):02d}.{rng.randint(0, 999_999):06d}",
            f"{day(rng, 1000, 9999)} 12:34:56.{rng.randint(0, 999_999):06d}", day(rng, 1000, 9999),
            f"{day(rng, 1971, 2037)} 01:30:00.{rng.randint(0, 999_999):06d}",
            rng.randint(1901, 2155),
            f'{{"v": {rng.random()!r}}}', "".join(chr(rng.choice(LATIN1)) for _ in range(10)),
            rng.randbytes(rng.randint(0, 300)), rng.randbytes(4), "".join(rng.choice("ab ") for _ in range(5)),
            rng.choice(["x", "y"]), rng.choice(["a", "b,c", "a,b,c"]),
            f"POINT({rng.uniform(-180, 180)!r} {rng.uniform(-90, 90)!r})"]
        values = [v if not isinstance(v, float) or v == v and abs(v) != float("inf") else 1.5 for v in values]
        rows.append((first + i, *values))
    return rows


def test_every_value_survives_the_round_trip_to_the_target_server(endpoints, conn, target):
    table = "edge_values"
    name = qualified(DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} ({COLUMNS})")
    rng = random.Random(77)
    with conn.cursor() as cur:
        cur.executemany(INSERT.format(t=name), edge_rows(rng, 1, 400))
    query(conn, f"INSERT INTO {name} (id) VALUES (5000)")
    query(conn, f"DELETE FROM {name} WHERE id = 5000")   # the counter stands past every row

    result = cli("migrate", "--table", f"{DB}.{table}", "--target-dsn", "--target-table", f"{MOVED_DB}.{table}",
                 *OPTIONS, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr

    old = qualified(DB, f"{table}_osc_old")
    source = {r[0]: r for r in query(conn, f"SELECT {SHOWN} FROM {old}")}
    moved = {r[0]: r for r in query(target, f"SELECT {SHOWN} FROM {qualified(MOVED_DB, table)}")}
    assert source.keys() == moved.keys()
    differing = [(source[k], moved[k]) for k in source if source[k] != moved[k]]
    assert differing == [], f"{len(differing)} rows changed on the way; first: {differing[0]}"
    counter = scalar(target, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND "
                             "TABLE_NAME=%s", (MOVED_DB, table))
    assert counter is not None and int(counter) > 5000, "an id handed out on the source would be handed out again"


def test_a_recopy_that_found_no_row_does_not_delete_a_newer_recopy_of_the_key(endpoints, conn, target, monkeypatch):
    """Two re-copies of one key on the target (the cutover's catch-up and an applier of `stream-osc worker`): the
    first reads the key while the row is deleted, which locks nothing; the row is inserted again and the second
    re-copy writes it; the first's target write then deletes it. A write acknowledged before the cutover's lock,
    whose change event was already drained, would be missing from the target."""
    table = "raced"
    name = qualified(DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(target, f"CREATE TABLE {qualified(MOVED_DB, table)} (id INT PRIMARY KEY, v INT NOT NULL)")
    pair = load_pair(conn, DB, table, table, "", target, MOVED_DB)
    first, second = connect(endpoints.mysql), connect(endpoints.mysql)
    first_target, second_target = connect(endpoints.target()), connect(endpoints.target())
    reads: list[list] = []

    def read_then_race(session, pair, keys, locking=False):
        rows = remote.read_keys(session, pair, keys, locking)
        reads.append(rows)
        if len(reads) == 1:   # the first re-copy has read no row: the application inserts it, another re-copy runs
            query(conn, f"INSERT INTO {name} VALUES (7, 1)")
            recopy_keys(second, pair, [(7,)], target=second_target)
        return rows

    monkeypatch.setattr(recopy, "read_keys", read_then_race)
    try:
        recopy_keys(first, pair, [(7,)], target=first_target)
    finally:
        for session in (first, second, first_target, second_target):
            session.close()
    assert reads[0] == [], "the race did not happen as staged"
    assert query(target, f"SELECT id, v FROM {qualified(MOVED_DB, table)}") == [(7, 1)], \
        "the source holds the row; the target lost it"


def raced_pair(conn: pymysql.connections.Connection, target: pymysql.connections.Connection, table: str):
    """DB.table holding keys 1..50, its empty copy on the target, and their pair."""
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table)}")
    query(conn, f"CREATE TABLE {qualified(DB, table)} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {qualified(DB, table)} SELECT seq, seq FROM {DB}.seq_1_to_50")
    query(target, f"CREATE TABLE {qualified(MOVED_DB, table)} (id INT PRIMARY KEY, v INT NOT NULL)")
    return load_pair(conn, DB, table, table, "", target, MOVED_DB)


def test_a_recopy_to_another_server_that_lost_a_key_to_a_race_writes_again_only_the_rows_read_differently(
        endpoints, conn, target, monkeypatch):
    table = "raced_among_many"
    pair = raced_pair(conn, target, table)
    first, second = connect(endpoints.mysql), connect(endpoints.mysql)
    first_target, second_target = connect(endpoints.target()), connect(endpoints.target())
    reads: list[list] = []
    written_keys: list[tuple] = []
    write = remote.write_rows

    def read_then_race(session, pair, keys, locking=False):
        rows = remote.read_keys(session, pair, keys, locking)
        if session is first:
            reads.append(keys)
            if len(reads) == 1:   # key 77 had no row: the application inserts it, another re-copy writes it
                query(conn, f"INSERT INTO {qualified(DB, table)} VALUES (77, 1)")
                recopy_keys(second, pair, [(77,)], target=second_target)
        return rows

    def recorded(session, pair, where, params, rows, during_apply):
        if session is first_target:
            written_keys.append(tuple(params))
        return write(session, pair, where, params, rows, during_apply)

    monkeypatch.setattr(recopy, "read_keys", read_then_race)
    monkeypatch.setattr(recopy, "write_rows", recorded)
    try:
        recopy_keys(first, pair, [(k,) for k in range(1, 51)] + [(77,)], target=first_target)
    finally:
        for session in (first, second, first_target, second_target):
            session.close()
    assert [len(k) for k in reads] == [51, 51]   # all keys read again once; the one read differently, written again
    assert [len(k) for k in written_keys] == [51, 1] and written_keys[1] == (77,)
    assert query(target, f"SELECT COUNT(*), SUM(v) FROM {qualified(MOVED_DB, table)}") == [(51, 1276)]


def test_keys_a_recopy_to_another_server_keeps_reading_differently_are_reported_when_the_rounds_run_out(
        endpoints, conn, target, monkeypatch, caplog):
    table = "churned"
    pair = raced_pair(conn, target, table)
    session, target_session = connect(endpoints.mysql), connect(endpoints.target())
    reads: list[list] = []

    def churn_before_reads(on, pair, keys, locking=False):
        """Before each read, keys 77 and 78 trade places: one row comes, the other goes (each write a change of its
        own, still to be applied)."""
        if on is session:
            reads.append(keys)
            coming, going = (77, 78) if len(reads) % 2 else (78, 77)
            query(conn, f"DELETE FROM {qualified(DB, table)} WHERE id = %s", (going,))
            query(conn, f"INSERT INTO {qualified(DB, table)} VALUES (%s, 1)", (coming,))
        return remote.read_keys(on, pair, keys, locking)

    monkeypatch.setattr(recopy, "read_keys", churn_before_reads)
    try:
        with caplog.at_level(logging.WARNING, logger="stream_osc"):
            recopy_keys(session, pair, [(k,) for k in range(1, 51)] + [(77,), (78,)], target=target_session)
    finally:
        session.close()
        target_session.close()
    assert len(reads) == recopy.CONFIRM_ROUNDS and [len(k) for k in reads[2:]] == [2] * (recopy.CONFIRM_ROUNDS - 2)
    reported = [r.fields for r in caplog.records
                if r.getMessage().startswith("keys whose last two reads still differed")]
    assert [(f["keys"], f["rounds"], f["first"] in ("id=77", "id=78")) for f in reported] == [
        (2, recopy.CONFIRM_ROUNDS, True)]
    assert query(target, f"SELECT COUNT(*) FROM {qualified(MOVED_DB, table)} WHERE id <= 50") == [(50,)]


def half_moved(conn: pymysql.connections.Connection, target: pymysql.connections.Connection, table: str,
               source_keys: str) -> BatchPlan:
    """`table` with rows 1..40 (u = 'u-<id>') on the source, with the key `source_keys` on u; rows 1..20
    copied to the target, which has UNIQUE (u); one chunk [21, 41) left to copy, its rows the test's own."""
    name, moved = qualified(DB, table), qualified(MOVED_DB, table)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, u VARCHAR(20) NOT NULL, {source_keys})")
    query(conn, f"INSERT INTO {name} SELECT seq, CONCAT('u-', seq) FROM {DB}.seq_1_to_40")
    query(target, f"CREATE TABLE {moved} (id INT PRIMARY KEY, u VARCHAR(20) NOT NULL, UNIQUE KEY u (u))")
    query(target, f"INSERT INTO {moved} SELECT seq, CONCAT('u-', seq) FROM {MOVED_DB}.seq_1_to_20")
    plan = BatchPlan(load_pair(conn, DB, table, table, "", target, MOVED_DB), 900_002, (40,))
    store = plan.store(conn)
    store.ensure_schema()
    drop_chunks(conn, plan)
    store.add_chunks(plan.id, [((21,), (41,))])
    return plan


def drop_chunks(conn: pymysql.connections.Connection, plan: BatchPlan) -> None:
    query(conn, f"DELETE FROM {plan.store(conn).t('chunks')} WHERE migration_id=%s", (plan.id,))


def test_a_copy_batch_meeting_a_value_the_source_really_repeats_stops_and_leaves_the_target_as_it_was(endpoints,
                                                                                                     conn, target):
    """The source holds 'u-1' in rows 1 and 30 (it has no UNIQUE key; the move adds one). Row 1 is on the target:
    re-copying it cannot make way for row 30, so after the rounds the batch stops with ConstraintViolated, naming
    the value, and the target holds what it held before the batch."""
    table = "repeated"
    moved = qualified(MOVED_DB, table)
    plan = half_moved(conn, target, table, "KEY u (u)")
    query(conn, f"UPDATE {qualified(DB, table)} SET u = 'u-1' WHERE id = 30")
    before = sorted(query(target, f"SELECT id, u FROM {moved}"))
    copier, copier_target = connect(endpoints.mysql), connect(endpoints.target())
    try:
        with pytest.raises(ConstraintViolated, match="u-1"):
            copy_module.copy_batch(copier, plan, 0, (21,), (41,), True, copier_target)
    finally:
        copier.close()
        copier_target.close()
        drop_chunks(conn, plan)
    assert sorted(query(target, f"SELECT id, u FROM {moved}")) == before


def test_a_copy_batch_never_writes_a_colliding_row_older_than_an_appliers_write_of_it(endpoints, conn, target,
                                                                                      monkeypatch):
    """A copy batch to the target meets, under a UNIQUE key, the stale copy of a row outside its range (row 1 gave
    its value to row 30 after rows 1-20 were copied). Nothing holds row 1 for the batch: its current version must
    reach the target as an applier writes a key, locked on the source until the target commits. Staged: the
    application changes row 1 again right after the copy reads it, and an applier writes that change; a row read
    without a lock and written with the batch would then overwrite the applier's write, with no change left to
    correct it."""
    table = "collide"
    name, moved = qualified(DB, table), qualified(MOVED_DB, table)
    plan = half_moved(conn, target, table, "UNIQUE KEY u (u)")
    query(conn, f"UPDATE {name} SET u = 'moved' WHERE id = 1")
    query(conn, f"UPDATE {name} SET u = 'u-1' WHERE id = 30")
    copier, copier_target = connect(endpoints.mysql), connect(endpoints.target())
    app, applier, applier_target = connect(endpoints.mysql), connect(endpoints.mysql), connect(endpoints.target())
    changed: list[threading.Thread] = []
    lock_waits: list[int] = []

    def change_and_apply_row_1() -> None:
        query(app, f"UPDATE {name} SET u = 'moved-again' WHERE id = 1")
        recopy_keys(applier, plan.pair, [(1,)], target=applier_target)

    def read_then_race(session, pair, keys, locking=False):
        rows = remote.read_keys(session, pair, keys, locking)
        if session is copier and (1,) in keys and not changed:
            lock_waits.append(scalar(session, "SELECT @@SESSION.innodb_lock_wait_timeout"))
            changed.append(threading.Thread(target=change_and_apply_row_1))
            changed[0].start()
            wait_for(lambda: not changed[0].is_alive() or waiting_on(conn, app, session), 30,
                     "the application's change of row 1 to be applied, or to wait for the copy's lock")
        return rows

    # where the colliding row is read: by the re-copy (recopy.read_keys), or by a plain read in the copy itself
    monkeypatch.setattr(copy_module, "read_keys", read_then_race, raising=False)
    monkeypatch.setattr(recopy, "read_keys", read_then_race)
    try:
        assert copy_module.copy_batch(copier, plan, 0, (21,), (41,), True, copier_target) == 20
        assert changed, "the batch met no stale row"
        # it locked application rows as an applier does, and the copy's session is as it was afterwards
        assert lock_waits == [APPLIER_LOCK_WAIT_S]
        assert scalar(copier, "SELECT @@SESSION.innodb_lock_wait_timeout") == \
            scalar(copier, "SELECT @@GLOBAL.innodb_lock_wait_timeout")
    finally:
        for thread in changed:
            thread.join(30)
        for session in (copier, copier_target, app, applier, applier_target):
            session.close()
        drop_chunks(conn, plan)
    assert not changed[0].is_alive(), "the application's change of row 1 never finished"
    assert sorted(query(target, f"SELECT id, u FROM {moved}")) == sorted(query(conn, f"SELECT id, u FROM {name}")), \
        "the target holds another version of a row than the source, and no change is left to correct it"


def test_abort_after_the_move_renamed_the_source_keeps_the_target_table(endpoints, conn, target):
    """The coordinator died right after the cutover's RENAME, before recording it: the target holds the table and
    takes the application's writes from now on. `abort` must find the move done, keep the target table, and say
    where the table lives."""
    table = "renamed"
    name = qualified(DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {name} SELECT seq, seq FROM {DB}.seq_1_to_500")
    waiting_without_coordinator(conn, DB, table, "--target-dsn", "--target-table", f"{MOVED_DB}.{table}", *OPTIONS)
    query(conn, f"RENAME TABLE {name} TO {qualified(DB, table + '_osc_old')}")   # what the cutover's RENAME does
    query(target, f"INSERT INTO {qualified(MOVED_DB, table)} VALUES (501, 501)")   # the application, switched

    result = cli("abort", "--table", f"{DB}.{table}")
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.ALREADY_SWAPPED, output
    assert scalar(target, f"SELECT COUNT(*) FROM {qualified(MOVED_DB, table)}") == 501, "the moved table was dropped"
    assert f"{MOVED_DB}.{table}" in output and "target server" in output, output
    assert "has the new schema and receives the writes" not in output, output


@pytest.mark.parametrize("unique", ["email", "email_key"])
def test_a_stale_row_on_the_target_gives_way_and_a_real_duplicate_stops_the_move(endpoints, conn, target, unique,
                                                                                   monkeypatch):
    """Two rows swapped their UNIQUE values on the source after the copy: re-copying one of them meets the other's
    stale copy on the target, which is re-synced from the source, not a reason to stop. Under a key the source
    really breaks (a UNIQUE key the ALTER adds) the re-copy stops with ConstraintViolated. The key is a column, or
    a column the server computes (a generated column). The colliding row is re-read in the re-copy's one locking
    read, started again, never by a second locking read of it alone (which would lock a key below those held)."""
    table = "uniq"
    name, moved = qualified(DB, table), qualified(MOVED_DB, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    columns = ("id INT PRIMARY KEY, email VARCHAR(40) NOT NULL, "
               "email_key VARCHAR(40) AS (LOWER(email)) VIRTUAL")
    query(conn, f"CREATE TABLE {name} ({columns})")
    query(target, f"CREATE TABLE {moved} ({columns}, UNIQUE KEY one_email ({unique}))")
    query(conn, f"INSERT INTO {name} (id, email) VALUES (1, 'B@x'), (2, 'a@x'), (3, 'c@x'), (4, 'C@x')")
    query(target, f"INSERT INTO {moved} (id, email) VALUES (1, 'a@x'), (2, 'b@x'), (3, 'c@x')")   # copied before
    pair = load_pair(conn, DB, table, table, f"ADD UNIQUE KEY one_email ({unique})", target, MOVED_DB)
    source, target_session = connect(endpoints.mysql), connect(endpoints.target())
    locking_reads: list[list] = []

    def read_keys(session, pair, keys, locking=False):
        if locking:
            locking_reads.append(sorted(keys))
        return remote.read_keys(session, pair, keys, locking)
    monkeypatch.setattr(recopy, "read_keys", read_keys)
    try:
        recopy_keys(source, pair, [(1,)], target=target_session)
        assert sorted(query(target, f"SELECT id, email FROM {moved}")) == [(1, "B@x"), (2, "a@x"), (3, "c@x")]
        assert locking_reads == [[(1,)], [(1,), (2,)]], "the colliding row was not re-read with the re-copy's keys"
        if unique == "email_key":   # 'c@x' and 'C@x' are one value of LOWER(email) on the source too
            with pytest.raises(ConstraintViolated):
                recopy_keys(source, pair, [(4,)], target=target_session)
    finally:
        source.close()
        target_session.close()


@pytest.mark.parametrize("column, value, new_type", [
    ("BIT(8)", "b'101'", "INT"), ("BIT(8)", "b'101'", "VARCHAR(10)"), ("ENUM('x', 'y')", "'y'", "INT"),
    ("SET('a', 'b')", "'a,b'", "INT"), ("DATE", "'2020-01-02'", "INT"), ("TIME", "'10:00:00'", "INT"),
    ("TIME(3)", "'-01:02:03.5'", "INT"), ("TIME(3)", "'-01:02:03.5'", "VARCHAR(30)"),
    ("DATETIME(3)", "'2020-01-01 00:00:00.5'", "VARCHAR(30)"), ("DATETIME(3)", "'2020-01-01 00:00:00.5'", "BIGINT"),
    ("TIMESTAMP(2) NULL", "'2020-01-01 10:00:00.25'", "DECIMAL(20,2)"), ("FLOAT", "0.1", "VARCHAR(30)"),
    ("FLOAT", "0.1", "DECIMAL(20,18)"), ("FLOAT", "0.1", "DOUBLE"), ("DOUBLE", "1e20", "VARCHAR(30)"),
])
def test_a_type_the_alter_changes_holds_what_the_servers_own_alter_stores(endpoints, conn, target, column, value,
                                                                          new_type):
    """A move's --alter changes a column's type: the rows travel through the tool, and the target must store what
    the server's own ALTER stores (an ENUM's index, a BIT's number, a TIME's own text), not Python's rendering of
    the value, nor refuse it."""
    table = "retyped"
    name = qualified(DB, table)
    for t in (table, f"{table}_by_server"):
        query(conn, f"DROP TABLE IF EXISTS {qualified(DB, t)}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, c {column})")
    query(conn, f"INSERT INTO {name} VALUES (1, {value})")
    alter = f"MODIFY c {new_type}"
    by_server = qualified(DB, f"{table}_by_server")
    query(conn, f"CREATE TABLE {by_server} LIKE {name}")
    query(conn, f"INSERT INTO {by_server} SELECT * FROM {name}")
    query(conn, f"ALTER TABLE {by_server} {alter}")
    query(target, f"CREATE TABLE {qualified(MOVED_DB, table)} (id INT PRIMARY KEY, c {new_type})")
    pair = load_pair(conn, DB, table, table, alter, target, MOVED_DB)
    remote.write_rows(target, pair, "1=1", [], remote.read_rows(conn, pair, "1=1", []), False)
    shown = "SELECT HEX(c), CAST(c AS CHAR) FROM {}"
    assert query(target, shown.format(qualified(MOVED_DB, table))) == query(conn, shown.format(by_server))


def test_a_where_with_percent_signs_moves_exactly_its_rows(endpoints, conn, target):
    """`%` is SQL's modulo and LIKE's wildcard; the predicate goes into statements that carry parameters, where a
    bare `%` would be taken for a placeholder."""
    table = "pct"
    name = qualified(DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL, tag VARCHAR(10) NOT NULL)")
    query(conn, f"INSERT INTO {name} SELECT seq, seq, IF(seq % 7 = 0, 'a%b', 'ab') FROM {DB}.seq_1_to_300")
    predicate = "v % 3 = 0 OR tag LIKE 'a\\%%'"
    wanted = query(conn, f"SELECT id, v, tag FROM {name} WHERE {predicate} ORDER BY id")
    result = cli("migrate", "--table", f"{DB}.{table}", "--target-dsn", "--target-table", f"{MOVED_DB}.{table}",
                 "--where", predicate, *OPTIONS, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert query(target, f"SELECT id, v, tag FROM {qualified(MOVED_DB, table)} ORDER BY id") == wanted
    assert 100 < len(wanted) < 300


def test_a_joined_worker_applies_to_the_target_server_and_the_cutover_command_finishes_the_move(endpoints, conn,
                                                                                                   target, cli_log):
    """`stream-osc worker` and `stream-osc cutover` know the move from its stored options alone: the worker's
    appliers write the target server, the cutover renames the source away, the worker leaves."""
    table = "joined"
    name, moved = qualified(DB, table), qualified(MOVED_DB, table)
    fresh_start(conn, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, payload VARCHAR(20) NOT NULL)")
    query(conn, f"INSERT INTO {name} SELECT seq, 'before' FROM {DB}.seq_1_to_2000")
    waiting_without_coordinator(conn, DB, table, "--target-dsn", "--target-table", f"{MOVED_DB}.{table}", *OPTIONS)
    worker = start_cli("--log-level", "INFO", "worker", "--table", f"{DB}.{table}", log=cli_log)
    try:
        query(conn, f"UPDATE {name} SET payload = 'while waiting' WHERE id = 100")
        wait_for(lambda: scalar(target, f"SELECT payload FROM {moved} WHERE id = 100") == "while waiting", 60,
                 "the worker's appliers to write the change on the target server")
        result = cli("cutover", "--table", f"{DB}.{table}", "--quiet")
        assert result.returncode == 0, result.stderr[-3000:]
        assert worker.wait(60) == 0   # it leaves once the table is moved
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
    assert not table_exists(conn, DB, table)
    assert scalar(target, f"SELECT COUNT(*) FROM {moved} WHERE payload = 'before'") == 1999
