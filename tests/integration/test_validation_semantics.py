"""Validation never passes a difference and never fails an equal table, for each way a checksum can be fooled.

Each test builds a source table and a new table made from it by an ALTER, copies the rows as the bulk
copy does (INSERT … SELECT over the mapped columns), then damages or keeps the copy and asks the
validation's own functions whether the tables differ.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from core.state_records import Chunk
from core.table import TablePair, load_pair
from cutover import validate as validate_module
from cutover.compare import compare_tables
from cutover.validate import (
    ValidationFailed,
    differing_keys,
    KeyRange,
    repair,
    row_hasher,
    row_hashes,
    validation_ranges,
)
from core.db import query
from tests.integration.helpers import db_conn

pytestmark = pytest.mark.integration

DB = "valsem"


def make_pair(conn, name: str, ddl: str, rows: list[tuple], alter: str) -> TablePair:
    """`valsem.<name>` with `rows`, `valsem.<name>_new` made from it by `alter`, and the rows copied over."""
    source, target = f"{DB}.{name}", f"{DB}.{name}_new"
    query(conn, f"DROP TABLE IF EXISTS {source}")
    query(conn, f"DROP TABLE IF EXISTS {target}")
    query(conn, f"CREATE TABLE {source} ({ddl}) ENGINE=InnoDB")
    if rows:
        marks = ", ".join(["%s"] * len(rows[0]))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {source} VALUES ({marks})", rows)
    query(conn, f"CREATE TABLE {target} LIKE {source}")
    query(conn, f"ALTER TABLE {target} {alter}")
    pair = load_pair(conn, DB, name, f"{name}_new", alter)
    query(conn, f"INSERT INTO {pair.target_name} ({pair.target_column_list}) "
                f"SELECT {pair.source_column_list} FROM {pair.source_name}")
    return pair


def differences(conn, pair: TablePair) -> set[int]:
    return {k[0] for k in differing_keys(conn, row_hasher(conn, pair), None, None).keys}   # one-column keys


WIDE_DDL = ("id INT PRIMARY KEY, amount DECIMAL(12,2), at DATETIME, n INT, f FLOAT, "
            "note VARCHAR(20) CHARACTER SET latin1, fixed CHAR(6) CHARACTER SET latin1, dd DOUBLE(10,2)")
WIDEN = ("MODIFY amount DECIMAL(14,4), MODIFY at DATETIME(6), MODIFY n BIGINT, MODIFY f DOUBLE, "
         "MODIFY note VARCHAR(40) CHARACTER SET utf8mb4, MODIFY fixed VARCHAR(6) CHARACTER SET utf8mb4, "
         "MODIFY dd DOUBLE")


def wide_rows(count: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(i, round(rng.uniform(-1e6, 1e6), 2),
             f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 1{rng.randint(0, 9)}:00:0{i % 10}",
             rng.randint(-2 ** 31, 2 ** 31 - 1), rng.uniform(-1000, 1000),
             rng.choice(["é", "ça va", "naïve", "", None, "plain"]), rng.choice(["a", "ü ", "", None]),
             round(rng.uniform(0, 100), 2)) for i in range(1, count + 1)]


def test_widening_alter_validates_clean(conn):
    pair = make_pair(conn, "widen", WIDE_DDL, wide_rows(2000, seed=5), WIDEN)
    assert differences(conn, pair) == set()
    assert compare_tables(conn, DB, "widen", "widen_new").equal


@pytest.mark.parametrize("ddl, rows, alter", [
    ("x DECIMAL(12,2)", [1.5, -2.5, 2.49, None], "MODIFY x INT"),
    ("x DOUBLE", [0.1, 1e10 / 3, -7.123456789], "MODIFY x FLOAT"),
    ("x DOUBLE", [1.555, 3.14159, -0.125, 2.675], "MODIFY x FLOAT(7,2)"),
    ("x DOUBLE", [1.5555, 2.0005, -0.0625], "MODIFY x DOUBLE(12,3)"),
    ("x DOUBLE", [1.555, 3.14159], "MODIFY x DECIMAL(6,2)"),
    ("x VARCHAR(5)", ["a  ", "", " b"], "MODIFY x CHAR(5)"),
    ("x DATETIME(6)", ["2020-01-01 10:00:00.999999", "2020-01-01 10:00:00.4"], "MODIFY x DATETIME"),
    ("x INT", [5, -7], "MODIFY x VARCHAR(20)"),
    ("x TIMESTAMP NULL", ["2020-03-29 01:30:00", None], "MODIFY x DATETIME NULL"),
    ("x VARCHAR(10) CHARACTER SET latin1", ["é", "ß"], "MODIFY x TEXT CHARACTER SET utf8mb4"),
    ("x VARCHAR(10) CHARACTER SET latin1", ["é", "ab"], "MODIFY x VARBINARY(10)"),
    ("x VARBINARY(10)", [b"ab", b""], "MODIFY x BINARY(4)"),
    ("x ENUM('a','b')", ["a", "b"], "MODIFY x ENUM('b','a','c')"),
    ("x BIT(3)", [5, 0], "MODIFY x BIT(8)"),
    ("x TINYINT UNSIGNED", [255, 0], "MODIFY x BIGINT UNSIGNED"),
    ("x DATE", ["2020-02-29"], "MODIFY x DATETIME(3)"),
    ("x TIME", ["838:59:59", "-01:00:00"], "MODIFY x TIME(6)"),
])
def test_converting_alter_validates_clean(conn, ddl, rows, alter):
    """Values compare as the new column holds them, whatever conversion the copy made."""
    pair = make_pair(conn, "converted", f"id INT PRIMARY KEY, {ddl}", list(enumerate(rows, 1)), alter)
    assert differences(conn, pair) == set()


@pytest.mark.parametrize("column, change", [
    ("amount", "amount = amount + 0.0001"),
    ("at", "at = at + INTERVAL 1 MICROSECOND"),
    ("n", "n = n + 4294967296"),
    ("f", "f = f + 1e-12"),
    ("note", "note = CONCAT(COALESCE(note, ''), '\u00e9')"),
])
def test_a_difference_only_the_wider_type_can_hold_is_found(conn, column, change):
    pair = make_pair(conn, "widen_diff", WIDE_DDL, wide_rows(300, seed=6), WIDEN)
    query(conn, f"UPDATE {pair.target_name} SET {change} WHERE id = 77")
    assert differences(conn, pair) == {77}


KEPT_DDL = ("id INT PRIMARY KEY, f FLOAT, d DOUBLE, c CHAR(8) CHARACTER SET latin1, "
            "v VARCHAR(10) CHARACTER SET utf8mb4, b VARBINARY(8), e ENUM('x','y'), t DATETIME(3), j TEXT")


@pytest.mark.parametrize("column, change", [
    ("f", "f = 1.0000001"),   # FLOAT prints 6 digits: '1' on both sides unless compared exactly
    ("d", "d = d + 1e-9"),
    ("c", "c = 'ac'"),
    ("v", "v = 'é'"),
    ("b", "b = X'FE'"),
    ("e", "e = 'y'"),
    ("t", "t = t + INTERVAL 1000 MICROSECOND"),
    ("j", "j = NULL"),
])
def test_a_difference_in_a_column_the_alter_keeps_is_found(conn, column, change):
    """A column whose type the ALTER keeps is compared as exactly as a converted one: a FLOAT differing in its
    8th digit prints alike as text ('1')."""
    rows = [(i, 1.0, 0.5, "ab ", "é", b"\xff", "x", "2024-01-01 00:00:00.001", f"text {i}") for i in range(1, 51)]
    pair = make_pair(conn, "kept", KEPT_DDL, rows, "ADD COLUMN added INT NULL")
    assert differences(conn, pair) == set()
    query(conn, f"UPDATE {pair.target_name} SET {change} WHERE id = 7")
    assert differences(conn, pair) == {7}


def test_paired_differences_are_found(conn):
    """The same byte flipped in two same-length values: their CRC32 deltas are equal and cancel in a BIT_XOR."""
    pair = make_pair(conn, "paired", "id INT PRIMARY KEY, c VARCHAR(10)",
                     [(i, f"v{i:04d}") for i in range(1, 1001)], "ADD INDEX c (c)")
    query(conn, f"UPDATE {pair.target_name} SET c = CONCAT(LEFT(c, 4), 'x') WHERE id IN (10, 20)")   # '0' -> 'x'
    crc_xor = ("SELECT BIT_XOR(CRC32(CONCAT_WS('#', ISNULL(id), id, ISNULL(c), CONVERT(c USING utf8mb4)))) "
               "FROM {}")
    assert query(conn, crc_xor.format(pair.source_name)) == query(conn, crc_xor.format(pair.target_name))
    assert differences(conn, pair) == {10, 20}


def test_the_same_change_in_two_rows_cannot_cancel_in_a_range_checksum(conn):
    """CRC32 is linear: the same change in two rows flips the same bits of both row hashes, and a plain SUM of
    the hashes stays equal when the two hashes differ in each of those bits. The pair is picked by the row
    hashes themselves, as one whose changes a plain SUM cancels; the range checksum must still tell."""
    pair = make_pair(conn, "same_change", "id INT PRIMARY KEY, v INT, w CHAR(1)",
                     [(i, 12, "x") for i in range(1, 2001)], "ADD INDEX v (v)")
    hasher = row_hasher(conn, pair)
    before = row_hashes(conn, hasher, False, None, None)
    query(conn, f"UPDATE {pair.target_name} SET v = 129")
    after = row_hashes(conn, hasher, False, None, None)
    by_change: dict[int, list[int]] = {}
    for key in sorted(before):
        by_change.setdefault(after[key] - before[key], []).append(key[0])
    pairs = [(keys[0], by_change[-change][0])
             for change, keys in by_change.items() if change > 0 and -change in by_change]
    assert pairs, "no two rows whose changes cancel in a plain SUM: the test no longer attacks the checksum"
    first, second = pairs[0]
    query(conn, f"UPDATE {pair.target_name} SET v = 12 WHERE id NOT IN (%s, %s)", (first, second))
    plain = "SELECT COUNT(*), SUM({}) FROM {}"
    assert query(conn, plain.format(hasher.row_sql(True), pair.source_name)) == \
        query(conn, plain.format(hasher.row_sql(False), pair.target_name)), "a plain SUM misses this pair"
    assert differences(conn, pair) == {first, second}


def test_a_change_flipping_only_the_lowest_bit_of_two_row_hashes_cannot_cancel_in_a_range_checksum(conn):
    """A second CRC32 of the row hashes' decimal text is not enough: h and h^1 differ only in the low bit of the
    last digit, so CRC32(h^1) = CRC32(h) ^ 0x77073096 for every h, and a SUM of those cancels for about one pair
    in 2^15. Changing 9655 to 49437 flips only bit 0 of these rows' hashes; rows 37 and 50 are such a pair."""
    pair = make_pair(conn, "low_bit", "id INT PRIMARY KEY, v INT, w CHAR(1)", [(i, 9655, "x") for i in range(1, 61)],
                     "ADD INDEX v (v)")
    hasher = row_hasher(conn, pair)
    before = row_hashes(conn, hasher, False, None, None)
    query(conn, f"UPDATE {pair.target_name} SET v = 49437 WHERE id IN (37, 50)")
    after = row_hashes(conn, hasher, False, None, None)
    assert {before[(k,)] ^ after[(k,)] for k in (37, 50)} == {1}, "the change no longer flips only bit 0"
    crc_of_hash = "SELECT COUNT(*), SUM(CRC32({})) FROM {}"
    assert query(conn, crc_of_hash.format(hasher.row_sql(True), pair.source_name)) == \
        query(conn, crc_of_hash.format(hasher.row_sql(False), pair.target_name)), "a SUM of CRC32(h) misses this pair"
    assert differences(conn, pair) == {37, 50}


