"""The one configuration object of a benchmark run, built from the command line."""
from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from bench.topology import TOPOLOGIES
from core.endpoints import ENV_KEYS

TOOLS = ("server-copy", "alter-copy", "online-ddl", "stream-osc", "pt-osc", "gh-ost")
# stream-osc with an option changed, run only when named in --tools: what the option buys, side by side
VARIANTS = ("stream-osc-ahead",)
SCENARIOS = ("idle", "light", "heavy", "blocked")
DEFAULT_SCENARIOS = ("idle", "light", "heavy")   # "blocked": light load and a transaction holding the table
ALTER = "MODIFY k BIGINT NOT NULL DEFAULT 0, ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new'"
GH_OST_ENV = "STREAM_OSC_BENCH_GH_OST"


@dataclass(frozen=True)
class BenchConfig:
    """What to run: table sizes, tools, scenarios, load rates, repetitions and limits."""

    sizes: tuple[int, ...]
    tools: tuple[str, ...]
    scenarios: tuple[str, ...]
    repetitions: int
    light_rate: int              # sysbench oltp_write_only transactions/s (4 row writes each)
    heavy_rate: int
    load_threads: int
    baseline_s: float            # load without migration, before each loaded scenario
    time_limit_s: float | None   # per tool run; None: derived from the table size
    database: str
    table: str
    alter: str
    gh_ost: str | None
    out_dir: Path
    append: bool                 # keep the runs already in <out>/benchmarks.json
    report_only: bool            # only rewrite the report from <out>/benchmarks.json
    command: str
    fit_buffer_pool: bool = True  # grow the embedded server's buffer pool to hold the tables (bench/server.py)
    fit_redo_log: bool = True     # grow its redo log so that a copy of the table does not fill it (bench/server.py)
    blocker_s: float = 25.0       # how long the "blocked" scenario's transaction holds the table
    blocker_at: str = "start"     # when it opens: at the tool's start, or once stream-osc enters stage cutover
    stream_osc_args: tuple[str, ...] = ()   # options added to `stream-osc migrate`
    # one unrecorded stream-osc run first: a broker and Connect worker just started compile their code for minutes,
    # on the cores the measured runs share; a production worker has long done so
    warm_up: bool = True
    topology: str = "shared"      # bench/topology.py: "split" gives the database server a CPU of its own

    def rate(self, scenario: str) -> int:
        """Transactions/s of a scenario's load (0 when idle)."""
        return {"idle": 0, "light": self.light_rate, "heavy": self.heavy_rate, "blocked": self.light_rate}[scenario]

    def limit_for(self, rows: int) -> float:
        """Seconds a single tool run may take before it is stopped and reported unfinished."""
        return self.time_limit_s or 300.0 + rows / 1_000_000 * 300.0


def _csv(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        unknown = [x for x in items if x not in allowed]
        if unknown or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)} (got {text!r})")
        return items
    return parse


