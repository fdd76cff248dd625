"""Partitioning, key decoding and fence placement."""
import json
import random
from decimal import Decimal

import pytest

from core.keys import KeyColumn, PrimaryKey
from streams.events import FENCE_KEY_COLUMN, decode_event, decode_key, encode_key, fence_token
from streams.fence import fence_ids_for
from streams.murmur2 import murmur2, partition_for


def test_murmur2_matches_kafka_vectors():
    # Vectors from Kafka's UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(bytes([ord("a"), ord("b"), ord("c")])) == 479470107


def test_partition_is_positive_modulo():
    for n in range(200):
        assert 0 <= partition_for(encode_key("id", n), 8) < 8


def test_key_bytes_are_compact_json():
    assert encode_key("id", 1000) == b'{"id":1000}'


def test_fence_ids_cover_every_partition_in_order():
    for partitions in (1, 3, 8, 16):
        ids = fence_ids_for(partitions)
        assert [partition_for(encode_key(FENCE_KEY_COLUMN, i), partitions) for i in ids] == list(range(partitions))


ID = PrimaryKey((KeyColumn("id", "int", "int(11)", None, None),))


def test_decode_key_row_and_fence():
    assert decode_key(b'{"id":7}', ID).pk == (7,)
    fence = decode_key(encode_key(FENCE_KEY_COLUMN, 3), ID)
    assert fence.is_fence and fence.fence_id == 3 and fence.pk is None
    assert decode_key(encode_key(FENCE_KEY_COLUMN, 3), None).fence_id == 3
    assert decode_key(b'{"id":7}', None) is None
    assert decode_key(None, ID) is None
    assert decode_key(b'{"other":1}', ID) is None


def test_decode_key_keeps_utf8_text_and_decimal_digits_of_a_key():
    name_and_amount = PrimaryKey((KeyColumn("name", "varchar", "varchar(20)", 80, None, "utf8mb4_bin"),
                                  KeyColumn("amount", "decimal", "decimal(30,10)", None, None)))
    raw = '{"name":"Zoë 😀 \\u00e9","amount":12345678901234567890.0123456789}'.encode()
    assert decode_key(raw, name_and_amount).pk == ("Zoë 😀 é", Decimal("12345678901234567890.0123456789"))


def test_fence_token_and_full_event():
    value = json.dumps({"before": None, "after": {"token": "t-1"}, "op": "u",
                        "source": {"table": "fence_1", "gtid": "0-1-9", "file": "b.000001", "pos": 42}}).encode()
    assert fence_token(value) == "t-1"
    row = json.dumps({"op": "d", "before": {"id": 5}, "after": None,
                      "source": {"table": "t", "gtid": "0-1-10", "file": "b.000001", "pos": 99}}).encode()
    event = decode_event(b'{"id":5}', row, ID)
    assert (event.op, event.pk, event.table, event.pos) == ("d", (5,), "t", 99)


def test_an_integer_key_read_from_its_bytes_is_the_key_the_parser_reads():
    """The bytes shortcut for one plainly named integer column must give what the JSON parser gives, for every
    key an applier may meet: negative, wider than 64 bits, written as a decimal, with other fields or spaces."""
    rng = random.Random(20261206)
    keys = [encode_key("id", rng.randint(-2**65, 2**65)) for _ in range(2_000)]
    keys += [b'{"id":0}', b'{"id":-0}', b'{"id":007}', b'{"id":18446744073709551615}', b'{"id":7.0}',
             b'{"id":1e3}', b'{"id": 7}', b'{"id":7,"x":1}', b'{"id":"7"}', b'{"Id":7}', b'{"id":-}', b'{"id":}',
             b'{"idx":7}', b'{"id":7}}', b'{"id":12', b'{"id":+7}', b'{"id":\t7}', encode_key(FENCE_KEY_COLUMN, 3)]
    for key in keys:
        try:
            doc = json.loads(key, parse_float=Decimal)
        except ValueError:
            with pytest.raises(ValueError):
                decode_key(key, ID)
            continue
        parsed = ID.from_change(doc) if FENCE_KEY_COLUMN not in doc else None
        got = decode_key(key, ID)
        assert (None if got is None or got.is_fence else got.pk) == parsed, key
        if parsed is not None:
            assert type(got.pk[0]) is int, key


def test_a_table_keyed_by_the_fence_column_name_is_read_as_the_parser_reads_it():
    fence_named = PrimaryKey((KeyColumn(FENCE_KEY_COLUMN, "bigint", "bigint(20)", None, None),))
    assert decode_key(encode_key(FENCE_KEY_COLUMN, 3), fence_named).fence_id == 3


def test_only_a_single_plainly_named_integer_key_is_read_from_its_bytes():
    assert ID.integer_change_key_prefix == b'{"id":'
    assert PrimaryKey((KeyColumn("id", "varchar", "varchar(9)", 9, None, "utf8mb4_bin"),)).integer_change_key_prefix \
        is None
    assert PrimaryKey((KeyColumn("näme", "int", "int(11)", None, None),)).integer_change_key_prefix is None
    assert PrimaryKey((KeyColumn("a", "int", "int(11)", None, None),
                       KeyColumn("b", "int", "int(11)", None, None))).integer_change_key_prefix is None