def test_binary_values_compared_as_bytes(conn):
    """0xFF and 0xFE are both invalid UTF-8: converted to text, both become '?'."""
    pair = make_pair(conn, "binary", "id INT PRIMARY KEY, b VARBINARY(8), blb BLOB, fixed BINARY(4)",
                     [(i, bytes([255, i % 256]), bytes([200, 255]), b"\xff") for i in range(1, 501)],
                     "MODIFY b VARBINARY(16), MODIFY fixed BINARY(6)")
    assert differences(conn, pair) == set()
    query(conn, f"UPDATE {pair.target_name} SET b = CONCAT(X'FE', SUBSTR(b, 2)) WHERE id = 3")
    query(conn, f"UPDATE {pair.target_name} SET blb = X'C8FE' WHERE id = 4")
    query(conn, f"UPDATE {pair.target_name} SET fixed = X'FE' WHERE id = 5")
    assert differences(conn, pair) == {3, 4, 5}


def test_separator_in_values_is_not_a_false_match(conn):
    """CONCAT_WS('#', …) makes ('a#', 'b') and ('a', '#b') the same text."""
    pair = make_pair(conn, "separator", "id INT PRIMARY KEY, a VARCHAR(10), b VARCHAR(10)",
                     [(1, "a#", "b"), (2, "x", "#y#"), (3, "p", "q")], "ADD INDEX a (a)")
    query(conn, f"UPDATE {pair.target_name} SET a = 'a', b = '#b' WHERE id = 1")
    query(conn, f"UPDATE {pair.target_name} SET a = 'x#', b = 'y#' WHERE id = 2")
    concat_ws = "SELECT id, CONCAT_WS('#', a, b) FROM {} ORDER BY id"
    assert query(conn, concat_ws.format(pair.source_name)) == query(conn, concat_ws.format(pair.target_name))
    assert differences(conn, pair) == {1, 2}


