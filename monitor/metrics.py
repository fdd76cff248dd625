"""The figures of one running migration, as Prometheus metrics (`--metrics-port`) and as log lines at intervals.

The coordinator feeds them from what it already reads for its progress display (chunk progress,
the applier group's lag, the throttle note, stage changes and cutover results) and from the latency its
probe judges each second (throttle/yielding.py); nothing here reads a service or changes the migration.
Every metric carries the migration's table as a label, so one Prometheus job can scrape the coordinators
of several migrations. Names follow Prometheus' conventions (docs/observability.md lists every series).
"""
from __future__ import annotations

import logging
import time
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, start_http_server

from throttle.load import throttle_cause
from core.logs import log_event
from core.stages import Stage
from throttle.yielding import Yielding
from monitor.progress import CopyRate

log = logging.getLogger("stream_osc.metrics")

STAGES = list(Stage)                 # stream_osc_stage_number is the index in this list
DEFAULT_ADDRESS = "127.0.0.1"         # the endpoint has no authentication: local unless asked otherwise
LOG_EVERY_S = 10.0                   # copy progress is logged (INFO) at most this often; lag at this interval

disable_created_metrics()   # no `<counter>_created` series: a process-start timestamp per counter tells nothing here


class MetricsUnavailable(Exception):
    """The metrics endpoint could not be opened (port taken, address not on this host)."""

    user_facing = True


