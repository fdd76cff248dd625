"""Capture heartbeats: rows the coordinator stamps in the captured fence table, and where they show up in Kafka.

Debezium's own heartbeat record carries only the wall-clock time it was sent. It is sent while the
connector reads any binlog event, also while it works through an old backlog, so a fresh heartbeat
says "the connector is alive", not "it has read the binlog up to now". A row written at a known
moment and seen in the change topic proves the second (as pt-heartbeat does for replicas): every
change committed before it was read by then.

The probe row has its own key (`PROBE_ID`, below every fence id) in the fence table, so appliers
and fence readers skip its events like any fence event, and its token (`probe-<epoch seconds>`)
never matches a fence's.
"""
from __future__ import annotations

import json

import pymysql
from confluent_kafka import Consumer, TopicPartition

from core.db import qualified, quote_ident
from core.state import FENCE_KEY_COLUMN
from streams.events import encode_key, fence_token
from streams.murmur2 import partition_for
from streams.topics import consumer_config

PROBE_ID = 0                 # fence ids start at 1 (streams/fence.py)
PROBE_KEY = encode_key(FENCE_KEY_COLUMN, PROBE_ID)   # the exact key bytes of its events
TOKEN_PREFIX = "probe-"
READ_BATCH = 5000


def probe_partition(partitions: int) -> int:
    """The change-topic partition the probe row's events land in."""
    return partition_for(encode_key(FENCE_KEY_COLUMN, PROBE_ID), partitions)


def probe_token(written_at: float) -> str:
    return f"{TOKEN_PREFIX}{written_at:.6f}"


def probe_stamp(token: str | None) -> float | None:
    """The moment a probe token was written at (None for fence tokens and other values)."""
    if not token or not token.startswith(TOKEN_PREFIX):
        return None
    try:
        return float(token[len(TOKEN_PREFIX):])
    except ValueError:
        return None


def write_probe(conn: pymysql.connections.Connection, schema: str, fence_table: str, written_at: float) -> None:
    """Stamp the probe row with `written_at` (an autocommitted UPDATE, as the coordinator's lease; the row is
    inserted on first use only, so that a paused migration inserts nothing)."""
    table = qualified(schema, fence_table)
    with conn.cursor() as cur:
        if cur.execute(f"UPDATE {table} SET token=%s WHERE {quote_ident(FENCE_KEY_COLUMN)}=%s",
                       (probe_token(written_at), PROBE_ID)) == 0:
            cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s)", (PROBE_ID, probe_token(written_at)))


def heartbeat_sent_at(value: bytes | None) -> float | None:
    """When Debezium sent a heartbeat record (its value's `ts_ms`, Unix seconds)."""
    try:
        ts_ms = json.loads(value or b"null")["ts_ms"]
    except (ValueError, TypeError, KeyError):
        return None
    return ts_ms / 1000.0 if isinstance(ts_ms, (int, float)) else None


class CaptureReader:
    """Follows the probe's partition of the change topic and the connector's heartbeat topic from their
    ends, with its own assignment (it never joins or commits for a group)."""

    def __init__(self, bootstrap: str, changes_topic: str, heartbeat_topic: str, partitions: int) -> None:
        self.consumer = Consumer(consumer_config(bootstrap, **{
            "group.id": f"{changes_topic}.capture-probe", "enable.auto.commit": False,
            "enable.partition.eof": False, "fetch.wait.max.ms": 10}))
        self.changes_topic = changes_topic
        self.heartbeat_topic = heartbeat_topic
        probes = TopicPartition(changes_topic, probe_partition(partitions))
        heartbeats = TopicPartition(heartbeat_topic, 0)
        probes.offset = self._end(probes)                      # probes written from now on
        heartbeats.offset = max(self._end(heartbeats) - 1, 0)   # the latest heartbeat, at once
        self.consumer.assign([probes, heartbeats])

    def _end(self, partition: TopicPartition) -> int:
        return self.consumer.get_watermark_offsets(partition, timeout=10, cached=False)[1]

    def read(self, timeout: float) -> tuple[float | None, float | None]:
        """What arrived since the last read, waiting up to `timeout` for the first record: (newest probe stamp
        seen, newest heartbeat send time), None for what did not come."""
        newest_probe = newest_heartbeat = None
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
                if msg.key() == PROBE_KEY:   # every other key of the partition is passed over unparsed
                    stamp = probe_stamp(fence_token(msg.value()))
                    if stamp is not None:
                        newest_probe = max(newest_probe or stamp, stamp)
            if len(messages) < READ_BATCH:
                return newest_probe, newest_heartbeat

    def close(self) -> None:
        self.consumer.close()
