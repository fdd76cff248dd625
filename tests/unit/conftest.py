"""Fixtures of the unit tests."""
from collections.abc import Callable

import boto3
import pytest
from moto import mock_aws

from core.stages import Stage
from throttle.yielding import BASELINE_SAMPLES, WINDOW, Yielding
from monitor.metrics import MigrationMetrics


def _feed_every_figure(metrics: MigrationMetrics) -> MigrationMetrics:
    """Feed `metrics` one of each kind of figure the exporter serves (returns it); the values are the ones
    the tests read back."""
    metrics.migration(7, "streamosc-orders-7", "streamosc_orders_7.shop.orders", "streamosc_orders_7.appliers")
    metrics.stage(Stage.APPLY)
    metrics.copy(0.5, 2_000, 2, 4)
    metrics.copy_rate.first = (metrics.copy_rate.first[0] - 10, 0.5, 2_000)   # 10 s ago: a rate is known
    metrics.copy(1.0, 4_000, 4, 4)
    metrics.apply(250, 9_000, 1.5)
    metrics.capture(0.042, 0.7)
    metrics.throttle("Threads_running=31 >= 25")
    metrics.cutover_attempt(False, 3_100.0)
    metrics.validation(3)
    metrics.path("copy")
    yielding = Yielding(4, "auto")
    metrics.follow(yielding)
    for i in range(BASELINE_SAMPLES + WINDOW):   # the baseline (samples of 2 ms), then a second of 31 ms, busy
        if i >= BASELINE_SAMPLES:
            yielding.count_others(1)
        yielding.sample(2.0 if i < BASELINE_SAMPLES else 31.0, 0.1 * i)
    return metrics


@pytest.fixture
def feed_every_figure() -> Callable[[MigrationMetrics], MigrationMetrics]:
    """The function feeding a MigrationMetrics one of each kind of figure (see _feed_every_figure)."""
    return _feed_every_figure


@pytest.fixture
def aws(monkeypatch):
    """A CloudWatch client on moto's in-process AWS, with throwaway credentials and region."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "eu-west-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("cloudwatch", region_name="eu-west-1")
