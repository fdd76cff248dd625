"""Watch a stream-osc run from outside: stage timeline, copy and apply counters, lag, commit-to-applied latency."""
from __future__ import annotations

import bisect
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql
import redis
from confluent_kafka import KafkaException

from applier.apply import ApplyStats
from bench.table import BenchTable
from core.db import connect, qualified, query
from core.endpoints import Endpoints
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from core.state_records import Migration
from streams.topics import TopicNames, group_lag

STEADY_LAG = 1_000          # the runner's default --max-lag: below it the backlog is drained
PROBE_INTERVAL_S = 0.05
POLL_INTERVAL_S = 0.02


@dataclass
class Sample:
    """One look at the migration: seconds since start, stage, rows copied, events applied, lag."""

    t: float
    stage: str
    copied: int
    applied: int
    lag: int | None


PROBE_PREFIX = "probe-"


class ProbeBook:
    """Probes sent to each probe row and not seen in the new table yet, oldest first.

    Apply writes a row as it is when applied: once a later probe's value shows in the new table, this probe's
    write, and every earlier one's of that row, is in it. Counting only probes whose own value showed would
    drop every probe overwritten before it was applied, so only fast ones would be counted."""

    def __init__(self, ids: list[int]) -> None:
        self.at: dict[int, float] = {}
        self.waiting: dict[int, list[int]] = {pk: [] for pk in ids}

    def sent(self, n: int, pk: int, at: float) -> None:
        self.at[n] = at
        self.waiting[pk].append(n)

    def shown(self, pk: int, value: str, now: float) -> list[tuple[float, float]]:
        """(sent at, ms to applied) of the probes of row `pk` the new table's `value` shows applied."""
        shown = int(value[len(PROBE_PREFIX):]) if value.startswith(PROBE_PREFIX) else 0
        applied = []
        while self.waiting[pk] and self.waiting[pk][0] <= shown:
            n = self.waiting[pk].pop(0)
            applied.append((self.at[n], (now - self.at[n]) * 1000))
        return applied

    def unseen(self) -> int:
        return sum(len(left) for left in self.waiting.values())


