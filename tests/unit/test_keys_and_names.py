"""Keys of any shape survive the metadata schema and Debezium's encodings exactly; any name the server
accepts is parsed, quoted, captured and turned into a topic name safely."""
import base64
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest

from connectors.config import java_literal, table_pattern
from core.endpoints import ConfigError
from core.keys import KeyColumn, PrimaryKey, dump_key, load_key
from core.spec import check_name, split_table_arg
from streams.topics import TopicNames, topic_safe


def column(name: str, data_type: str, octets: int | None = None, precision: int | None = None) -> KeyColumn:
    return KeyColumn(name, data_type, data_type, octets, precision)


@pytest.mark.parametrize("key", [
    (2**64 - 1,), (-2**63,), ("User1@x",), ("Ördér ",), (b"\x00\xff" * 8,), (Decimal("-12.3400"),),
    (date(2024, 2, 29),), (datetime(2024, 1, 1, 23, 59, 59, 999999),), (timedelta(hours=-838),),
    (7, "a", b"b", Decimal("1.5")),
])
def test_a_chunk_bound_reads_back_as_the_same_values(key):
    loaded = load_key(dump_key(key))
    assert loaded == key and [type(v) for v in loaded] == [type(v) for v in key]


def test_an_open_bound_stays_open():
    assert dump_key(None) is None and load_key(None) is None


@pytest.mark.parametrize("value", [True, None, 1.5])
def test_a_value_that_is_no_key_is_refused(value):
    with pytest.raises(ValueError):
        dump_key((value,))


def test_a_binary_key_gets_back_the_zero_bytes_the_binlog_drops():
    uuid_with_zero_tail = bytes(range(1, 13)) + b"\0\0\0\0"
    sent = base64.b64encode(uuid_with_zero_tail.rstrip(b"\0")).decode()
    assert column("id", "binary", octets=16).from_change(sent) == uuid_with_zero_tail
    assert column("id", "varbinary", octets=16).from_change(sent) == uuid_with_zero_tail.rstrip(b"\0")


@pytest.mark.parametrize("col, sent, value", [
    (column("d", "date"), 19782, date(2024, 2, 29)),
    (column("t", "datetime", precision=3), 1704153599123, datetime(2024, 1, 1, 23, 59, 59, 123000)),
    (column("t", "datetime", precision=6), 1704153599123456, datetime(2024, 1, 1, 23, 59, 59, 123456)),
    (column("t", "timestamp", precision=6), "2024-01-01T23:59:59.123456Z", datetime(2024, 1, 1, 23, 59, 59, 123456)),
    (column("t", "time", precision=0), -3600_000_000, timedelta(hours=-1)),
    (column("n", "decimal"), "12.50", Decimal("12.50")),
    (column("n", "decimal"), Decimal("12.50"), Decimal("12.50")),
    (column("s", "varchar"), "uSER1@X", "uSER1@X"),
    (column("y", "year"), 2024, 2024),
])
def test_a_change_key_field_becomes_the_value_that_matches_its_row(col, sent, value):
    assert col.from_change(sent) == value


def test_a_composite_change_key_is_read_by_column_name_in_key_order():
    pk = PrimaryKey((column("tenant", "int"), column("seq", "bigint")))
    assert pk.from_change({"seq": 9, "tenant": 2}) == (2, 9)
    assert pk.from_change({"tenant": 2}) is None


def test_a_change_key_holding_the_epoch_in_a_date_column_may_stand_for_any_zero_date_there():
    pk = PrimaryKey((column("d", "date"), column("at", "datetime"), column("ts", "timestamp"), column("n", "int")))
    sent = {"d": 0, "at": 0, "ts": "1970-01-01T00:00:00Z", "n": 0}   # a zero date, a zero datetime, a zero timestamp
    key = pk.from_change(sent)
    assert pk.zero_date_positions(key) == (0, 1, 2)
    where, params = pk.zero_date_family([key])
    assert where.count("OR MONTH(") == 3 and where.count("OR DAYOFMONTH(") == 3 and "`n` = %s" in where
    assert params == list(key)
    assert pk.zero_date_positions((date(1970, 1, 2), datetime(1970, 1, 1, 0, 0, 1), datetime(2000, 1, 1), 0)) == ()
    assert pk.zero_date_positions(("0000-00-00", datetime(1970, 1, 1), datetime(2000, 1, 1), 0)) == (1,)


