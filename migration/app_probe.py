"""The application's write latency, sampled while the copy and validation run: init waits for its baseline before
the capture starts, and the copy's workers (here and in joined `worker` processes) yield against it
(throttle/yielding.py, throttle/app_latency.py)."""
from __future__ import annotations

import logging
from typing import Callable

from core.db import connect
from core.logs import log_event
from migration.coordination import Coordination
from throttle.app_latency import LatencyProbe

log = logging.getLogger("stream_osc.runner")

BASELINE_WAIT_S = 5.0   # longest wait for the application latency baseline before capture starts


class AppLatencySampling:
    """One latency probe per coordinator, from the migration's id to the end of validation."""

    def __init__(self, shared: Coordination) -> None:
        self.shared = shared
        self.probe: LatencyProbe | None = None

    def start(self, migration_id: int) -> None:
        """Sample from now on; a resumed migration keeps the baseline taken before its copy."""
        if self.probe is not None:
            return
        shared = self.shared
        known = shared.store.get(migration_id).app_latency_baseline_ms
        if known is not None:
            shared.yielding.set_baseline(known)
        self.probe = LatencyProbe(lambda: connect(shared.endpoints.mysql), shared.spec.metadata_schema, migration_id,
                                  shared.yielding, records_baseline=known is None).start()

    def stop(self) -> None:
        """Only copy and validation yield to the application's latency: nothing samples it after them."""
        if self.probe is not None:
            self.probe.stop()
            self.probe = None
        self.shared.metrics.forget_app_latency()

    def wait_for_baseline(self, stopped: Callable[[], bool]) -> None:
        """Add no load before the application's latency is measured without it; a probe that cannot write for
        BASELINE_WAIT_S does not hold the work back (copy and validation then run at their settings until it can,
        as after any probe failure). Init waits before the capture starts; the copy waits again only if that gave
        up (or on a resume without a recorded baseline)."""
        yielding = self.shared.yielding
        if yielding.needs_baseline() and not yielding.wait_for_baseline(BASELINE_WAIT_S, stopped):
            log_event(log, "no application latency baseline yet; going on without it (it is taken once the probe "
                           "writes)", logging.WARNING, waited_s=BASELINE_WAIT_S)
