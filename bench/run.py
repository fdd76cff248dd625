"""The interleaved schedule: for each size, repetition and scenario, every tool once on a fresh table."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench import cpu
from bench.blocker import OpenTransaction
from bench.conflicts import ErrorLog, attribute, error_log_of, expected_alone, not_attributed
from bench.observe import in_stage, latest_migration_id, swap_finished_at
from bench.config import GH_OST_ENV, BenchConfig
from bench.load import Baseline, SysbenchLoad, measure_baseline
from bench.streamosc import stream_osc, stream_osc_with_validation_ahead
from bench.sysbench import BenchError
from bench.table import BenchTable
from bench.tools import Outcome, ToolRun, alter_copy, gh_ost, online_ddl, pt_osc, server_copy
from core.endpoints import Endpoints

TOOL_FUNCS: dict[str, Callable[[ToolRun], Outcome]] = {
    "server-copy": server_copy, "alter-copy": alter_copy, "online-ddl": online_ddl,
    "stream-osc": stream_osc, "pt-osc": pt_osc, "gh-ost": gh_ost,
    "stream-osc-ahead": stream_osc_with_validation_ahead,
}
WARMUP_S = 3.0
UNRECORDED_REP = -1   # the repetition number of the warm-up run, recorded apart from the measured runs


def warm_up_tool(config: BenchConfig) -> str | None:
    """The tool of the warm-up run: stream-osc as it runs by default when chosen, else a variant of it; None when
    no warm-up runs (--no-warm-up, or no stream-osc among the tools)."""
    if not config.warm_up:
        return None
    tools = config.tools
    return "stream-osc" if "stream-osc" in tools else next((t for t in tools if t.startswith("stream-osc")), None)


def rotated(tools: tuple[str, ...], by: int) -> list[str]:
    """The tool order of one repetition: rotated so no tool always runs first (A B C, B C A, …)."""
    k = by % len(tools)
    return list(tools[k:] + tools[:k])


class Schedule:
    """Runs the whole benchmark and hands each finished run to `record`."""

    def __init__(self, config: BenchConfig, endpoints: Endpoints, record: Callable[[dict[str, Any]], None],
                 say: Callable[[str], None], record_warm_up: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.config, self.endpoints, self.record, self.say = config, endpoints, record, say
        self.record_warm_up = record_warm_up   # the warm-up's run, kept apart from the measured ones
        self.buffer_pool_mb: int | None = None
        self.redo_log_mb: int | None = None
        self._error_log: ErrorLog | None = None

    @property
    def error_log(self) -> ErrorLog:
        """The server's error log, where its deadlock reports are read (bench/conflicts.py); looked up once."""
        if self._error_log is None:
            self._error_log = error_log_of(self.endpoints.mysql)
            if self._error_log.why_not:
                self.say(f"deadlocks not attributed: {self._error_log.why_not}")
        return self._error_log

    def run(self) -> None:
        warm_up_with = warm_up_tool(self.config)
        for rows in self.config.sizes:
            table = BenchTable(self.endpoints.mysql, self.config.database, self.config.table, rows)
            self.say(f"preparing {rows:,} rows (sysbench prepare, kept as template {table.template})")
            table.ensure_template()
            self.buffer_pool_mb = None
            if self.config.fit_buffer_pool:
                self.buffer_pool_mb = table.fit_buffer_pool() // 2 ** 20
                self.say(f"buffer pool: {self.buffer_pool_mb:,} MB for {rows:,} rows")
            self.redo_log_mb = None
            if self.config.fit_redo_log:
                self.redo_log_mb = table.fit_redo_log() // 2 ** 20
                self.say(f"redo log: {self.redo_log_mb:,} MB for {rows:,} rows")
            if warm_up_with is not None:
                self.warm_up(table, warm_up_with)
                warm_up_with = None
            for rep in range(self.config.repetitions):
                for scenario in self.config.scenarios:
                    baseline = self._baseline(table, scenario)
                    for tool in rotated(self.config.tools, rep):
                        self.record(self._one(table, tool, scenario, rep, baseline))

    def warm_up(self, table: BenchTable, tool: str) -> None:
        """One run of `tool` (stream-osc) under the heaviest load of the scenarios chosen, kept out of the measured
        figures: a broker and Connect worker just started spend their first minutes compiling (on two cores, 2-3
        times the Connect CPU of a later run of the same migration), which a production worker has long done. What
        it cost the application (its deadlocks, its refused transactions) is recorded apart (`record_warm_up`)."""
        scenario = max((s for s in self.config.scenarios if s != "blocked"), key=self.config.rate, default="light")
        self.say(f"warm-up: one {tool} run under the {scenario} load, recorded apart from the measured runs")
        result = self._one(table, tool, scenario, UNRECORDED_REP, None)
        if self.record_warm_up is not None:
            self.record_warm_up(result)

    def _start_load(self, table: BenchTable, rate: int) -> SysbenchLoad:
        return SysbenchLoad(self.endpoints.mysql, table.database, table.rows, rate, self.config.load_threads).start()

    def _baseline(self, table: BenchTable, scenario: str) -> Baseline | None:
        rate = self.config.rate(scenario)
        if not rate:
            return None
        table.restore()
        load = self._start_load(table, rate)
        try:
            baseline = measure_baseline(load, self.config.baseline_s, WARMUP_S)
        finally:
            load.stop()
        window = baseline.window
        self.say(f"  baseline {scenario}: {window.tps or 0:.0f} tx/s, p99 {window.p99_ms_median or 0:.1f} ms, "
                 f"{baseline.row_events_per_s:.0f} binlog row events/s")
        return baseline

    def _one(self, table: BenchTable, tool: str, scenario: str, rep: int, baseline: Baseline | None
             ) -> dict[str, Any]:
        rate = self.config.rate(scenario)
        if tool == "gh-ost" and not self.config.gh_ost:
            return {"tool": tool, "scenario": scenario, "rows": table.rows, "repetition": rep, "seconds": None,
                    "finished": False, "skipped": True, "load_tx_per_s": rate,
                    "reason": f"skipped: no gh-ost binary (set {GH_OST_ENV} to its path; the Go module proxy "
                              "here does not serve gh-ost)"}
        table.restore()
        run = ToolRun(self.endpoints, table, self.config.alter, self.config.limit_for(table.rows), self.config.gh_ost,
                      self.config.stream_osc_args)
        load = self._start_load(table, rate) if rate else None
        load_error = None
        blocker: OpenTransaction | None = None
        try:
            if load:
                time.sleep(WARMUP_S)
            start = load.now() if load else 0.0
            log_position = self.error_log.position()   # the deadlocks reported from here on are the run's
            migration_before = latest_migration_id(self.endpoints, table)
            if scenario == "blocked":
                blocker = OpenTransaction(self.endpoints.mysql, table.database, table.table, self.config.blocker_s)
                if self.config.blocker_at == "cutover":
                    blocker.start_when(lambda: in_stage(self.endpoints, table, migration_before, "cutover"))
                else:
                    blocker.start()
            cpu_before = cpu.snapshot()
            try:
                outcome = TOOL_FUNCS[tool](run)
            finally:
                if blocker is not None and self.config.blocker_at == "cutover" and not blocker.opened:
                    blocker.stop()
            end = load.now() if load else 0.0
            outcome.figures.update(cpu.cores_by_role(cpu_before, cpu.snapshot()))
            if blocker is not None:
                ours = tool.startswith("stream-osc")
                swapped = swap_finished_at(self.endpoints, table, migration_before) if ours else None
                outcome.figures.update(blocker.finish(swapped))
        finally:
            if load:
                try:
                    load.stop()
                except BenchError as exc:
                    load_error = str(exc)
        finished = outcome.finished and table.altered()
        reason = outcome.reason or (None if finished else "the table does not have the new schema afterwards")
        result: dict[str, Any] = {
            "tool": tool, "scenario": scenario, "rows": table.rows, "repetition": rep,
            "seconds": round(outcome.seconds, 2), "finished": finished, "reason": reason,
            "load_tx_per_s": rate, "buffer_pool_mb": self.buffer_pool_mb,
            "redo_log_mb": self.redo_log_mb, **outcome.figures,
        }
        result.update(self._deadlocks(tool, table, log_position, load, blocker))
        if load:   # the warm-up has no baseline: the application's figures only
            result.update(load.window(start, end).as_dict())
        if load and baseline:
            alone = baseline.window
            result["app_lock_wait_timeouts_alone"] = expected_alone(alone.lock_wait_timeouts, alone.seconds,
                                                                    end - start)
            if blocker is not None:   # what the application saw while the transaction held the table
                held = load.window(blocker.opened - load.started, blocker.closed - load.started)
                result.update({f"held_{k}": v for k, v in held.as_dict().items()})
            result["app_timeline"] = load.series(start, end)
            result.update({f"baseline_{k}": v for k, v in baseline.window.as_dict().items()})
            result["binlog_row_events_per_s"] = round(baseline.row_events_per_s)
        if load_error:
            result["load_error"] = load_error
        state = "finished" if finished else f"NOT finished ({reason})"
        which = "warm-up (reported apart)" if rep == UNRECORDED_REP else f"rep {rep + 1}"
        self.say(f"  {tool:<11} {scenario:<5} {which}: {outcome.seconds:7.1f} s  {state}")
        if result.get("deadlocks_tool_app_victim"):
            self.say(f"  {tool}: the application's transaction rolled back in {result['deadlocks_tool_app_victim']} "
                     "deadlock(s) with the tool")
        return result

    def _deadlocks(self, tool: str, table: BenchTable, position: int, load: SysbenchLoad | None,
                   blocker: OpenTransaction | None) -> dict[str, Any]:
        """The run's deadlocks on the table's schema, from the error log's `position` on, read once the load
        stopped."""
        if self.error_log.why_not:
            return not_attributed(self.error_log.why_not)
        application = set(load.sessions if load else ()) | ({blocker.connection_id} if blocker else set())
        return attribute(self.error_log.since(position), tool, application, (table.database, table.table))