class MigrationMetrics:
    """Gauges and counters of one migration, in a registry of their own (no process metrics mixed in).

    Names follow Prometheus' conventions: base units (seconds), counters ending in `_total`, no `_created`
    series, and a figure not known is absent (no sample) rather than a sentinel value."""

    def __init__(self, table: str, log_every_s: float = LOG_EVERY_S) -> None:
        self.table = table
        self.registry = CollectorRegistry()
        self.copy_rate = CopyRate()
        self.log_every_s = log_every_s
        self._logged_at: dict[str, float] = {}
        self._throttle_reason: str | None = None
        self.lag_figures: dict[str, float | int | None] = {   # as logged by log_lag (None: not known)
            "apply_lag_events": None, "apply_lag_s": None, "applied_events": None,
            "capture_lag_s": None, "heartbeat_age_s": None}
        self._server: WSGIServer | None = None
        self.backlog_read_at = float("-inf")   # time.monotonic() of the last apply backlog fed
        self.copy_estimate: tuple[float | None, float | None] = (None, None)   # (rows/s, ETA s) while copying
        self._counted: dict[Counter, float] = {}   # the last total fed to each counter (it grows by what it gained)
        self._migration_metrics()
        self._copy_metrics()
        self._lag_metrics()
        self._yield_metrics()
        for outcome in ("swapped", "rolled_back"):
            self.cutover_attempts.labels(table, outcome)
        self.throttled.labels(table).set(0)

    def _gauge(self, name: str, text: str, *labels: str) -> Gauge:
        return Gauge(name, text, ["table", *labels], registry=self.registry)

    def _counter(self, name: str, text: str, *labels: str) -> Counter:
        return Counter(name, text, ["table", *labels], registry=self.registry)

    def _migration_metrics(self) -> None:
        """The migration's names, stage, throttle, cutover and validation."""
        gauge = self._gauge
        self.info = gauge("stream_osc_migration_info", "Names of the migration's Kafka objects (value 1)",
                          "migration_id", "connector", "topic", "group")
        self.stage_flag = gauge("stream_osc_stage", "1 for the migration's current stage, 0 for the others", "stage")
        self.stage_number = gauge("stream_osc_stage_number",
                                  "Current stage as a number: " + ", ".join(f"{i} {s}" for i, s in enumerate(STAGES)))
        self.throttled = gauge("stream_osc_throttled",
                               "1 while the work holds back: copy, apply and validation for --max-load, "
                               "--cloudwatch-max-load or --throttle-replicas; copy and validation yielding "
                               "for --max-app-latency")
        self.throttle_reason = gauge("stream_osc_throttle_reason_info",
                                     "Why the work holds back (value 1, present only while throttled)", "reason")
        self.cutover_attempts = self._counter("stream_osc_cutover_attempts_total",
                                              "Cutover attempts made by this process", "outcome")
        self.cutover_blocked = gauge("stream_osc_cutover_blocked_seconds",
                                     "How long application writes waited in the last cutover attempt")
        self.validation_diffs = gauge("stream_osc_validation_differences",
                                      "Rows validation found different and re-copied")
        self.updated = gauge("stream_osc_last_update_timestamp_seconds", "When any figure last changed (Unix time)")
        self.path_info = gauge("stream_osc_path_info", "The path the migration takes (value 1): instant (the "
                               "server's ALGORITHM=INSTANT was the change) or copy", "path")

    def _copy_metrics(self) -> None:
        gauge = self._gauge
        self.rows_copied = self._counter("stream_osc_copy_rows_total",
                                         "Rows copied by the bulk copy (a chunk copied again counts again)")
        self.rows_estimated = gauge("stream_osc_copy_rows_estimated",
                                    "Rows the bulk copy will have copied at its end (estimate from progress so far; "
                                    "absent until something is copied)")
        self.copy_ratio = gauge("stream_osc_copy_progress_ratio", "Share of the bulk copy done, 0 to 1")
        self.copy_rows_per_s = gauge("stream_osc_copy_rows_per_second",
                                     "Bulk-copy rate since this process started (absent before a 2nd sample)")
        self.copy_eta = gauge("stream_osc_copy_eta_seconds",
                              "Estimated seconds until the bulk copy ends (absent while not known)")
        self.chunks_done = gauge("stream_osc_copy_chunks_done", "Copy chunks finished")
        self.chunks = gauge("stream_osc_copy_chunks", "Copy chunks planned")

    def _lag_metrics(self) -> None:
        gauge = self._gauge
        self.lag_events = gauge("stream_osc_apply_lag_events",
                                "Change events in the topic not yet applied (the applier group's consumer lag)")
        self.lag_seconds = gauge("stream_osc_apply_lag_seconds",
                                 "Estimated seconds to apply the pending events at the current apply rate "
                                 "(absent while not known)")
        self.capture_lag = gauge("stream_osc_capture_lag_seconds",
                                 "How far change capture (binlog to Kafka) is behind: age of the oldest capture "
                                 "heartbeat not yet in the change topic, else the last one's delay (absent while "
                                 "not known)")
        self.heartbeat_age = gauge("stream_osc_capture_heartbeat_age_seconds",
                                   "Seconds since the Debezium connector last sent a heartbeat record (absent while "
                                   "not known)")
        self.applied = self._counter("stream_osc_applied_events_total",
                                     "Change events applied by every applier of the migration")
        self.keys_waiting = gauge("stream_osc_apply_keys_waiting_on_row_locks",
                                  "Keys whose re-read has waited a second or more for a row lock another session "
                                  "holds (a hot row: the tool gives way, then waits for that key alone)")
        self.longest_wait = gauge("stream_osc_apply_row_lock_wait_seconds",
                                  "The longest of those waits so far (0: none waiting a second or more)")

    def _yield_metrics(self) -> None:
        """What copy and validation yield to (--max-app-latency), each absent while not judged."""
        gauge = self._gauge
        self.app_latency = gauge("stream_osc_app_write_latency_seconds",
                                 "Write latency the application felt in the last second judged, as copy and "
                                 "validation judge it: the worst-but-one of the probe's one-row writes (absent "
                                 "before the first second, and once copy and validation are over)")
        self.app_latency_target = gauge("stream_osc_app_write_latency_target_seconds",
                                        "--max-app-latency as it stands: a duration, or with auto twice the "
                                        "baseline and at least 2 ms (absent: off, auto before its baseline, or over)")
        self.app_latency_baseline = gauge("stream_osc_app_write_latency_baseline_seconds",
                                          "The application's write latency measured before the work (absent: not "
                                          "measured)")
        self.app_statements = gauge("stream_osc_app_statements_in_flight",
                                    "Statements other sessions ran at a time in the last second judged, on average "
                                    "(with auto, below 0.25 no application is busy and the work does not yield; "
                                    "absent when not known: not auto, not judged yet, or a count missing or too "
                                    "few)")
        self.statements_allowed = gauge("stream_osc_copy_statements_allowed",
                                        "Copy and validation statements the coordinator may run at once now "
                                        "(--copy-workers while not yielding; absent: not judged)")
        self.batch_time_ratio = gauge("stream_osc_copy_batch_time_ratio",
                                      "Share of --target-batch-time each copy statement is sized for now (1 while "
                                      "not yielding; absent: not judged)")

    # serving -------------------------------------------------------------------------------------
    def serve(self, port: int, address: str = DEFAULT_ADDRESS) -> None:
        """Serve /metrics on address:port from a daemon thread until `close`."""
        try:
            self._server, _ = start_http_server(port, address, registry=self.registry)
        except OSError as exc:
            raise MetricsUnavailable(f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}") from exc
        log_event(log, "serving metrics", address=address, port=self._server.server_port)

    @property
    def port(self) -> int | None:
        """The port /metrics is served on (None when not serving)."""
        return self._server.server_port if self._server else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # figures -------------------------------------------------------------------------------------
    def migration(self, migration_id: int, connector: str, topic: str, group: str) -> None:
        self.info.labels(self.table, str(migration_id), connector, topic, group).set(1)
        self._touch()

    def stage(self, stage: Stage) -> None:
        for each in STAGES:
            self.stage_flag.labels(self.table, each.value).set(1 if each == stage else 0)
        self.stage_number.labels(self.table).set(STAGES.index(stage))
        if stage != Stage.COPY:
            self.copy_estimate = (None, None)
        self._touch()

    def copy(self, fraction: float, rows: int, chunks_done: int, chunks: int) -> None:
        rate, eta = self.copy_rate.sample(fraction, rows)
        self.copy_estimate = (rate, eta)
        self._count(self.rows_copied, rows)
        self._put(self.rows_estimated, round(rows / fraction) if fraction > 0 else None)
        self.copy_ratio.labels(self.table).set(fraction)
        self._put(self.copy_rows_per_s, rate)
        self._put(self.copy_eta, eta)
        self.chunks_done.labels(self.table).set(chunks_done)
        self.chunks.labels(self.table).set(chunks)
        self._touch()
        if self._due("copy"):
            log_event(log, "copy progress", rows=rows, progress=round(fraction, 4),
                      rows_per_s=round(rate) if rate is not None else None,
                      eta_s=round(eta) if eta is not None else None, chunks_done=chunks_done, chunks=chunks)

    def apply(self, lag_events: int, applied_events: int, lag_seconds: float | None) -> None:
        self.apply_backlog(lag_events)
        self._put(self.lag_seconds, lag_seconds)
        self._count(self.applied, applied_events)
        self.lag_figures.update(apply_lag_s=None if lag_seconds is None else round(lag_seconds, 1),
                                applied_events=applied_events)

    def apply_waits(self, waits: list[tuple[str, float]]) -> None:
        """The keys whose re-read waits for another session's row lock, (key, seconds) longest first."""
        self.keys_waiting.labels(self.table).set(len(waits))
        self.longest_wait.labels(self.table).set(waits[0][1] if waits else 0)

    def apply_backlog(self, lag_events: int) -> None:
        """The applier group's lag alone (read while the appliers do not run, e.g. during the copy)."""
        self.lag_events.labels(self.table).set(lag_events)
        self.lag_figures["apply_lag_events"] = lag_events
        self.backlog_read_at = time.monotonic()
        self._touch()

    def backlog_age(self) -> float:
        """Seconds since the apply backlog was last fed (by `apply` or `apply_backlog`); infinite before."""
        return time.monotonic() - self.backlog_read_at

    def capture(self, lag_seconds: float | None, heartbeat_age_seconds: float | None) -> None:
        """Capture lag and the connector's heartbeat age (None: not known now)."""
        self._put(self.capture_lag, lag_seconds)
        self._put(self.heartbeat_age, heartbeat_age_seconds)
        self.lag_figures.update(
            capture_lag_s=None if lag_seconds is None else round(lag_seconds, 3),
            heartbeat_age_s=None if heartbeat_age_seconds is None else round(heartbeat_age_seconds, 3))
        self._touch()

    def log_lag(self) -> None:
        """One `lag` line with every lag figure as last known (the coordinator calls it at a regular interval)."""
        log_event(log, "lag", **self.lag_figures)

    def throttle(self, reason: str | None) -> None:
        """`reason` while throttled (e.g. `Threads_running=31 >= 25`), None when not."""
        if self._throttle_reason is not None and self._throttle_reason != reason:
            self.throttle_reason.remove(self.table, self._throttle_reason)
        if reason is not None:
            self.throttle_reason.labels(self.table, reason).set(1)
        if throttle_cause(reason) != throttle_cause(self._throttle_reason):
            if self._throttle_reason is not None:
                log_event(log, "throttle released", reason=self._throttle_reason)
            if reason is not None:
                log_event(log, "throttled", reason=reason)
        self._throttle_reason = reason
        self.throttled.labels(self.table).set(1 if reason else 0)
        self._touch()

    def follow(self, yielding: Yielding) -> None:
        """Show what copy and validation yield to (throttle/yielding.py), each second it is judged."""
        yielding.on_judged = self._judged

    def forget_app_latency(self) -> None:
        """Copy and validation are over (or not begun): nothing is judged, and nothing stale is shown."""
        for gauge in (self.app_latency, self.app_latency_target, self.app_latency_baseline, self.app_statements,
                      self.statements_allowed, self.batch_time_ratio):
            self._put(gauge, None)

    def _judged(self, yielding: Yielding) -> None:
        """The last second's latency and the application's statements in flight, the target and the baseline
        (absent: not known), and the statements and batch time they leave. Called by the probe's thread: a display
        only, so a failure here is logged, never raised into the probe, whose samples pace copy and validation."""
        try:
            for gauge, ms in ((self.app_latency, yielding.last_window_ms),
                              (self.app_latency_target, yielding.target_ms),
                              (self.app_latency_baseline, yielding.baseline_ms)):
                self._put(gauge, None if ms is None else ms / 1000)
            self._put(self.app_statements, yielding.last_window_activity)
            self.statements_allowed.labels(self.table).set(yielding.allowed)
            self.batch_time_ratio.labels(self.table).set(yielding.time_scale)
        except Exception as exc:   # see the docstring
            log_event(log, "application latency metrics not updated", logging.WARNING, reason=str(exc))

    def cutover_attempt(self, swapped: bool, blocked_ms: float) -> None:
        self.cutover_attempts.labels(self.table, "swapped" if swapped else "rolled_back").inc()
        self.cutover_blocked.labels(self.table).set(blocked_ms / 1000)
        self._touch()
        log_event(log, "cutover attempt", swapped=swapped, blocked_ms=round(blocked_ms))

    def path(self, path: str) -> None:
        """The path init chose: "instant" or "copy" (migration/instant_stage.py)."""
        self.path_info.clear()
        self.path_info.labels(self.table, path).set(1)
        self._touch()

    def validation(self, differences: int) -> None:
        self.validation_diffs.labels(self.table).set(differences)
        self._touch()

    def _put(self, gauge: Gauge, figure: float | None) -> None:
        """Serve `figure`, or no sample at all when it is not known (None): never a sentinel, never a stale value."""
        if figure is None:
            gauge.remove(self.table)
        else:
            gauge.labels(self.table).set(figure)

    def _count(self, counter: Counter, total: float) -> None:
        """Feed a counter the running total read from the shared state: it grows by what the total gained since
        the last figure fed (a total read lower, e.g. a chunk being copied again, adds nothing: a counter never
        goes down, and the rows copied again count again as they are copied)."""
        gained = total - self._counted.get(counter, 0)
        if gained > 0:
            counter.labels(self.table).inc(gained)
        else:
            counter.labels(self.table)   # served from the first figure on, 0 included
        self._counted[counter] = total

    def _touch(self) -> None:
        self.updated.labels(self.table).set(time.time())

    def _due(self, what: str) -> bool:
        """True at most once per log_every_s for `what`."""
        now = time.monotonic()
        if now - self._logged_at.get(what, float("-inf")) < self.log_every_s:
            return False
        self._logged_at[what] = now
        return True
