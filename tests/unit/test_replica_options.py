"""--throttle-replicas and --max-replica-lag: replica addresses parse as HOST[:PORT] (3306 by default), a
malformed one or a lag under a second is one clear error, and a spec without replicas asks no replica."""
from __future__ import annotations

import pytest

from throttle.sources import throttle_for
from core.endpoints import ConfigError, Endpoints
from core.throttle_options import parse_replicas
from core.spec import MigrationSpec


def test_replicas_parse_with_default_port():
    assert parse_replicas("replica-1:3307, 10.0.0.7 ,") == [("replica-1", 3307), ("10.0.0.7", 3306)]


@pytest.mark.parametrize("text", ["replica-1:", "replica-1:port", ":3306", "replica-1:70000"])
def test_a_malformed_replica_is_refused(text):
    with pytest.raises(ConfigError, match="is not HOST or HOST:PORT"):
        parse_replicas(text)


def test_max_replica_lag_must_be_a_second_or_more():
    with pytest.raises(ConfigError, match="--max-replica-lag must be at least 1 second"):
        MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT", throttle_replicas="r1",
                      max_replica_lag=0).validate()


def test_no_replicas_and_no_cloudwatch_limits_mean_no_other_throttle_source():
    spec = MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT").validate()
    endpoints = Endpoints("mysql://osc:secret@db:3306/", "kafka:9092", "http://connect:8083", "redis://redis:6379/0")
    throttle = throttle_for(spec, endpoints)
    assert (throttle.more, throttle.closers) == ([], [])
