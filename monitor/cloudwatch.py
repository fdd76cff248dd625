"""The migration's figures published to CloudWatch (`--cloudwatch-namespace`), for teams that watch Aurora there.

It publishes what the Prometheus exporter serves (monitor/metrics.py), under the same names without
the `stream_osc_` prefix, with the table as the `Table` dimension: every figure that is a number
(stage number, copy rows, rates, lags, throttled, cutover, validation); the text-valued ones
(stage flags, throttle reason, Kafka names) stay in Prometheus and `status`, and a figure not known
yet is absent there and so here. A failed publish is
logged and retried at the next interval: it never stops the migration.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

import botocore.exceptions

from throttle.cloudwatch_load import cloudwatch_client
from core.endpoints import ConfigError
from core.logs import log_event
from monitor.metrics import MigrationMetrics

log = logging.getLogger("stream_osc.cloudwatch")

PUBLISH_EVERY_S = 60.0
PREFIX = "stream_osc_"
BATCH = 20                 # datums per PutMetricData call (the oldest documented limit)
LABELS_PUBLISHED = {"outcome": "Outcome"}   # labels that become dimensions; samples with others are text-valued
UNITS = (("_per_second", "Count/Second"), ("_seconds", "Seconds"), ("_bytes", "Bytes"), ("_ratio", "None"))
SKIPPED_SUFFIXES = ("_created", "_timestamp_seconds")   # when a figure changed: CloudWatch stamps each datum itself


class CloudWatchUnavailable(Exception):
    """CloudWatch cannot be published to as configured (bad namespace, no region)."""

    user_facing = True


def check_namespace(namespace: str) -> str:
    """The namespace if CloudWatch accepts it for custom metrics; else CloudWatchUnavailable."""
    if not namespace or len(namespace) > 255 or namespace.startswith("AWS/") or not namespace.isprintable():
        raise CloudWatchUnavailable(f"--cloudwatch-namespace {namespace!r}: use 1 to 255 printable characters, "
                                    "not starting with AWS/ (reserved for AWS services)")
    return namespace


def unit_of(name: str) -> str:
    for suffix, unit in UNITS:
        if name.endswith(suffix):
            return unit
    return "Count"


def datums(metrics: MigrationMetrics) -> list[dict[str, Any]]:
    """The exporter's numeric samples as CloudWatch metric data (a figure not known has no sample to publish)."""
    found = []
    for family in metrics.registry.collect():
        for sample in family.samples:
            extra = set(sample.labels) - {"table"}
            if extra - set(LABELS_PUBLISHED) or sample.name.endswith(SKIPPED_SUFFIXES):
                continue
            dimensions = [{"Name": "Table", "Value": sample.labels["table"]}]
            dimensions += [{"Name": LABELS_PUBLISHED[k], "Value": sample.labels[k]} for k in sorted(extra)]
            found.append({"MetricName": sample.name.removeprefix(PREFIX), "Dimensions": dimensions,
                          "Value": float(sample.value), "Unit": unit_of(sample.name)})
    return found


class CloudWatchPublisher:
    """Puts the figures of one migration to CloudWatch every `every_s` seconds, and once more at `close`."""

    def __init__(self, metrics: MigrationMetrics, namespace: str, client: Any | None = None,
                 every_s: float = PUBLISH_EVERY_S) -> None:
        self.metrics = metrics
        self.namespace = check_namespace(namespace)
        try:
            self.client = client or cloudwatch_client("--cloudwatch-namespace")
        except ConfigError as exc:
            raise CloudWatchUnavailable(str(exc)) from exc
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cloudwatch", daemon=True)

    def start(self) -> "CloudWatchPublisher":
        self._thread.start()
        return self

    def publish(self) -> bool:
        """Put the current figures; False (logged) if CloudWatch refused or could not be reached."""
        data = datums(self.metrics)
        try:
            for first in range(0, len(data), BATCH):
                self.client.put_metric_data(Namespace=self.namespace, MetricData=data[first:first + BATCH])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            log_event(log, "CloudWatch publish failed", logging.WARNING, namespace=self.namespace, error=str(exc))
            return False
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.publish()

    def close(self) -> None:
        """Stop the periodic publishing and put the final figures."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.publish()
