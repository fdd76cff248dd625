"""The keys written between two positions of a topic (streams/key_scan.py), read from a real broker: every key
from the start on, to each partition's end, fences and key-less records left out, and a bound on their number."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from core.keys import Key
from streams.events import FENCE_KEY_COLUMN, encode_key
from streams.key_scan import TooManyKeys, changed_keys, scan_consumer
from streams.topics import admin, client_config, end_offsets
from tests.integration.helpers import ID_KEY

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(endpoints):
    """A fresh two-partition topic: partition 0 holds ids 1-10, a fence and a key-less record; partition 1
    ids 11-20."""
    name = f"keyscan-{uuid.uuid4().hex[:8]}"
    client = admin(endpoints.kafka)
    client.create_topics([NewTopic(name, num_partitions=2, replication_factor=-1)], operation_timeout=30)[name].result()
    producer = Producer(client_config(endpoints.kafka))
    for key in range(1, 21):
        producer.produce(name, key=encode_key("id", key), value=b"{}", partition=0 if key <= 10 else 1)
    producer.produce(name, key=encode_key(FENCE_KEY_COLUMN, 1), value=b'{"after": {"token": "t"}}', partition=0)
    producer.produce(name, key=None, value=b"{}", partition=0)
    assert producer.flush(30) == 0
    yield name
    client.delete_topics([name], operation_timeout=30)


def scan(endpoints, topic: str, start: dict[int, int], end: dict[int, int], limit: int = 100) -> set[Key]:
    consumer = scan_consumer(endpoints.kafka, f"keyscan-{uuid.uuid4().hex[:8]}")
    try:
        return changed_keys(consumer, topic, start, end, ID_KEY, limit)
    finally:
        consumer.close()


def ends(endpoints, topic: str) -> dict[int, int]:
    consumer = scan_consumer(endpoints.kafka, "keyscan-ends")
    try:
        return end_offsets(consumer, topic, 2)
    finally:
        consumer.close()


def test_every_table_key_from_the_start_is_found_and_fences_are_not(endpoints, topic):
    end = ends(endpoints, topic)
    assert end == {0: 12, 1: 10}
    assert scan(endpoints, topic, {0: 0, 1: 0}, end) == {(k,) for k in range(1, 21)}


def test_keys_before_the_start_are_left_out(endpoints, topic):
    end = ends(endpoints, topic)
    assert scan(endpoints, topic, {0: 5, 1: 10}, end) == {(k,) for k in range(6, 11)}


def test_the_scan_reads_on_to_the_partitions_end_past_the_given_end(endpoints, topic):
    """An event before `end` may be compacted away during the scan, its key's later event lying after `end`."""
    assert scan(endpoints, topic, {0: 0, 1: 0}, {0: 1, 1: 1}) == {(k,) for k in range(1, 21)}


def test_a_partition_already_at_its_end_is_not_read(endpoints, topic):
    assert scan(endpoints, topic, {0: 12, 1: 10}, {0: 12, 1: 10}) == set()


def test_more_keys_than_the_limit_stop_the_scan(endpoints, topic):
    with pytest.raises(TooManyKeys):
        scan(endpoints, topic, {0: 0, 1: 0}, ends(endpoints, topic), limit=5)
