"""What change data capture alone costs the application on the machine the benchmark runs on.

`python -m bench.capture_cost --rows 1M --rate 1000 --seconds 30 --repetitions 3` runs, in each repetition, five
phases of the same sysbench load, each on its own sysbench process:

1. the load alone;
2. the load beside a stream-osc migration that has copied the table and is kept in sync waiting for its cutover
   (`--cutover manual`): capture and apply, no copy, no validation;
3. the load beside the same migration paused (`stream-osc pause`): capture only, Debezium reading the binlog and
   the broker storing it, nothing applied (the paused appliers stay in their consumer group: its heartbeats and
   the consumers' prefetch go on);
4. the load beside pt-online-schema-change's triggers: pt-osc run with `--no-swap-tables --no-drop-triggers
   --no-drop-new-table` copies the table and leaves its triggers writing each change into its new table;
5. the load alone again, after `stream-osc abort` removed the migration and pt-osc's triggers and table are dropped.

Each phase also reports what the database server paid per row the load changed (4 per transaction): its CPU
milliseconds, its storage engines' row writes (`Handler_write` + `_update` + `_delete`; MariaDB counts its
temporary tables apart) and the binlog's bytes (`Binlog_bytes_written`, MariaDB), from the server's own counters.

A first repetition, not recorded, lets a broker and Connect worker just started compile their code.

The copy runs between phases 1 and 2 with no load. Each phase's application p99 (the median over its seconds of
sysbench's per-second p99) is reported as a ratio to the mean of the two load-alone phases of its repetition,
beside the cores each process took. A phase with capture running is the floor under any migration built on it:
no pace of the copy brings the application below what the capture alone costs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import cpu
from bench.config import ALTER, row_count
from bench.load import SysbenchLoad
from bench.observe import migration_status
from bench.run import WARMUP_S
from bench.sysbench import BenchError
from bench.table import BenchTable
from bench.tools import ToolRun, compile_measured_code, pt_osc_triggers_left, stream_osc_abort, stream_osc_command
from bench.topology import TOPOLOGIES, place
from core.db import connect
from core.endpoints import Endpoints
from core.stages import Status
from stack import services
from stack.config import StackConfig
from throttle.load import read_status

PHASES = ("alone", "in sync", "capture only", "pt-osc triggers", "alone again")
ROW_CHANGES_PER_TX = 4   # oltp_write_only: an index update, a non-index update, a delete and an insert
SERVER_COUNTERS = ("Handler_write", "Handler_update", "Handler_delete", "Binlog_bytes_written")
WAIT_FOR_SYNC_S = 600.0


@dataclass(frozen=True)
class Phase:
    """What the application got, and who took the cores, in one phase."""

    name: str
    tps: float
    p99_ms: float
    cores: dict[str, float | None]
    per_change: dict[str, float | None]   # the database's CPU ms, row writes and binlog bytes per row changed


def cost_per_change(before: dict[str, int], after: dict[str, int], database_cpu_s: float | None,
                    rows_changed: float) -> dict[str, float | None]:
    """What the server paid per row the load changed, from its counters' growth and its process's CPU."""
    if rows_changed <= 0:
        return {"db_cpu_ms": None, "row_writes": None, "binlog_bytes": None}
    names = [n.lower() for n in SERVER_COUNTERS]   # as throttle/load.py: read_status keys them
    writes = sum(after[n] - before[n] for n in names[:3] if n in before and n in after)
    binlog = names[3]
    return {"db_cpu_ms": None if database_cpu_s is None else 1000 * database_cpu_s / rows_changed,
            "row_writes": writes / rows_changed,
            "binlog_bytes": (after[binlog] - before[binlog]) / rows_changed if binlog in before and binlog in after
            else None}


def await_status(endpoints: Endpoints, table: BenchTable, status: Status, process: subprocess.Popen[str],
                 output: Callable[[], str]) -> None:
    """Return once the migration reports `status`; raise if its process ends first or the wait runs out."""
    deadline = time.monotonic() + WAIT_FOR_SYNC_S
    while migration_status(endpoints, table) != status:
        if process.poll() is not None:
            raise BenchError(f"stream-osc exited with {process.returncode} before reaching status {status}:\n"
                             f"{output()}")
        if time.monotonic() > deadline:
            raise BenchError(f"stream-osc did not reach status {status} within {WAIT_FOR_SYNC_S:.0f} s")
        time.sleep(0.5)


def measure(name: str, run: ToolRun, rate: int, threads: int, seconds: float, tool_pid: int | None) -> Phase:
    """Run the load for a warm-up and `seconds`; the application's figures and the cores by role over them."""
    load = SysbenchLoad(run.endpoints.mysql, run.table.database, run.table.rows, rate, threads).start()
    conn = connect(run.endpoints.mysql)
    try:
        time.sleep(WARMUP_S)
        start, before, counted = load.now(), cpu.snapshot(), read_status(conn, list(SERVER_COUNTERS))
        tool_before = cpu.process_cpu_seconds(tool_pid) if tool_pid else 0.0
        time.sleep(seconds)
        end, after, counted_after = load.now(), cpu.snapshot(), read_status(conn, list(SERVER_COUNTERS))
        tool_after = cpu.process_cpu_seconds(tool_pid) if tool_pid else 0.0
    finally:
        conn.close()
        load.stop()
    window = load.window(start, end)
    if window.tps is None or window.p99_ms_median is None:
        raise BenchError(f"phase {name}: sysbench reported no second")
    cores = cpu.cores_by_role(before, after)
    cores["cpu_cores_tool"] = round((tool_after - tool_before) / (after.at - before.at), 2) if tool_pid else None
    database = cores.get("cpu_cores_database")
    elapsed = after.at - before.at
    per_change = cost_per_change(counted, counted_after, None if database is None else database * elapsed,
                                 window.tps * elapsed * ROW_CHANGES_PER_TX)
    return Phase(name, window.tps, window.p99_ms_median, cores, per_change)


