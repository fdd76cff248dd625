"""Lag a platform team can watch during the longest stage, the copy: the applier group exists for Kafka lag
tools with a backlog that grows with the application's writes (and only with them: capture heartbeats have
their own topic), and capture lag is small while the connector is healthy and grows while it is paused and
writes go on, then falls once it catches up."""
from __future__ import annotations

import re
import urllib.request

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from demo.traffic import Traffic, SampleRows
from stack.process import free_ports
from streams.topics import TopicNames
from tests.integration.helpers import cli, db_conn, fresh_table, latest_migration_id, new_migration_row, scrape, \
    start_cli, status_doc, wait_for

pytestmark = pytest.mark.integration

DB = "lag_watch"
ROWS = 2_000
PARTITIONS = 2
HOLD_COPY = "Threads_running=1"   # always reached (the status query itself runs): the copy waits throughout


def group_backlog(bootstrap: str, group: str, topic: str) -> dict[int, int] | None:
    """{partition: high watermark - committed offset} as a lag tool reads it; None while nothing is committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    committed = admin.list_consumer_group_offsets([request])[group].result().topic_partitions
    if any(tp.offset < 0 for tp in committed):
        return None
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}.lag-tool"})
    try:
        return {tp.partition: reader.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)[1]
                - tp.offset for tp in committed}
    finally:
        reader.close()


def topic_ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """The high watermark of every partition of `topic`."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-visibility.ends"})
    try:
        return [reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)]
    finally:
        reader.close()


def connector_call(connect_url: str, name: str, action: str) -> None:
    request = urllib.request.Request(f"{connect_url}/connectors/{name}/{action}", method="PUT")
    urllib.request.urlopen(request, timeout=15).close()


def test_group_backlog_and_capture_lag_are_visible_and_honest_during_the_copy(endpoints, tmp_path):
    table = "watched"
    qualified = f"{DB}.{table}"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=14)
    earlier = latest_migration_id(conn, DB, table)
    port = free_ports(1)[0]
    log = tmp_path / "cli.log"
    proc = start_cli("migrate", "--algorithm", "copy", "--table", qualified, "--alter", "ADD COLUMN flag INT NULL",
                     "--max-load", HOLD_COPY,
                     "--partitions", str(PARTITIONS), "--metrics-port", str(port), "--log-level", "INFO", log=log)
    traffic = Traffic(endpoints.mysql, DB, table, SampleRows(ROWS, 14), seed=14, writers=1, rate=50.0)
    key = (("table", qualified),)

    def capture_lag() -> float | None:
        samples = scrape(port) or {}
        return samples.get(("stream_osc_capture_lag_seconds", key))   # absent while not known

    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        wait_for(lambda: new_migration_row(conn, DB, table, earlier).stage == "copy", 120, "the copy stage")
        names = TopicNames(migration.prefix, DB, table)
        traffic.start()

        # the group is there with committed offsets while the copy waits, and its lag grows with the writes
        # (--max-load holds the appliers as well as the copy, so nothing is applied meanwhile)
        first = wait_for(lambda: group_backlog(endpoints.kafka_bootstrap, migration.group_id, names.changes), 30,
                         "the applier group's committed offsets")
        wait_for(lambda: sum(group_backlog(endpoints.kafka_bootstrap, migration.group_id,
                                           names.changes).values()) >= sum(first.values()) + 50,
                 60, "the group's lag to grow with the writes")
        assert new_migration_row(conn, DB, table, earlier).stage == "copy"

        # healthy connector: capture lag is known and small
        wait_for(capture_lag, 30, "a capture lag figure")
        healthy = [wait_for(lambda: capture_lag() is not None and capture_lag(), 10, "capture lag") for _ in range(5)]
        # a stamp is written every second; a healthy connector shows it within about that (a stopped one, below,
        # grows past five seconds)
        assert min(healthy) < 1.5 and max(healthy) < 2.0, healthy
        doc = status_doc(DB, table)
        assert doc["stage"] == "copy" and doc["capture_lag_s"] is not None and doc["capture_lag_s"] < 2.0, doc
        assert doc["apply_lag_events"] >= sum(first.values()), doc

        # paused connector, writes going on: the figure grows, then falls once capture catches up
        connector_call(endpoints.connect_url, migration.connector, "pause")
        try:
            wait_for(lambda: (capture_lag() or 0) > 5.0, 30, "capture lag to grow past 5 s")
            grown = capture_lag()
            wait_for(lambda: (capture_lag() or 0) > grown + 2.0, 30, "capture lag to keep growing")
        finally:
            connector_call(endpoints.connect_url, migration.connector, "resume")
        wait_for(lambda: (capture_lag() or 99) < 2.0, 60, "capture lag to fall once the connector resumed")

        # writes stopped: capture heartbeats go on in their own topic and add nothing to the applier group's lag
        traffic.stop()
        def stamps_after(count: int) -> None:
            """Wait for `count` more capture heartbeats in their topic (each stamped after the wait began)."""
            target = topic_ends(endpoints.kafka_bootstrap, names.capture_heartbeat, 1)[0] + count
            wait_for(lambda: topic_ends(endpoints.kafka_bootstrap, names.capture_heartbeat, 1)[0] >= target, 30,
                     f"{count} capture heartbeats")

        stamps_after(2)   # capture has read past the last write
        changes = topic_ends(endpoints.kafka_bootstrap, names.changes, PARTITIONS)
        backlog = group_backlog(endpoints.kafka_bootstrap, migration.group_id, names.changes)
        stamps_after(3)
        assert topic_ends(endpoints.kafka_bootstrap, names.changes, PARTITIONS) == changes
        assert group_backlog(endpoints.kafka_bootstrap, migration.group_id, names.changes) == backlog
    finally:
        traffic.stop()
        cli("abort", "--table", qualified)
        try:
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
        conn.close()

    lag_lines = [line for line in log.read_text().splitlines() if re.search(r"\bmsg=lag\b", line)]
    assert lag_lines and all("capture_lag_s=" in line and "apply_lag_events=" in line for line in lag_lines), \
        log.read_text()[-3000:]
