"""The change topic: names, creation with N partitions and compaction, deletion, offsets; the capture heartbeat
topic."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from core.endpoints import KafkaAddress


class KafkaUnreachable(Exception):
    """Kafka did not answer."""

    user_facing = True


class KafkaRefused(Exception):
    """Kafka answered but refused the client: its credentials or TLS settings are wrong."""

    user_facing = True


# librdkafka errors that no retry cures: the client's login or TLS settings are wrong
REFUSAL_CODES = {KafkaError._AUTHENTICATION: "refused the client's SASL login (wrong user name, password or mechanism)",
                 KafkaError._SSL: "failed the TLS handshake (check ssl.ca.location and the broker's certificate)",
                 KafkaError.SASL_AUTHENTICATION_FAILED: "refused the client's SASL login (wrong user name, password "
                                                        "or mechanism)"}


def topic_safe(name: str) -> str:
    """A database or table name within Kafka's topic alphabet [a-zA-Z0-9._-] (dots too become `_`)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


@dataclass(frozen=True)
class TopicNames:
    """Every Kafka name one migration uses, derived from its connector's topic prefix."""

    prefix: str
    database: str
    table: str

    @property
    def changes(self) -> str:
        """`<prefix>.<db>.<table>`, with every character a topic name cannot hold as `_` (at most
        10 + 64 + 9 + 2 + 64 + 64 = 213 of Kafka's 249 characters); the prefix keeps it unique."""
        return f"{self.prefix}.{topic_safe(self.database)}.{topic_safe(self.table)}"

    @property
    def capture_heartbeat(self) -> str:
        """The capture heartbeat row's changes (monitor/capture_lag.py), kept out of the change topic."""
        return f"{self.prefix}.capture-heartbeat"

    @property
    def schema_history(self) -> str:
        return f"{self.prefix}.schema-history"

    @property
    def heartbeat(self) -> str:
        return f"__debezium-heartbeat.{self.prefix}"

    def all(self) -> list[str]:
        return [self.changes, self.capture_heartbeat, self.schema_history, self.heartbeat]


def client_config(kafka: KafkaAddress, **settings: object) -> dict[str, object]:
    """Settings every Kafka client of stream-osc starts from: the address, the operator's client properties
    (SASL/TLS), then the client's own settings.

    librdkafka's own log is limited to critical messages: while a broker restarts it would print a
    line per reconnect attempt (20 a second); the failures that matter reach the caller as errors.
    """
    return {"bootstrap.servers": kafka.bootstrap, "log_level": 2, **kafka.settings(), **settings}


def consumer_config(kafka: KafkaAddress, **settings: object) -> dict[str, object]:
    """client_config for a consumer, with its prefetch queue capped: librdkafka's default (64 MiB per
    consumer) made a process's memory grow with the change backlog, not with what it works on."""
    return client_config(kafka, **{"queued.max.messages.kbytes": 8192, **settings})


def admin(kafka: KafkaAddress, **settings: object) -> AdminClient:
    return AdminClient(client_config(kafka, **{"socket.timeout.ms": 10000, **settings}))


def check_reachable(kafka: KafkaAddress, timeout: float = 10.0) -> None:
    """Raise KafkaRefused as soon as the broker refuses the login or TLS, KafkaUnreachable when none answers.

    librdkafka reports a refused login only to the error callback, served by poll(); the metadata request
    itself just times out. So the request is retried in short steps, polling in between.
    """
    refusals: list[str] = []

    def note(error: KafkaError) -> None:
        if error.code() in REFUSAL_CODES:
            refusals.append(REFUSAL_CODES[error.code()])
    client = admin(kafka, error_cb=note)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.list_topics(timeout=max(min(1.0, deadline - time.monotonic()), 0.1))
            return
        except KafkaException:
            client.poll(0)
        if refusals:
            raise KafkaRefused(f"Kafka at {kafka.bootstrap} {refusals[0]}; the client properties come from "
                               "STREAM_OSC_KAFKA_PROPERTIES (docs/connectivity.md)")
        if time.monotonic() >= deadline:
            raise KafkaUnreachable(f"Kafka at {kafka.bootstrap} is unreachable (no broker answered within "
                                   f"{timeout:.0f} s)")


