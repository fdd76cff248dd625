"""The throttle a spec asks for: the server's status counters and redo log, and whatever else its options name
(CloudWatch, a move's target server, replicas), as one LoadThrottle the workers of a process share."""
from __future__ import annotations

from collections.abc import Callable

from core.endpoints import Endpoints
from core.spec import MigrationSpec
from throttle.cloudwatch_load import CloudWatchLoad
from throttle.load import LoadThrottle
from throttle.replica_lag import ReplicaLag
from throttle.target_load import TargetLoad


def throttle_for(spec: MigrationSpec, endpoints: Endpoints) -> LoadThrottle:
    """The server's status counters, and what else may hold the work back: CloudWatch, the target server of a
    move (whose critical thresholds are read before a lock too), replicas (whose sessions the throttle closes
    when it is replaced or the run ends)."""
    sources: list[Callable[[], str | None]] = []
    closers: list[Callable[[], None]] = []
    more_critical: list[Callable[[], None]] = []
    if spec.cloudwatch_limits():
        sources.append(CloudWatchLoad(spec.rds_instance, spec.cloudwatch_limits()).reason)
    max_load, critical_load = spec.load_limits()
    if spec.target_server and (max_load or critical_load or spec.max_redo_fill):
        target = TargetLoad(endpoints.target(spec.target_dsn), max_load, critical_load, spec.max_redo_fill)
        sources.append(target.reason)
        closers.append(target.close)
        more_critical.append(target.stop_if_critical)
    if spec.replicas():
        replicas = ReplicaLag(endpoints.mysql, spec.replicas(), spec.max_replica_lag)
        sources.append(replicas.reason)
        closers.append(replicas.close)
    return LoadThrottle(*spec.load_limits(), sources, closers, more_critical, spec.max_redo_fill)
