"""--cloudwatch-max-load (moto): work holds back while an AWS/RDS metric of the instance is at or above its
limit, goes on below it, reads CloudWatch at most every 30 s, keeps its last answer when a read fails, and
a malformed limit, a missing instance or an instance without datapoints is one clear error up front."""
from __future__ import annotations

import pytest
from botocore.exceptions import EndpointConnectionError

from throttle.cloudwatch_load import READ_EVERY_S, CloudWatchLoad
from core.endpoints import ConfigError
from core.throttle_options import parse_cloudwatch_thresholds
from throttle.load import LoadThrottle
from core.spec import MigrationSpec

INSTANCE = "aurora-writer-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rds_metric(client, metric: str, value: float, instance: str = INSTANCE) -> None:
    """What RDS itself publishes: a datapoint of AWS/RDS with the instance as dimension."""
    client.put_metric_data(Namespace="AWS/RDS", MetricData=[
        {"MetricName": metric, "Dimensions": [{"Name": "DBInstanceIdentifier", "Value": instance}], "Value": value}])


def test_holds_back_at_or_above_a_limit_and_names_it(aws):
    rds_metric(aws, "CPUUtilization", 85.0)
    rds_metric(aws, "AuroraReplicaLagMaximum", 120.0)
    load = CloudWatchLoad(INSTANCE, {"CPUUtilization": 80, "AuroraReplicaLagMaximum": 1000}, client=aws)
    assert load.reason() == f"CloudWatch CPUUtilization=85 >= 80 on {INSTANCE} (--cloudwatch-max-load)"


def test_goes_on_below_every_limit_and_ignores_other_instances(aws):
    rds_metric(aws, "CPUUtilization", 40.0)
    rds_metric(aws, "CPUUtilization", 99.0, instance="another-instance")
    assert CloudWatchLoad(INSTANCE, {"CPUUtilization": 80}, client=aws).reason() is None


def test_reads_at_most_every_30_s(aws):
    clock = Clock()
    rds_metric(aws, "WriteIOPS", 100.0)
    load = CloudWatchLoad(INSTANCE, {"WriteIOPS": 5000}, client=aws, clock=clock)
    assert load.reason() is None
    rds_metric(aws, "WriteIOPS", 9000.0)
    clock.now += READ_EVERY_S - 1
    assert load.reason() is None                 # not read again yet
    clock.now += 1
    assert load.reason().startswith("CloudWatch WriteIOPS=9000 >= 5000")


def test_a_failed_read_keeps_the_last_answer(aws, caplog):
    clock = Clock()
    rds_metric(aws, "CPUUtilization", 90.0)
    load = CloudWatchLoad(INSTANCE, {"CPUUtilization": 80}, client=aws, clock=clock)
    held = load.reason()
    assert held is not None
    aws.meta.events.register("before-send.cloudwatch.GetMetricStatistics", _unreachable)
    clock.now += READ_EVERY_S
    with caplog.at_level("WARNING", logger="stream_osc.cloudwatch_load"):
        assert load.reason() == held
    assert "CloudWatch read failed" in caplog.text


def _unreachable(**kwargs):
    raise EndpointConnectionError(endpoint_url="https://monitoring.eu-west-1.amazonaws.com/")


class NoServer:
    """A database connection that must not be used: no --max-load counters are configured."""


def test_load_throttle_asks_cloudwatch_when_the_server_counters_allow_work(aws):
    rds_metric(aws, "CPUUtilization", 95.0)
    throttle = LoadThrottle({}, {}, [CloudWatchLoad(INSTANCE, {"CPUUtilization": 80}, client=aws).reason])
    assert throttle.reason(NoServer()).startswith("CloudWatch CPUUtilization=95 >= 80")
    assert LoadThrottle({}, {}).reason(NoServer()) is None


def test_an_instance_without_datapoints_is_refused_up_front(aws):
    rds_metric(aws, "CPUUtilization", 10.0, instance="the-real-writer")
    with pytest.raises(ConfigError, match="no CPUUtilization datapoints for DB instance 'typo-writer'"):
        CloudWatchLoad("typo-writer", {"CPUUtilization": 80}, client=aws).check()
    CloudWatchLoad("the-real-writer", {"CPUUtilization": 80, "AuroraReplicaLagMaximum": 1000}, client=aws).check()


@pytest.mark.parametrize("text, message", [
    ("CPUUtilization>80", "'CPUUtilization>80' is not METRIC=NUMBER"),
    ("CPUUtilization=high", "is not METRIC=NUMBER"),
])
def test_a_malformed_limit_is_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_cloudwatch_thresholds(text)


def test_limits_need_an_instance_and_parse_with_decimals():
    with pytest.raises(ConfigError, match="--cloudwatch-max-load needs --rds-instance"):
        MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT",
                      cloudwatch_max_load="CPUUtilization=80").validate()
    spec = MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT", rds_instance=INSTANCE,
                         cloudwatch_max_load="CPUUtilization=80.5, WriteIOPS=5000").validate()
    assert spec.cloudwatch_limits() == {"CPUUtilization": 80.5, "WriteIOPS": 5000.0}