def create_change_topic(kafka: KafkaAddress, name: str, partitions: int) -> None:
    """Create the compacted change topic (latest event per key) before the connector starts."""
    topic = NewTopic(name, num_partitions=partitions, replication_factor=-1, config={
        "cleanup.policy": "compact",
        "segment.ms": str(10 * 60 * 1000),
        "min.compaction.lag.ms": "0",
    })
    client = admin(kafka)   # must outlive the futures
    client.create_topics([topic], operation_timeout=30)[name].result()


def create_capture_heartbeat_topic(kafka: KafkaAddress, name: str) -> None:
    """Create the capture heartbeat topic before the connector starts: one partition (its stamps in the order
    written), kept an hour (its reader only follows new stamps)."""
    topic = NewTopic(name, num_partitions=1, replication_factor=-1, config={"retention.ms": str(60 * 60 * 1000)})
    client = admin(kafka)   # must outlive the futures
    client.create_topics([topic], operation_timeout=30)[name].result()


def delete_topics(kafka: KafkaAddress, names: list[str]) -> None:
    """Delete the topics that exist among `names`: one admin client and one listing per teardown (a listing per
    name took a new client's connection and metadata request each)."""
    if not names:
        return
    client = admin(kafka)
    existing = client.list_topics(timeout=10).topics
    present = [n for n in names if n in existing]
    if not present:
        return
    for future in client.delete_topics(present, operation_timeout=30).values():
        try:
            future.result()
        except KafkaException:
            pass


def partition_count(kafka: KafkaAddress, name: str) -> int:
    meta = admin(kafka).list_topics(topic=name, timeout=10)
    return len(meta.topics[name].partitions)


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """High watermark of every partition."""
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(partitions)}


def committed_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (0 where nothing is committed yet)."""
    tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    return {tp.partition: max(tp.offset, 0) for tp in tps}


def group_reader(kafka: KafkaAddress, group: str) -> Consumer:
    """A consumer that only reads `group`'s committed offsets and the topic's ends (it never subscribes, so it
    does not join the group); for `consumer_lag`, to be closed by the caller."""
    return Consumer(consumer_config(kafka, **{"group.id": group, "enable.auto.commit": False}))


def consumer_lag(consumer: Consumer, topic: str, partitions: int) -> int:
    """Events in the topic that the group of `consumer` (see `group_reader`) has not committed yet."""
    ends = end_offsets(consumer, topic, partitions)
    done = committed_offsets(consumer, topic, partitions)
    return sum(max(ends[p] - done.get(p, 0), 0) for p in ends)


def group_lag(kafka: KafkaAddress, group: str, topic: str, partitions: int) -> int:
    """Events in the topic the group has not committed yet (one read, with a consumer of its own)."""
    consumer = group_reader(kafka, group)
    try:
        return consumer_lag(consumer, topic, partitions)
    finally:
        consumer.close()


def commit_start_offsets(kafka: KafkaAddress, group: str, topic: str, partitions: int) -> None:
    """Commit, for the (empty) applier group, the topic's first offset in every partition, consuming nothing.

    The appliers would start there anyway (auto.offset.reset=earliest); committed, the group exists for
    lag tools from the moment capture starts, its lag the backlog the appliers will start from.
    """
    consumer = Consumer(consumer_config(kafka, **{"group.id": group, "enable.auto.commit": False}))
    try:
        starts = [TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                                          cached=False)[0])
                  for p in range(partitions)]
    finally:
        consumer.close()
    client = admin(kafka)   # must outlive the futures
    request = ConsumerGroupTopicPartitions(group, starts)
    for future in client.alter_consumer_group_offsets([request], request_timeout=30).values():
        future.result()