def test_an_integer_zero_is_no_zero_date():
    pk = PrimaryKey((column("n", "int"),))
    assert pk.zero_date_positions((0,)) == () and not pk.has_date_columns
    assert PrimaryKey((column("n", "int"), column("d", "date"))).has_date_columns


def test_key_ranges_are_open_where_unbounded_and_lexicographic_where_composite():
    single = PrimaryKey((column("id", "int"),))
    assert single.in_range(None, None) == ("TRUE", [])
    assert single.in_range((5,), None) == ("`id` >= %s", [5])
    assert single.in_range(None, (9,)) == ("`id` < %s", [9])
    pk = PrimaryKey((column("a", "int"), column("b", "varchar")))
    sql, params = pk.in_range((1, "x"), (3, "y"))
    assert sql == ("(`a` >= %s AND ((`a` > %s) OR (`a` = %s AND `b` >= %s))) AND "
                   "(`a` <= %s AND ((`a` < %s) OR (`a` = %s AND `b` < %s)))")
    assert params == [1, 1, 1, "x", 3, 3, 3, "y"]
    assert pk.in_list(2) == "(`a`, `b`) IN ((%s, %s), (%s, %s))"
    assert single.in_list(2) == "`id` IN (%s, %s)"


@pytest.mark.parametrize("text, parts", [
    ("shop.orders", ("shop", "orders")),
    ("my db.Ördérs-1", ("my db", "Ördérs-1")),
    ("`my.db`.`a``b`", ("my.db", "a`b")),
    ("a.`b.c`", ("a", "b.c")),
])
def test_a_table_argument_names_database_and_table(text, parts):
    assert split_table_arg(text) == parts


@pytest.mark.parametrize("text", ["orders", "a.b.c", "a.", ".b", "`a.b", "a.b`"])
def test_an_ambiguous_table_argument_is_refused(text):
    with pytest.raises(ConfigError, match="DB.TABLE"):
        split_table_arg(text)


@pytest.mark.parametrize("name, problem", [
    ("", "empty"), ("x" * 65, "65 characters"), ("a\0b", "NUL"), ("a ", "ends with a space"),
    ("a\U0001F600", "Basic Multilingual Plane"),
])
def test_a_name_no_server_accepts_is_refused(name, problem):
    with pytest.raises(ConfigError, match=problem):
        check_name(name)


def test_names_the_server_accepts_are_accepted():
    for name in ("my db", "Ördérs-1", "a`b", "$x", "x" * 64, "表"):
        check_name(name)


def test_include_pattern_spells_every_other_character_as_a_code_point():
    assert java_literal("Ör-d,e r.s") == r"\x{d6}r\x{2d}d\x{2c}e\x{20}r\x{2e}s"
    assert table_pattern("my db", "t") == r"(?-i)my\x{20}db\.t"
    assert "," not in table_pattern("a,b", "c,d")


def test_topic_names_hold_only_kafkas_alphabet():
    names = TopicNames("streamosc_x_12345678", "my db", "Ördérs-1.v2")
    assert names.changes == "streamosc_x_12345678.my_db._rd_rs-1_v2"
    assert topic_safe("x" * 64) == "x" * 64
    longest = TopicNames("streamosc_" + "x" * 64 + "_12345678", "é" * 64, "é" * 64).changes
    assert len(longest) <= 249


@pytest.mark.parametrize("collation, same", [
    ("utf8mb4_general_ci", True), ("utf8mb4_bin", True),                 # PAD SPACE: 'a ' = 'a' in either type
    ("utf8mb4_nopad_bin", False), ("utf8mb4_general_nopad_ci", False),   # MariaDB's NO PAD ones
    ("utf8mb4_0900_ai_ci", False), ("utf8mb4_ja_0900_as_cs", False),     # MySQL 8's UCA 9.0.0 ones, NO PAD
])
def test_a_key_made_char_compares_otherwise_only_where_trailing_spaces_count(collation, same):
    """CHAR drops trailing spaces: under a NO PAD collation the VARCHAR keys 'a ' and 'a' would become one."""
    varchar = KeyColumn("k", "varchar", "varchar(20)", 80, None, collation)
    char = KeyColumn("k", "char", "char(20)", 80, None, collation)
    assert (varchar.comparison == char.comparison) is same
    assert varchar.comparison == KeyColumn("k", "text", "text", None, None, collation).comparison
