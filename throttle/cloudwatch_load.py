"""Throttling on an RDS/Aurora instance's CloudWatch metrics (`--cloudwatch-max-load`, as SB-OSC does): copy,
apply and validation hold back while CPUUtilization, WriteIOPS, AuroraReplicaLagMaximum or any other
AWS/RDS metric of the instance is at or above its limit.

CloudWatch has the figures the server's own status lacks on Aurora (replica lag across the cluster,
storage IOPS), but only once a minute and some seconds late: the latest datapoint of the last five
minutes is read at most every 30 seconds. A read that fails keeps the last answer (logged), so an
unreachable CloudWatch neither stops the migration nor lets it run unthrottled on stale news.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import botocore.exceptions

from core.endpoints import ConfigError
from core.throttle_options import CLOUDWATCH_OPTION as OPTION
from core.logs import log_event

log = logging.getLogger("stream_osc.cloudwatch_load")

NAMESPACE = "AWS/RDS"
DIMENSION = "DBInstanceIdentifier"
READ_EVERY_S = 30.0
LOOK_BACK = dt.timedelta(minutes=5)
PERIOD_S = 60


def cloudwatch_client(option: str = OPTION) -> Any:
    """A CloudWatch client from the environment's credentials and region; ConfigError naming `option` (the one
    that needs CloudWatch) without a region. boto3 is imported here, not with the module: it costs every
    command a seventh of a second to start, and only CloudWatch users need it."""
    import boto3

    try:
        return boto3.client("cloudwatch")
    except botocore.exceptions.NoRegionError as exc:
        raise ConfigError(f"{option} needs an AWS region: set AWS_REGION or a profile's region") from exc


class CloudWatchLoad:
    """Why the instance's CloudWatch metrics say to hold back (None: go ahead); shared by a process's workers."""

    def __init__(self, instance: str, thresholds: dict[str, float], client: Any | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.instance = instance
        self.thresholds = thresholds
        self.client = client or cloudwatch_client()
        self.clock = clock
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._reason: str | None = None

    def check(self) -> None:
        """Before the migration starts: credentials, permission and instance name work (one clear error if not)."""
        try:
            found = {metric: self.latest(metric) for metric in self.thresholds}
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise ConfigError(f"{OPTION}: cannot read CloudWatch metrics of {self.instance}: {exc}") from exc
        if all(value is None for value in found.values()):
            raise ConfigError(f"{OPTION}: CloudWatch has no {', '.join(found)} datapoints for DB instance "
                              f"{self.instance!r} in the last {LOOK_BACK.seconds // 60} minutes; check --rds-instance")
        missing = [metric for metric, value in found.items() if value is None]
        if missing:
            log_event(log, "no recent CloudWatch datapoints; these limits hold back nothing until there are",
                      logging.WARNING, instance=self.instance, metrics=",".join(missing))

    def reason(self) -> str | None:
        with self._lock:
            if self._read_at is None or self.clock() - self._read_at >= READ_EVERY_S:
                self._read_at = self.clock()
                try:
                    self._reason = self._over()
                except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                    log_event(log, "CloudWatch read failed; keeping the last answer", logging.WARNING,
                              instance=self.instance, error=str(exc), throttled=self._reason is not None)
            return self._reason

    def _over(self) -> str | None:
        for metric, limit in self.thresholds.items():
            value = self.latest(metric)
            if value is not None and value >= limit:
                return f"CloudWatch {metric}={value:g} >= {limit:g} on {self.instance} ({OPTION})"
        return None

    def latest(self, metric: str) -> float | None:
        """The metric's most recent one-minute maximum within the last five minutes, or None if it has none."""
        now = dt.datetime.now(dt.UTC)
        points = self.client.get_metric_statistics(
            Namespace=NAMESPACE, MetricName=metric, Dimensions=[{"Name": DIMENSION, "Value": self.instance}],
            StartTime=now - LOOK_BACK, EndTime=now + dt.timedelta(seconds=PERIOD_S), Period=PERIOD_S,
            Statistics=["Maximum"])["Datapoints"]
        if not points:
            return None
        return float(max(points, key=lambda p: p["Timestamp"])["Maximum"])
