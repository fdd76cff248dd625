"""Change capture: every kind of row change arrives in the partitioned topic, keyed by PK."""
from collections.abc import Callable
from datetime import date, datetime

import pytest
from confluent_kafka import Consumer, TopicPartition

from core.db import ServerInfo, qualified, query, quote_ident
from core.keys import primary_key
from migration.init_stage import start_capture, topic_prefix
from migration.teardown import remove_capture
from core.spec import MigrationSpec
from core.state import StateStore
from streams.events import decode_event, decode_key
from streams.fence import fence_ids_for
from streams.murmur2 import partition_for
from streams.topics import TopicNames, partition_count
from tests.integration.helpers import db_conn, leftovers, wait_for
from tests.integration.test_any_primary_key import SHAPES

pytestmark = pytest.mark.integration


def test_insert_update_delete_and_pk_change_reach_the_topic(endpoints):
    conn = db_conn(endpoints)
    query(conn, "CREATE DATABASE IF NOT EXISTS cap")
    query(conn, "DROP TABLE IF EXISTS cap.items")
    query(conn, "CREATE TABLE cap.items (id INT PRIMARY KEY, v VARCHAR(20))")
    spec = MigrationSpec(database="cap", table="items", alter="ADD COLUMN x INT", partitions=8).validate()
    store = StateStore(conn, spec.metadata_schema)
    store.ensure_schema()
    migration = store.create("cap", "items", spec.alter, topic_prefix(spec), ("id",), {})
    store.create_fence_table(migration.id, fence_ids_for(spec.partitions))
    try:
        start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)
        query(conn, "INSERT INTO cap.items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        query(conn, "UPDATE cap.items SET v = 'bb' WHERE id = 2")
        query(conn, "DELETE FROM cap.items WHERE id = 3")
        query(conn, "UPDATE cap.items SET id = 100 WHERE id = 1")

        names = TopicNames(migration.prefix, "cap", "items")
        assert partition_count(endpoints.kafka, names.changes) == 8
        consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": "cap-test",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(names.changes, p, 0) for p in range(8)])
        seen = []
        deadline_msgs = 0
        while len(seen) < 7 and deadline_msgs < 300:
            deadline_msgs += 1
            for msg in consumer.consume(100, timeout=0.2):
                event = decode_event(msg.key(), msg.value(), primary_key(conn, "cap", "items"))
                if event is not None and event.table == "items":
                    assert msg.partition() == partition_for(msg.key(), 8)
                    seen.append((event.op, event.pk))
        consumer.close()
        assert sorted(seen) == sorted([("c", (1,)), ("c", (2,)), ("c", (3,)), ("u", (2,)), ("d", (3,)), ("d", (1,)),
                                       ("c", (100,))])
    finally:
        remove_capture(conn, endpoints, spec, migration)
        store.delete(migration.id)
        query(conn, "DROP TABLE cap.items")
    assert leftovers(endpoints, "cap", "items") == []


# What Debezium sends, by key column, for a zero date (a zero year, month or day) in each zero-date shape: a value
# with no Java date becomes the column's DEFAULT, else the epoch (applier/zero_dates.py widens such keys)
ZERO_DATES_SENT_AS = {"zero_dates": {"d": date(1970, 1, 1)}, "zero_dates_default": {"d": date(2000, 1, 1)},
                      "zero_datetimes": {"at": datetime(1970, 1, 1), "ts": datetime(1970, 1, 1)}}


@pytest.mark.parametrize("kind", [kind for kind in SHAPES if kind not in ZERO_DATES_SENT_AS])
def test_a_change_key_decodes_to_exactly_the_key_the_application_wrote(endpoints, kind):
    """Debezium's encoding of every key type (BINARY padding the binlog drops, dates as days, DATETIME
    in ms or µs, TIMESTAMP in UTC, DECIMAL as text) is turned back into the values written, byte for byte."""
    assert_change_keys(endpoints, kind, lambda key: key)


@pytest.mark.parametrize("kind", list(ZERO_DATES_SENT_AS))
def test_a_zero_date_in_a_key_arrives_as_the_columns_default_or_the_epoch(endpoints, kind):
    """The stand-ins applier/zero_dates.py widens: every other value still arrives as written."""
    sent_as = ZERO_DATES_SENT_AS[kind]
    columns = SHAPES[kind].key_columns
    assert_change_keys(endpoints, kind, lambda key: tuple(
        sent_as[column] if isinstance(value, str) else value for column, value in zip(columns, key)))


def assert_change_keys(endpoints, kind: str, arrives_as: Callable[[tuple], tuple]) -> None:
    """Capture the inserts of a shape's keys and compare the keys decoded from their events with arrives_as(key)
    of each key written; the server must find a row by each."""
    shape, table = SHAPES[kind], f"keys_{kind}"
    conn = db_conn(endpoints)
    query(conn, "CREATE DATABASE IF NOT EXISTS cap")
    query(conn, f"DROP TABLE IF EXISTS cap.{table}")
    columns = ", ".join(quote_ident(c) for c in shape.key_columns)
    query(conn, f"CREATE TABLE cap.{table} ({shape.key_ddl}, v INT, PRIMARY KEY ({columns})) DEFAULT CHARSET=utf8mb4")
    spec = MigrationSpec(database="cap", table=table, alter="ADD COLUMN x INT", partitions=2).validate()
    store = StateStore(conn, spec.metadata_schema)
    store.ensure_schema()
    migration = store.create("cap", table, spec.alter, topic_prefix(spec), shape.key_columns, {})
    store.create_fence_table(migration.id, fence_ids_for(spec.partitions))
    written = [shape.make_key(w, n) for w in range(2) for n in range(12)]
    try:
        start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)
        marks = ", ".join(["%s"] * (len(shape.key_columns) + 1))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {qualified('cap', table)} VALUES ({marks})", [(*k, 1) for k in written])
        pk = primary_key(conn, "cap", table)
        consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": "cap-keys",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TopicNames(migration.prefix, "cap", table).changes, p, 0) for p in range(2)])
        seen: list = []

        def all_seen() -> bool:
            for msg in consumer.consume(100, timeout=0.2):
                change = decode_key(msg.key(), pk)
                if change is not None and not change.is_fence:
                    seen.append(change.pk)
            return len(seen) >= len(written)

        try:
            wait_for(all_seen, timeout=60, what="the inserts' change events")
        finally:
            consumer.close()
        assert sorted(map(repr, seen)) == sorted(repr(arrives_as(key)) for key in written)
        for key in seen:   # and the server finds each row by it (a stand-in's, among those it may stand for)
            where, params = (pk.zero_date_family([key]) if pk.zero_date_positions(key) else (pk.equals(), key))
            assert query(conn, f"SELECT COUNT(*) > 0 FROM {qualified('cap', table)} WHERE {where}", params) == [(1,)]
    finally:
        remove_capture(conn, endpoints, spec, migration)
        store.delete(migration.id)
        query(conn, f"DROP TABLE cap.{table}")
