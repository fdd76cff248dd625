"""Capture heartbeats: a row the coordinator stamps in its own captured table, and where the stamps show up in Kafka.

Debezium's own heartbeat record carries only the wall-clock time it was sent. It is sent while the
connector reads any binlog event, also while it works through an old backlog, so a fresh heartbeat
says "the connector is alive", not "it has read the binlog up to now". A row written at a known
moment and seen in Kafka proves the second (as pt-heartbeat does for replicas): every change
committed before it was read by then, since the connector's one task reads the binlog in order.

The row is alone in its table (`<metadata schema>.capture_heartbeat_<id>`), which the connector
routes to its own topic (connectors/config.py): the stamps never enter the change topic, so they
never count as the appliers' lag and no applier or fence reader ever sees them.
"""
from __future__ import annotations

import json

import pymysql
from confluent_kafka import Consumer, TopicPartition

from core.db import qualified
from core.endpoints import KafkaAddress
from streams.closing import close_within
from streams.topics import consumer_config

READ_BATCH = 500


def write_stamp(conn: pymysql.connections.Connection, schema: str, table: str, written_at: float) -> None:
    """Stamp the capture heartbeat row with `written_at` (an autocommitted UPDATE of the row init inserted)."""
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {qualified(schema, table)} SET stamped_us=%s", (round(written_at * 1_000_000),))


def stamp_of(value: bytes | None) -> float | None:
    """The moment (Unix seconds) a capture heartbeat event's row was stamped with (None: not a stamp)."""
    try:
        stamped_us = (json.loads(value or b"null")["after"] or {}).get("stamped_us")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return stamped_us / 1_000_000 if isinstance(stamped_us, int) and stamped_us > 0 else None


def heartbeat_sent_at(value: bytes | None) -> float | None:
    """When Debezium sent a heartbeat record (its value's `ts_ms`, Unix seconds)."""
    try:
        ts_ms = json.loads(value or b"null")["ts_ms"]
    except (ValueError, TypeError, KeyError):
        return None
    return ts_ms / 1000.0 if isinstance(ts_ms, (int, float)) else None


class CaptureReader:
    """Follows the capture heartbeat topic and the connector's heartbeat topic from their ends, with its own
    assignment (it never joins or commits for a group)."""

    def __init__(self, kafka: KafkaAddress, stamps_topic: str, heartbeat_topic: str) -> None:
        # librdkafka's default fetch wait (500 ms) is kept: the broker answers a fetch as soon as a record comes,
        # about 50 ms after it was stamped; short waits on these quiet topics were measured to deliver 0.1-0.5 s late.
        self.consumer = Consumer(consumer_config(kafka, **{
            "group.id": f"{stamps_topic}.reader", "enable.auto.commit": False, "enable.partition.eof": False}))
        self.heartbeat_topic = heartbeat_topic
        stamps = TopicPartition(stamps_topic, 0)
        heartbeats = TopicPartition(heartbeat_topic, 0)
        stamps.offset = self._end(stamps)                       # stamps written from now on
        heartbeats.offset = max(self._end(heartbeats) - 1, 0)   # the latest heartbeat, at once
        self.consumer.assign([stamps, heartbeats])

    def _end(self, partition: TopicPartition) -> int:
        return self.consumer.get_watermark_offsets(partition, timeout=10, cached=False)[1]

    def read(self, timeout: float) -> tuple[float | None, float | None]:
        """What arrived since the last read, waiting up to `timeout` for the first record: (newest stamp seen,
        newest heartbeat send time), None for what did not come."""
        newest_stamp = newest_heartbeat = None
        while True:
            messages = self.consumer.consume(num_messages=READ_BATCH, timeout=timeout)
            timeout = 0
            for msg in messages:
                if msg.error():
                    continue
                if msg.topic() == self.heartbeat_topic:
                    sent = heartbeat_sent_at(msg.value())
                    if sent is not None:
                        newest_heartbeat = max(newest_heartbeat or sent, sent)
                    continue
                stamp = stamp_of(msg.value())
                if stamp is not None:
                    newest_stamp = max(newest_stamp or stamp, stamp)
            if len(messages) < READ_BATCH:
                return newest_stamp, newest_heartbeat

    def close(self) -> None:
        close_within(self.consumer, "capture-heartbeat")