def row_count(text: str) -> int:
    """Row counts like 5000000, 5M or 50k."""
    factor = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    try:
        value = int(float(text[:-1] if factor > 1 else text) * factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a row count: {text!r}") from None
    if value < 1000:
        raise argparse.ArgumentTypeError("a table needs at least 1000 rows")
    return value


def parse_args(argv: list[str] | None, command: str) -> BenchConfig:
    """Build the BenchConfig from argv (see `python -m bench --help`)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run the same ALTER with every tool, interleaved, idle and under sysbench write load; "
                    "write docs/benchmarks.{md,json} and plots.")
    parser.add_argument("--rows", type=row_count, default=5_000_000, help="table size, e.g. 1M (default 5M)")
    parser.add_argument("--scaling", action="store_true",
                        help="run the sizes 1M, 5M and 20M instead of --rows (stream-osc and server-copy only, "
                             "unless --tools is given)")
    parser.add_argument("--tools", type=_csv(TOOLS + VARIANTS),
                        help=f"comma-separated subset of {','.join(TOOLS)}; also {','.join(VARIANTS)} "
                             "(stream-osc --validate-ahead)")
    parser.add_argument("--scenarios", type=_csv(SCENARIOS), default=DEFAULT_SCENARIOS,
                        help="idle,light,heavy (default); blocked: light load while a transaction that read a few "
                             "rows stays open on the table for --blocker-seconds from the tool's start")
    parser.add_argument("--blocker-seconds", type=float, default=25.0,
                        help="how long the blocked scenario's transaction stays open (default 25)")
    parser.add_argument("--blocker-at", choices=("start", "cutover"), default="start",
                        help="when the blocked scenario's transaction opens: at the tool's start (default), or once "
                             "stream-osc's migration enters stage cutover (stream-osc only)")
    parser.add_argument("--stream-osc-args", default="",
                        help='options added to `stream-osc migrate`, e.g. "--force-kill-blockers-after 5s"')
    parser.add_argument("--repetitions", type=int, default=3, help="runs of each tool per scenario (default 3)")
    parser.add_argument("--light-rate", type=int, default=250,
                        help="light load, sysbench tx/s (default 250, about 1,000 row writes/s)")
    parser.add_argument("--heavy-rate", type=int, default=1000,
                        help="heavy load, sysbench tx/s (default 1000, about 4,000 row writes/s)")
    parser.add_argument("--load-threads", type=int, default=8, help="sysbench threads (default 8)")
    parser.add_argument("--baseline", type=float, default=20.0, help="seconds of load alone per scenario")
    parser.add_argument("--time-limit", type=float, help="seconds per tool run (default 300 + 300 per million rows)")
    parser.add_argument("--database", default="sbtest", help="schema of the benchmark table (default sbtest)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="folder of the report (default docs)")
    parser.add_argument("--append", action="store_true",
                        help="add to the runs already recorded in <out>/benchmarks.json (e.g. another size)")
    parser.add_argument("--keep-buffer-pool", action="store_true",
                        help="leave the embedded server's buffer pool as it is (by default it is grown online to "
                             "hold three copies of the table, within half the machine's memory; a server given "
                             "by STREAM_OSC_* variables is never changed)")
    parser.add_argument("--keep-redo-log", action="store_true",
                        help="leave the embedded server's redo log as it is (by default it is grown online to hold "
                             "the table once, 1 to 4 GiB; a server given by STREAM_OSC_* variables is never changed)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="measure from the first run; by default one stream-osc run under the heaviest scenario's "
                             "load goes first, kept out of the measured figures (what it cost the application is "
                             "reported apart), so the broker and Connect have compiled their code as a long-running "
                             "worker has")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="shared",
                        help="shared (default): every process on every CPU; split: production's topology, the "
                             "database server alone on one CPU, everything else on the others (bench/topology.py)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite benchmarks.md and the plots from <out>/benchmarks.json")
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    gh_ost = os.environ.get(GH_OST_ENV) or None
    if args.blocker_at == "cutover" and (args.tools or ()) != ("stream-osc",):
        parser.error("--blocker-at cutover needs --tools stream-osc (only stream-osc's stage can be watched)")
    default_tools = ("server-copy", "stream-osc") if args.scaling else TOOLS
    return BenchConfig(
        sizes=(1_000_000, 5_000_000, 20_000_000) if args.scaling else (args.rows,),
        tools=args.tools or default_tools,
        scenarios=args.scenarios,
        repetitions=args.repetitions,
        light_rate=args.light_rate,
        heavy_rate=args.heavy_rate,
        load_threads=args.load_threads,
        baseline_s=args.baseline,
        time_limit_s=args.time_limit,
        database=args.database,
        table="sbtest1",
        alter=ALTER,
        gh_ost=gh_ost,
        out_dir=args.out,
        append=args.append,
        report_only=args.report_only,
        command=command,
        fit_buffer_pool=not args.keep_buffer_pool and not any(os.environ.get(var) for var in ENV_KEYS.values()),
        fit_redo_log=not args.keep_redo_log and not any(os.environ.get(var) for var in ENV_KEYS.values()),
        blocker_s=args.blocker_seconds,
        blocker_at=args.blocker_at,
        stream_osc_args=tuple(shlex.split(args.stream_osc_args)),
        warm_up=not args.no_warm_up,
        topology=args.topology,
    )