def one_repetition(run: ToolRun, rate: int, threads: int, seconds: float, say: Callable[[str], None]
                   ) -> list[Phase]:
    """The four phases on a freshly restored table."""
    run.table.restore()
    phases = [measure(PHASES[0], run, rate, threads, seconds, None)]
    cmd, env = stream_osc_command(run)
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen([*cmd, "--cutover", "manual"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                   text=True)

        def output() -> str:
            log.seek(0)
            return "\n".join(log.read().strip().splitlines()[-5:])

        try:
            try:
                await_status(run.endpoints, run.table, Status.WAITING, process, output)
                say("  in sync, waiting for cutover")
                phases.append(measure(PHASES[1], run, rate, threads, seconds, process.pid))
                paused = subprocess.run([*cmd[:3], "pause", "--table", f"{run.table.database}.{run.table.table}"],
                                        env=env, capture_output=True, text=True, timeout=60)
                if paused.returncode != 0:
                    raise BenchError(f"stream-osc pause exited with {paused.returncode}: {paused.stdout.strip()}")
                phases.append(measure(PHASES[2], run, rate, threads, seconds, process.pid))
            finally:
                stream_osc_abort(run)
        finally:
            _end(process)
    if migration_status(run.endpoints, run.table) != Status.ABORTED:
        raise BenchError("stream-osc abort did not remove the migration: the last phase would run beside its capture")
    say("  pt-osc copying, to leave its triggers")
    with pt_osc_triggers_left(run):
        phases.append(measure(PHASES[3], run, rate, threads, seconds, None))
    phases.append(measure(PHASES[4], run, rate, threads, seconds, None))
    return phases


def _end(process: subprocess.Popen[str]) -> None:
    """Wait for the migration's process, which the abort stops; kill it if it does not end."""
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def report(repetitions: list[list[Phase]]) -> str:
    """A markdown table: each phase's median figures over the repetitions, its p99 as a ratio to the load alone
    of the same repetition."""
    roles = ("database", "kafka_connect", "kafka", "tool", "load")
    lines = ["| phase | app tx/s | app p99 ms | × load alone (per repetition) | "
             + " | ".join(f"{r} cores" for r in roles) + " | machine busy |",
             "| --- | ---: | ---: | --- | " + " | ".join("---:" for _ in roles) + " | ---: |"]
    costs = ("db_cpu_ms", "row_writes", "binlog_bytes")
    lines[0] += " db CPU ms | row writes | binlog bytes |"
    lines[1] += " ---: | ---: | ---: |"
    lines.insert(0, "Per row the load changed: the database's CPU ms, row writes and binlog bytes.\n")
    for index, name in enumerate(PHASES):
        rows = [rep[index] for rep in repetitions]
        ratios = [rep[index].p99_ms / statistics.fmean((rep[0].p99_ms, rep[-1].p99_ms)) for rep in repetitions]
        cells = [_median([r.cores.get(f"cpu_cores_{role}") for r in rows]) for role in roles]
        busy = _median([r.cores.get("cpu_machine_busy") for r in rows])
        paid = [_median([r.per_change.get(cost) for r in rows]) for cost in costs]
        lines.append(f"| {name} | {statistics.median(r.tps for r in rows):.0f} | "
                     f"{statistics.median(r.p99_ms for r in rows):.1f} | "
                     + ", ".join(f"{x:.1f}" for x in ratios) + " | "
                     + " | ".join(cells) + f" | {busy} | " + " | ".join(paid) + " |")
    return "\n".join(lines)


def _median(values: list[Any]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.2f}" if known else "–"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capture_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=row_count, default=1_000_000, help="rows of the sysbench table (default 1M)")
    parser.add_argument("--rate", type=int, default=1000, help="sysbench transactions/s (default 1000)")
    parser.add_argument("--threads", type=int, default=8, help="sysbench threads (default 8)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per phase (default 30)")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--database", default="sbtest")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="skip the unrecorded first repetition (a broker and Connect worker just started spend "
                             "their first minutes compiling their code, which a long-running worker has done)")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="shared",
                        help="shared (default) or split: the database server alone on one CPU (bench/topology.py)")
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    services.up(StackConfig())
    say(f"load average {os.getloadavg()[0]:.2f} at the start")
    try:
        undo_placement = place(args.topology, StackConfig(), say)
    except BenchError as exc:
        say(f"bench.capture_cost: error: {exc}")
        return 2
    try:
        return _measure(args, say)
    finally:
        undo_placement()


def _measure(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """The repetitions of capture_cost's main, printed as a report."""
    endpoints = StackConfig().endpoints()
    compile_measured_code()
    table = BenchTable(endpoints.mysql, args.database, "sbtest1", args.rows)
    table.ensure_template()
    table.fit_buffer_pool()
    table.fit_redo_log()
    run = ToolRun(endpoints, table, ALTER, WAIT_FOR_SYNC_S, None)
    repetitions = []
    try:
        if args.warm_up:
            say("warm-up repetition, not recorded")
            one_repetition(run, args.rate, args.threads, args.seconds, say)
        for rep in range(args.repetitions):
            say(f"repetition {rep + 1}")
            repetitions.append(one_repetition(run, args.rate, args.threads, args.seconds, say))
            for phase in repetitions[-1]:
                say(f"  {phase.name:<12} {phase.tps:6.0f} tx/s  p99 {phase.p99_ms:8.1f} ms  {phase.cores}")
    except (BenchError, subprocess.SubprocessError) as exc:
        say(f"bench.capture_cost: error: {exc}")
        return 2
    print(report(repetitions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