def test_null_and_empty_string_are_different(conn):
    pair = make_pair(conn, "nulls", "id INT PRIMARY KEY, a VARCHAR(10), n INT",
                     [(1, None, None), (2, "", 0), (3, "x", 1)], "MODIFY n BIGINT")
    query(conn, f"UPDATE {pair.target_name} SET a = '' WHERE id = 1")
    query(conn, f"UPDATE {pair.target_name} SET n = NULL WHERE id = 2")
    assert differences(conn, pair) == {1, 2}


def test_renamed_columns_are_compared_under_their_new_names(conn):
    alter = "CHANGE note remark VARCHAR(30) CHARACTER SET utf8mb4, RENAME COLUMN amount TO total"
    pair = make_pair(conn, "renamed", "id INT PRIMARY KEY, note VARCHAR(20) CHARACTER SET latin1, amount DECIMAL(8,2)",
                     [(i, f"n{i}é", i / 4) for i in range(1, 301)], alter)
    assert pair.target_columns == ("id", "remark", "total") and pair.source_columns == ("id", "note", "amount")
    assert differences(conn, pair) == set()
    assert compare_tables(conn, DB, "renamed", "renamed_new", alter=alter).equal
    query(conn, f"UPDATE {pair.target_name} SET remark = 'damaged' WHERE id = 8")
    query(conn, f"UPDATE {pair.target_name} SET total = total + 1 WHERE id = 9")
    assert differences(conn, pair) == {8, 9}
    assert compare_tables(conn, DB, "renamed", "renamed_new", alter=alter).different == [(8,), (9,)]


