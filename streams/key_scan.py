"""The keys of the change events between two positions of the change topic: what changed since a moment.

The topic is compacted (streams/topics.py): an older event of a key may be gone, but a later one of the same
key is then there, so every key changed between the positions still appears (a delete's tombstone stays
for the topic's delete.retention.ms, 24 hours by default: a caller trusting an older position must not).
"""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from core.endpoints import KafkaAddress
from core.keys import Key, PrimaryKey
from streams.events import decode_key
from streams.topics import consumer_config

# A scan that receives nothing for this long while partitions remain gives up (the broker is unreachable)
SCAN_STALL_S = 60.0


class TooManyKeys(Exception):
    """More keys changed than the caller wants to handle one by one."""


def scan_consumer(kafka: KafkaAddress, group_id: str) -> Consumer:
    """A consumer that reads partitions by assignment (it never joins or commits for the group) and tells when
    it reached a partition's end. A start before the first offset kept reads from the first (more keys, never
    fewer)."""
    return Consumer(consumer_config(kafka, **{"group.id": group_id, "enable.auto.commit": False,
                                                "enable.partition.eof": True, "auto.offset.reset": "earliest"}))


def changed_keys(consumer: Consumer, topic: str, start: dict[int, int], end: dict[int, int], pk: PrimaryKey,
                 limit: int) -> set[Key]:
    """The table keys of the events of each partition from `start` on, up to its end once that is at least
    `end` (fences are no table keys).

    Reading on to the partition's end, not stopping at `end`: an event before `end` may be compacted away
    while the scan runs, and its key's later event is then after `end`. Raises TooManyKeys past `limit`
    distinct keys, KafkaException when the scan stalls for SCAN_STALL_S.
    """
    remaining = {p for p, offset in start.items() if offset < end.get(p, 0)}
    keys: set[Key] = set()
    if not remaining:
        return keys
    consumer.assign([TopicPartition(topic, p, start[p]) for p in remaining])
    try:
        last_progress = time.monotonic()
        while remaining:
            messages = consumer.consume(num_messages=5000, timeout=0.5)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > SCAN_STALL_S:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no change events read from {topic} for "
                                                                       f"{SCAN_STALL_S:.0f} s"))
            for msg in messages:
                partition, error = msg.partition(), msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if partition in remaining and msg.offset() >= end[partition]:
                            remaining.discard(partition)
                    elif error.fatal():
                        raise KafkaException(error)
                    continue
                change = decode_key(msg.key(), pk)
                if change is not None and change.pk is not None:
                    keys.add(change.pk)
                    if len(keys) > limit:
                        raise TooManyKeys(f"more than {limit} keys changed")
    finally:
        consumer.unassign()
    return keys
