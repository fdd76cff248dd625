"""An applier that cannot start (its database refuses the connection, as during a cut link) must not stay in the
applier group: a member that never consumes keeps the partitions the group gives it, and their changes are never
applied while it lives (apply and cutover then wait for a lag that cannot fall)."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer

from applier.apply import apply_worker
from core.db import DatabaseUnreachable
from streams.topics import TopicNames, consumer_config, create_change_topic, delete_topics
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 4


def refused() -> None:
    raise DatabaseUnreachable("cannot connect to MySQL (error 2003)")


def test_applier_that_cannot_reach_the_database_leaves_the_group_its_partitions_to_the_others(endpoints):
    prefix = f"t{uuid.uuid4().hex[:8]}"
    names = TopicNames(prefix, "db", "t")
    create_change_topic(endpoints.kafka, names.changes, PARTITIONS)
    migration = SimpleNamespace(prefix=prefix, group_id=f"{prefix}.appliers", id=1)
    ctx = SimpleNamespace(endpoints=endpoints, migration=migration, spec=SimpleNamespace(database="db", table="t"),
                          db=lambda autocommit=True: refused())
    other = Consumer(consumer_config(endpoints.kafka, **{"group.id": migration.group_id, "enable.auto.commit": False,
                                                         "partition.assignment.strategy": "cooperative-sticky",
                                                         "session.timeout.ms": 10000}))
    try:
        with pytest.raises(DatabaseUnreachable) as failed:   # kept: a failed worker's error is kept by its group
            apply_worker(ctx, 0, member="refused")
        other.subscribe([names.changes])

        def all_partitions_here() -> bool:
            other.poll(0.2)
            return len(other.assignment()) == PARTITIONS
        wait_for(all_partitions_here, 40, f"the other applier to own all {PARTITIONS} partitions")
        assert failed.value is not None
    finally:
        other.close()
        delete_topics(endpoints.kafka, [names.changes])