def test_a_row_a_repair_deletes_is_found(conn):
    """Row 1 is re-copied with the value of the UNIQUE key the ALTER adds that row 2 holds. A REPLACE
    deletes row 2, and a check of the re-copied keys alone then passes with row 2 gone; the repair must
    instead stop with the collision named (re-checking the whole range finds row 2 missing)."""
    pair = make_pair(conn, "replaced", "id INT PRIMARY KEY, u VARCHAR(10), other INT",
                     [(i, f"u{i}", i) for i in range(1, 101)], "ADD UNIQUE KEY u (u)")
    query(conn, f"UPDATE {pair.source_name} SET u = 'u2' WHERE id = 1")   # after the copy: a duplicate in the source
    hasher = row_hasher(conn, pair)
    diff = differing_keys(conn, hasher, (1,), (101,)).keys
    assert diff == {(1,)}
    with pytest.raises(Exception) as stopped:   # validation's own stop, or the re-copy's
        repair(conn, hasher, KeyRange((1,), (101,)), diff, "valsem.replaced")
    assert getattr(stopped.value, "user_facing", False), repr(stopped.value)
    assert isinstance(stopped.value, ValidationFailed) or "u2" in str(stopped.value), str(stopped.value)


def test_a_repair_that_needs_no_second_round_is_counted_once(conn):
    pair = make_pair(conn, "repaired", "id INT PRIMARY KEY, u VARCHAR(10)",
                     [(i, f"u{i}") for i in range(1, 101)], "ADD UNIQUE KEY u (u)")
    query(conn, f"UPDATE {pair.target_name} SET u = 'wrong' WHERE id = 5")
    query(conn, f"DELETE FROM {pair.target_name} WHERE id = 6")
    hasher = row_hasher(conn, pair)
    keys = differing_keys(conn, hasher, (1,), (101,)).keys
    assert repair(conn, hasher, KeyRange((1,), (101,)), keys, "valsem.repaired") == 2
    assert differences(conn, pair) == set()


