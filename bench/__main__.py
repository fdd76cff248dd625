"""`python -m bench`: run the interleaved benchmark on the embedded stack (or the configured endpoints)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import migration

from bench.config import BenchConfig, parse_args
from bench.plot import scaling_plot, timeline_plot
from bench.report import read_previous, summarise, write_json, write_markdown
from bench.run import Schedule, warm_up_tool
from bench.sysbench import BenchError
from bench.tools import compile_measured_code
from bench.topology import place
from core.db import connect, scalar
from core.endpoints import ENV_KEYS, Endpoints
from stack import services
from stack.config import StackConfig


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def code_source(root: Path | None = None) -> str:
    """Commit of the stream-osc code being measured (and whether its code had uncommitted changes)."""
    root = root or Path(migration.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        # the report's own files, prose and the tests (the benchmark runs none) do not change what is measured
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)docs", ":(exclude)*.md", ":(exclude)tests"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    return f"{commit}{' with uncommitted changes' if dirty else ''}"


def _meta(config: BenchConfig, endpoints: Endpoints) -> dict[str, Any]:
    conn = connect(endpoints.mysql)
    try:
        server = scalar(conn, "SELECT VERSION()")
    finally:
        conn.close()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"command": config.command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores, {mem_gib:.0f} GiB", "server": server,
            "sizes": list(config.sizes), "alter": config.alter, "tools": list(config.tools),
            "scenarios": list(config.scenarios), "repetitions": config.repetitions,
            "light_rate": config.light_rate, "heavy_rate": config.heavy_rate, "load_threads": config.load_threads,
            "baseline_s": config.baseline_s, "time_limit_s": config.limit_for(max(config.sizes)),
            "gh_ost": config.gh_ost, "stream_osc_source": code_source() + _variant(config),
            "fit_buffer_pool": config.fit_buffer_pool, "fit_redo_log": config.fit_redo_log,
            "warm_up": warm_up_tool(config) is not None, "topology": config.topology,
            "load_average": os.getloadavg()[0]}


def _variant(config: BenchConfig) -> str:
    """How this invocation ran stream-osc differently, so that its runs are reported apart from the others'."""
    parts = ([" ".join(config.stream_osc_args)] if config.stream_osc_args else []) + \
        (["transaction opened at cutover"] if config.blocker_at == "cutover" else [])
    return f", {'; '.join(parts)}" if parts else ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = parse_args(argv, shlex.join(["python", "-m", "bench", *argv]))
    if config.report_only:
        invocations, runs = read_previous(config.out_dir / "benchmarks.json")
        if not runs:
            _say(f"bench: error: no runs recorded in {config.out_dir / 'benchmarks.json'}")
            return 2
        _write_report(config, invocations, runs)
        return 0
    if not any(os.environ.get(var) for var in ENV_KEYS.values()):
        _say("bringing the embedded stack up (stream-osc stack up)")
        services.up(StackConfig())
    endpoints = StackConfig().endpoints()
    compile_measured_code()
    config.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = config.out_dir / "benchmarks.json"
    invocations, runs = read_previous(json_path) if config.append else ([], [])
    invocations.append(_meta(config, endpoints))
    number = len(invocations) - 1

    def record(run: dict[str, Any]) -> None:
        runs.append({"invocation": number, **run})
        write_json(json_path, invocations, runs)

    def record_warm_up(run: dict[str, Any]) -> None:   # kept with the invocation, out of the measured runs
        invocations[number]["warm_up_run"] = run
        write_json(json_path, invocations, runs)

    try:
        undo_placement = place(config.topology, StackConfig(), _say)
    except BenchError as exc:
        _say(f"bench: error: {exc}")
        return 2
    try:
        Schedule(config, endpoints, record, _say, record_warm_up).run()
    except BenchError as exc:
        _say(f"bench: error: {exc}")
        return 2
    finally:
        undo_placement()
        if runs:
            _write_report(config, invocations, runs)
    return 0


def _write_report(config: BenchConfig, invocations: list[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
    """benchmarks.json, the plots and benchmarks.md from the recorded runs."""
    json_path, md_path = config.out_dir / "benchmarks.json", config.out_dir / "benchmarks.md"
    write_json(json_path, invocations, runs)
    plots = [p for p in (timeline_plot(config.out_dir, runs, invocations),
                         scaling_plot(config.out_dir, summarise(runs, invocations))) if p]
    write_markdown(md_path, invocations, runs, plots)
    _say(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    raise SystemExit(main())
