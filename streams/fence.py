"""Fences: marker rows whose change events prove how far the change topic has caught up.

One fence row per partition, keyed so that Kafka's partitioner puts it in that partition. After a
fence token is written, seeing it in a partition proves that every change committed before it and
keyed to that partition is already in the partition (Connect's producer keeps per-partition order).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection

from confluent_kafka import Consumer, TopicPartition

from core.endpoints import KafkaAddress
from streams.events import FENCE_KEY_COLUMN, decode_key, encode_key, fence_token
from streams.murmur2 import partition_for
from streams.topics import consumer_config


class FenceTimeout(Exception):
    """A fence token did not reach every partition in time."""


def fence_ids_for(partitions: int) -> list[int]:
    """The smallest ids whose fence keys land one in each partition, ordered by partition."""
    found: dict[int, int] = {}
    candidate = 1
    while len(found) < partitions:
        found.setdefault(partition_for(encode_key(FENCE_KEY_COLUMN, candidate), partitions), candidate)
        candidate += 1
    return [found[p] for p in range(partitions)]


class FenceReader:
    """Reads every partition of the change topic up to a fence, one consumer for many reads.

    Each read assigns the partitions afresh at its start offsets. Pausing fenced partitions and
    seeking them back for the next read was measured to delay the next read's first fetch by about a
    second after any idle moment (librdkafka); a fresh assignment fetches at once, and records a
    partition delivers after its fence are simply skipped.
    """

    def __init__(self, consumer: Consumer, topic: str, partitions: int) -> None:
        self.consumer = consumer
        self.topic = topic
        self.partitions = list(range(partitions))
        # The topic's leaders, learnt now: a consumer whose first request was for the group's committed offsets
        # (the cutover's catch-up starts there) otherwise sends its first fetch about a second after the
        # assignment (measured: 0.95 s against 2 ms; librdkafka), and a validation snapshot waited that long.
        consumer.list_topics(topic, timeout=10)

    def _position(self, start: dict[int, int]) -> None:
        self.consumer.assign([TopicPartition(self.topic, p, start[p]) for p in self.partitions])

    def read(self, start: dict[int, int], token: str | Collection[str], timeout: float,
             on_key: Callable[[bytes], None] | None = None) -> dict[int, int]:
        """Read from `start` until each partition shows a fence with `token` (or any of several tokens);
        pass other keys to on_key.

        Returns, per partition, the offset just after its fence. Raises FenceTimeout when `timeout` passes first.
        """
        tokens = {token} if isinstance(token, str) else set(token)
        self._position(start)
        try:
            return self._read_to_fence(tokens, timeout, on_key)
        finally:
            # between reads nothing is assigned: a kept consumer would otherwise go on fetching the change
            # topic in the background (every fetch.wait.max.ms) through every wait of the cutover
            self.consumer.unassign()

    def _read_to_fence(self, tokens: set[str], timeout: float, on_key: Callable[[bytes], None] | None
                       ) -> dict[int, int]:
        waiting = set(self.partitions)
        after_fence: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FenceTimeout(f"fence {sorted(tokens)} not seen in partitions {sorted(waiting)} of {self.topic} "
                                   f"after {timeout:.1f} s")
            for msg in self.consumer.consume(num_messages=5000, timeout=min(remaining, 0.005)):
                if msg.error() or msg.partition() not in waiting:
                    continue
                key = decode_key(msg.key(), None)
                if key is not None and key.is_fence:
                    if fence_token(msg.value()) in tokens:
                        waiting.discard(msg.partition())
                        after_fence[msg.partition()] = msg.offset() + 1
                elif on_key is not None:
                    on_key(msg.key())
        return after_fence


def fence_consumer(kafka: KafkaAddress, group_id: str) -> Consumer:
    """A consumer that reads partitions by assignment (it never joins or commits for the group)."""
    return Consumer(consumer_config(kafka, **{"group.id": group_id, "enable.auto.commit": False,
                                                "enable.partition.eof": False, "fetch.wait.max.ms": 10}))
