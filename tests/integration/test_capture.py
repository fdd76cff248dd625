"""Change capture: every kind of row change arrives in the partitioned topic, keyed by PK."""
import pytest
from confluent_kafka import Consumer, TopicPartition

from core.db import ServerInfo, query
from migration.init_stage import start_capture, topic_prefix
from migration.teardown import remove_capture
from core.spec import MigrationSpec
from core.state import StateStore
from streams.events import decode_event
from streams.fence import fence_ids_for
from streams.murmur2 import partition_for
from streams.topics import TopicNames, partition_count
from tests.integration.helpers import db_conn, leftovers

pytestmark = pytest.mark.integration


def test_insert_update_delete_and_pk_change_reach_the_topic(endpoints):
    conn = db_conn(endpoints)
    query(conn, "CREATE DATABASE IF NOT EXISTS cap")
    query(conn, "DROP TABLE IF EXISTS cap.items")
    query(conn, "CREATE TABLE cap.items (id INT PRIMARY KEY, v VARCHAR(20))")
    spec = MigrationSpec(database="cap", table="items", alter="ADD COLUMN x INT", partitions=8).validate()
    store = StateStore(conn, spec.metadata_schema)
    store.ensure_schema()
    migration = store.create("cap", "items", spec.alter, topic_prefix(spec), "id", {})
    store.create_fence_table(migration.id, fence_ids_for(spec.partitions))
    try:
        start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)
        query(conn, "INSERT INTO cap.items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        query(conn, "UPDATE cap.items SET v = 'bb' WHERE id = 2")
        query(conn, "DELETE FROM cap.items WHERE id = 3")
        query(conn, "UPDATE cap.items SET id = 100 WHERE id = 1")

        names = TopicNames(migration.prefix, "cap", "items")
        assert partition_count(endpoints.kafka_bootstrap, names.changes) == 8
        consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": "cap-test",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(names.changes, p, 0) for p in range(8)])
        seen = []
        deadline_msgs = 0
        while len(seen) < 7 and deadline_msgs < 300:
            deadline_msgs += 1
            for msg in consumer.consume(100, timeout=0.2):
                event = decode_event(msg.key(), msg.value(), "id")
                if event is not None and event.table == "items":
                    assert msg.partition() == partition_for(msg.key(), 8)
                    seen.append((event.op, event.pk))
        consumer.close()
        assert sorted(seen) == sorted([("c", 1), ("c", 2), ("c", 3), ("u", 2), ("d", 3), ("d", 1), ("c", 100)])
    finally:
        remove_capture(conn, endpoints, spec, migration)
        store.delete(migration.id)
        query(conn, "DROP TABLE cap.items")
    assert leftovers(endpoints, "cap", "items") == []