def test_key_ranges_in_snapshot_mode_are_read_in_the_snapshot(endpoints, conn):
    """Rows outside the copy chunks that the snapshot holds are compared, though deleted live since."""
    pair = make_pair(conn, "snapranges", "id INT PRIMARY KEY, c VARCHAR(10)",
                     [(i, f"c{i}") for i in range(1, 1001)], "ADD INDEX c (c)")
    query(conn, f"INSERT INTO {pair.source_name} VALUES (-5, 'below'), (5000, 'above')")   # not (yet) applied
    snapshot = db_conn(endpoints)
    try:
        query(snapshot, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        query(snapshot, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        query(conn, f"DELETE FROM {pair.source_name} WHERE id IN (-5, 5000)")
        chunks = [Chunk(0, (1,), (501,), (501,), 500, True), Chunk(1, (501,), (1001,), (1001,), 500, True)]
        ctx = SimpleNamespace(pair=pair, migration=SimpleNamespace(id=1), spec=SimpleNamespace(chunk_size=500),
                              store=lambda _conn: SimpleNamespace(chunks=lambda _id: chunks))
        ranges = validation_ranges(conn, ctx, snapshot)
        hasher = row_hasher(conn, pair)
        found = set().union(*(differing_keys(snapshot, hasher, lo, hi).keys for lo, hi in ranges))
        assert found == {(-5,), (5000,)}
        # every key is covered, below and above the chunks too
        assert validation_ranges(conn, ctx, conn) == [(None, (1,)), ((1,), (501,)), ((501,), (1001,)), ((1001,), None)]
    finally:
        snapshot.close()


def test_a_row_written_without_pause_during_a_repair_is_not_taken_for_a_lossy_change(conn, endpoints, monkeypatch):
    """Validation without a snapshot (the lock did not fit the window) meets a counter the application bumps
    without pause: every re-check finds it changed since its re-copy. That is a write in flight, left to the
    appliers and the cutover's drain, not a row the ALTER changes: the repair must end, not fail."""
    pair = make_pair(conn, "hot", "id INT PRIMARY KEY, counter BIGINT NOT NULL", [(i, 0) for i in range(1, 51)],
                     "ADD COLUMN note INT NULL")
    hasher = row_hasher(conn, pair)
    application = db_conn(endpoints)
    real_check = validate_module.differing_keys
    bumps = []

    def write_lands_before_the_recheck(*args, **kwargs):
        query(application, f"UPDATE {pair.source_name} SET counter = counter + 1 WHERE id = 1")
        bumps.append(1)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(validate_module, "differing_keys", write_lands_before_the_recheck)
    try:
        repair(conn, hasher, KeyRange((1,), (51,)), {(1,)}, "valsem.hot")
    finally:
        application.close()
    assert bumps, "the repair never re-checked"
