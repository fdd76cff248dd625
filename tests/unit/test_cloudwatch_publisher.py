"""CloudWatch publishing (moto): the exporter's numeric figures arrive under the namespace with the table as
dimension and the right units, the final figures are put at close, a refused publish never raises, and a
namespace or region CloudWatch cannot take is one clear error before anything runs."""
from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from core.stages import Stage
from monitor.cloudwatch import CloudWatchPublisher, CloudWatchUnavailable, datums
from monitor.metrics import MigrationMetrics

TABLE = "shop.orders"
NAMESPACE = "StreamOsc/Test"


@pytest.fixture
def fed_metrics(feed_every_figure) -> MigrationMetrics:
    return feed_every_figure(MigrationMetrics(TABLE))


def latest(client, name: str, **dimensions: str) -> float:
    """The one value put for `name` with the Table dimension (and `dimensions`)."""
    dims = [{"Name": "Table", "Value": TABLE}] + [{"Name": k, "Value": v} for k, v in dimensions.items()]
    now, margin = dt.datetime.now(dt.UTC), dt.timedelta(minutes=5)
    points = client.get_metric_statistics(Namespace=NAMESPACE, MetricName=name, Dimensions=dims,
                                          StartTime=now - margin, EndTime=now + margin, Period=60,
                                          Statistics=["Maximum"])["Datapoints"]
    assert len(points) == 1, (name, points)
    return points[0]["Maximum"]


def test_published_figures_are_the_exporters_with_table_dimension(aws, fed_metrics):
    assert CloudWatchPublisher(fed_metrics, NAMESPACE, client=aws).publish()
    assert latest(aws, "stage_number") == list(Stage).index(Stage.APPLY)
    assert latest(aws, "copy_rows_total") == 4_000
    assert latest(aws, "apply_lag_events") == 250
    assert latest(aws, "apply_lag_seconds") == 1.5
    assert latest(aws, "throttled") == 1
    assert latest(aws, "cutover_attempts_total", Outcome="rolled_back") == 1
    assert latest(aws, "cutover_blocked_seconds") == 3.1
    assert latest(aws, "validation_differences") == 3
    listed = aws.list_metrics(Namespace=NAMESPACE)["Metrics"]
    assert listed and all({"Name": "Table", "Value": TABLE} in m["Dimensions"] for m in listed)
    names = {m["MetricName"] for m in listed}
    assert not names & {"stage", "migration_info", "throttle_reason_info", "last_update_timestamp_seconds"}


def test_units_follow_the_metric_names(fed_metrics):
    units = {d["MetricName"]: d["Unit"] for d in datums(fed_metrics)}
    assert units["apply_lag_seconds"] == "Seconds"
    assert units["cutover_blocked_seconds"] == "Seconds"
    assert units["app_write_latency_seconds"] == "Seconds"
    assert units["copy_rows_total"] == "Count"
    assert units["copy_rows_per_second"] == "Count/Second"
    assert units["copy_progress_ratio"] == "None"
    assert units["apply_lag_events"] == "Count"


def test_unknown_figures_are_left_out():
    metrics = MigrationMetrics(TABLE)
    metrics.apply(5, 0, None)           # seconds unknown: absent in Prometheus too
    assert "apply_lag_seconds" not in {d["MetricName"] for d in datums(metrics)}


def test_close_puts_the_final_figures(aws, fed_metrics):
    metrics = fed_metrics
    publisher = CloudWatchPublisher(metrics, NAMESPACE, client=aws, every_s=3600).start()
    metrics.stage(Stage.DONE)
    publisher.close()
    assert latest(aws, "stage_number") == list(Stage).index(Stage.DONE)


def test_a_refused_publish_is_logged_not_raised(aws, caplog, fed_metrics):
    publisher = CloudWatchPublisher(fed_metrics, NAMESPACE, client=boto3.client("cloudwatch",
                                                                                  region_name="eu-west-1"))
    publisher.client.meta.events.register("before-send.cloudwatch.PutMetricData", _refuse)
    with caplog.at_level("WARNING", logger="stream_osc.cloudwatch"):
        assert publisher.publish() is False
    assert "CloudWatch publish failed" in caplog.text


def _refuse(**kwargs):
    raise EndpointConnectionError(endpoint_url="https://monitoring.eu-west-1.amazonaws.com/")


@pytest.mark.parametrize("namespace", ["", "AWS/RDS", "x" * 256])
def test_a_namespace_cloudwatch_refuses_is_one_clear_error(aws, namespace):
    with pytest.raises(CloudWatchUnavailable, match="--cloudwatch-namespace"):
        CloudWatchPublisher(MigrationMetrics(TABLE), namespace, client=aws)


def test_no_region_is_one_clear_error(monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(CloudWatchUnavailable, match="needs an AWS region"):
        CloudWatchPublisher(MigrationMetrics(TABLE), NAMESPACE)
