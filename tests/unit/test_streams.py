"""Partitioning, key decoding and fence placement."""
import json
from decimal import Decimal

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