@dataclass
class Observer:
    """Samples the migration every `interval` s and, once the appliers keep up, probes apply latency.

    The probe updates rows below sysbench's id range and polls `_<table>_new` until each written
    token, or a later one of the same row, appears: the time between the write's commit and that moment is
    commit-to-applied latency.
    """

    endpoints: Endpoints
    table: BenchTable
    after_id: int                           # migrations with a larger id belong to this run
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    probes: list[tuple[float, float]] = field(default_factory=list)   # (s since start when sent, ms to applied)
    unseen_probes: int = 0

    def start(self) -> "Observer":
        self.started = time.monotonic()
        self.stop_event = threading.Event()
        self.steady = threading.Event()
        self.migration: Migration | None = None
        self.threads = [threading.Thread(target=self._sample_loop, daemon=True, name="bench-sampler"),
                        threading.Thread(target=self._probe_loop, daemon=True, name="bench-probe")]
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=30)

    # sampling ------------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        conn = connect(self.endpoints.mysql)
        client = redis.Redis.from_url(self.endpoints.redis_url)
        store = StateStore(conn, "stream_osc")
        try:
            while not self.stop_event.wait(self.interval):
                try:
                    self._sample(store, client)
                except (pymysql.err.MySQLError, redis.RedisError, KafkaException):
                    continue   # a missed sample is not an error of the migration (its topics go at cleanup)
        finally:
            conn.close()

    def _sample(self, store: StateStore, client: redis.Redis) -> None:
        migration = store.latest(self.table.database, self.table.table)
        if migration is None or migration.id <= self.after_id:
            return
        self.migration = migration
        copied = store.copy_progress(migration.id)[0]
        applied = ApplyStats(client, migration.id).read().get("events", 0)
        lag = None
        if migration.stage in ("copy", "apply", "validate", "cutover"):   # appliers run from the copy on
            names = TopicNames(migration.prefix, self.table.database, self.table.table)
            lag = group_lag(self.endpoints.kafka, migration.group_id, names.changes,
                            int(migration.options.get("partitions", MigrationSpec.partitions)))
            if migration.stage in ("validate", "cutover") or lag <= STEADY_LAG:
                self.steady.set()
        self.samples.append(Sample(round(time.monotonic() - self.started, 2), migration.stage, copied, applied, lag))

    # latency probe -------------------------------------------------------------------------------
    def _probe_loop(self) -> None:
        while not self.steady.wait(0.2):
            if self.stop_event.is_set():
                return
        writer, reader = connect(self.endpoints.mysql), connect(self.endpoints.mysql)
        new_table = qualified(self.table.database, helper_table_name(self.table.table, "new"))
        ids = self.table.probe_ids()
        book = ProbeBook(ids)
        n, next_probe = 0, 0.0
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                if now >= next_probe:
                    n += 1
                    pk = ids[n % len(ids)]
                    query(writer, f"UPDATE {self.table.name} SET c=%s WHERE id=%s", (f"{PROBE_PREFIX}{n}", pk))
                    book.sent(n, pk, time.monotonic())
                    next_probe = now + PROBE_INTERVAL_S
                try:
                    rows = query(reader, f"SELECT id, c FROM {new_table} WHERE id IN ({','.join(map(str, ids))})")
                except pymysql.err.MySQLError:
                    return   # swapped: `_<table>_new` is gone
                arrived = time.monotonic()
                for pk, value in rows:
                    self.probes += [(at - self.started, ms) for at, ms in book.shown(pk, value, arrived)]
                time.sleep(POLL_INTERVAL_S)
        except pymysql.err.MySQLError:
            return   # writes blocked at cutover or the table renamed under the probe
        finally:
            self.unseen_probes = book.unseen()
            writer.close()
            reader.close()

    # figures -------------------------------------------------------------------------------------
    def latency_by_stage(self) -> dict[str, list[float]]:
        """Per stage in which probes were sent (that of the last sample at or before): [p99 ms, probes], to
        tell which stage the slow ones fell in."""
        times = [sample.t for sample in self.samples]
        by_stage: dict[str, list[float]] = {}
        for sent, ms in self.probes:
            at = bisect.bisect_right(times, sent) - 1
            by_stage.setdefault(self.samples[at].stage if at >= 0 else "init", []).append(ms)
        return {stage: [round(p99(sorted(values)), 1), len(values)] for stage, values in by_stage.items()}

    def figures(self, rows: int) -> dict[str, Any]:
        """Phase times, copy and apply rates, latency percentiles and the timeline."""
        out: dict[str, Any] = {}
        first = {}
        for s in self.samples:
            first.setdefault(s.stage, s)
        copy_start = first.get("copy")
        copy_end = next((first[st] for st in ("apply", "validate", "cutover", "cleanup", "done") if st in first), None)
        if copy_start and copy_end:
            out["copy_seconds"] = round(copy_end.t - copy_start.t, 1)
            out["copy_rows_per_s"] = round(rows / max(copy_end.t - copy_start.t, 0.001))
        out["stage_start_s"] = {stage: s.t for stage, s in first.items()}
        during_copy = [s.lag for s in self.samples if s.lag is not None and s.stage == "copy"]
        if during_copy:
            out["copy_peak_lag_events"] = max(during_copy)
        drain = [s for s in self.samples if s.lag is not None and s.stage != "copy"]
        if drain:
            done = next((s for s in drain if s.lag <= STEADY_LAG), drain[-1])
            start = drain[0]
            backlog = start.lag   # the group's lag as the copy ends (the appliers applied during the copy)
            out["backlog_events"] = backlog
            if backlog >= 5 * STEADY_LAG and done.t > start.t:
                out["apply_capacity_events_per_s"] = round((done.applied - start.applied) / (done.t - start.t))
                out["drain_seconds"] = round(done.t - start.t, 1)
        if self.probes:
            ordered = sorted(ms for _, ms in self.probes)
            out["apply_latency_ms_p50"] = round(statistics.median(ordered), 1)
            out["apply_latency_ms_p99"] = round(p99(ordered), 1)
            out["apply_latency_probes"] = len(ordered)
            out["apply_latency_unseen_probes"] = self.unseen_probes   # sent, not yet in the new table at the swap
            out["apply_latency_ms_p99_by_stage"] = self.latency_by_stage()
        out["timeline"] = [[s.t, s.stage, s.copied, s.applied, s.lag] for s in self.samples]
        return out


def p99(ordered: list[float]) -> float:
    """The 99th percentile of sorted values (the value below which 99% of them lie)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _latest(endpoints: Endpoints, table: BenchTable, after_id: int = 0) -> Migration | None:
    """The table's most recent stream-osc migration if its id is above `after_id` (one short connection)."""
    conn = connect(endpoints.mysql)
    try:
        latest = StateStore(conn, "stream_osc").latest(table.database, table.table)
    finally:
        conn.close()
    return latest if latest is not None and latest.id > after_id else None


def latest_migration_id(endpoints: Endpoints, table: BenchTable) -> int:
    """Id of the table's most recent stream-osc migration (0 if none)."""
    latest = _latest(endpoints, table)
    return latest.id if latest else 0


def cutover_blocked_ms(endpoints: Endpoints, table: BenchTable, after_id: int) -> int | None:
    """Writes blocked at the swap, as the migration recorded it."""
    latest = _latest(endpoints, table, after_id)
    return latest.cutover_blocked_ms if latest else None


def swap_finished_at(endpoints: Endpoints, table: BenchTable, after_id: int) -> float | None:
    """Wall-clock time (epoch s) the swap ended: its lock taken at `cutover_at`, writes blocked for
    `cutover_blocked_ms` after it."""
    latest = _latest(endpoints, table, after_id)
    if latest is None or latest.cutover_at is None:
        return None
    return latest.cutover_at + (latest.cutover_blocked_ms or 0) / 1000


def migration_status(endpoints: Endpoints, table: BenchTable) -> str | None:
    """The status of the table's most recent stream-osc migration (None before there is one)."""
    latest = _latest(endpoints, table)
    return None if latest is None else str(latest.status)


def in_stage(endpoints: Endpoints, table: BenchTable, after_id: int, stage: str) -> bool:
    """True once the table's migration started after `after_id` is in `stage`."""
    latest = _latest(endpoints, table, after_id)
    return latest is not None and latest.stage == stage
