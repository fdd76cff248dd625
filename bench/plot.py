"""PNG plots drawn from the recorded runs: stream-osc throughput and lag over time, and scaling.

Each tool has one colour in every plot, and a line joins only runs of one stream-osc commit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import current_invocations, latest_source

TOOL_COLOURS = {"stream-osc": "tab:blue", "server-copy": "tab:gray", "pt-osc": "tab:orange",
                "gh-ost": "tab:green"}


def tool_colour(tool: str) -> str:
    return TOOL_COLOURS.get(tool, "tab:brown")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def timeline_plot(out_dir: Path, runs: list[dict[str, Any]], invocations: list[dict[str, Any]]) -> str | None:
    """benchmarks-stream-osc-timeline.png from the first finished stream-osc run under the heaviest load,
    of the newest commit measured."""
    plt = _pyplot()
    source, current = latest_source(invocations), set(current_invocations(invocations))
    candidates = [r for r in runs if r["tool"] == "stream-osc" and r["finished"] and r.get("timeline")
                  and r.get("invocation", 0) in current]
    if plt is None or not candidates:
        return None
    run = max(candidates, key=lambda r: (r["load_tx_per_s"], r["rows"], r.get("invocation", 0), -r["repetition"]))
    t = [s[0] for s in run["timeline"]]
    copied = [s[2] for s in run["timeline"]]
    applied = [s[3] for s in run["timeline"]]   # the counter is removed at cleanup: rates are clipped at 0
    lag_points = [(s[0], s[4]) for s in run["timeline"] if s[4] is not None]   # sampled from the apply stage on

    def rate(values: list[int]) -> list[float]:
        return [0.0] + [max(values[i] - values[i - 1], 0) / max(t[i] - t[i - 1], 1e-3) for i in range(1, len(values))]

    app = run.get("app_timeline") or []
    fig, axes = plt.subplots(3 if app else 2, 1, sharex=True, figsize=(9, 8 if app else 6))
    top, bottom = axes[0], axes[1]
    top.plot(t, rate(copied), color=tool_colour("stream-osc"), label="copy rows/s")
    top.plot(t, rate(applied), color="tab:cyan", label="apply events/s")
    if run.get("binlog_row_events_per_s"):
        top.axhline(run["binlog_row_events_per_s"], color="grey", linestyle="--", label="load's binlog row events/s")
    top.set_ylabel("per second")
    top.legend(loc="upper right")
    bottom.plot([p[0] for p in lag_points], [p[1] for p in lag_points], color="tab:red", label="apply lag (events)")
    bottom.set_ylabel("events")
    bottom.legend(loc="upper right")
    if app:
        axes[2].plot([a[0] for a in app], [a[2] for a in app], color="tab:purple",
                     label="application p99 ms (per second)")
        if run.get("baseline_app_p99_ms"):
            axes[2].axhline(run["baseline_app_p99_ms"], color="grey", linestyle="--", label="baseline p99")
        axes[2].set_yscale("log")
        axes[2].set_ylabel("ms")
        axes[2].legend(loc="upper right")
    axes[-1].set_xlabel("seconds since start")
    for stage, start in (run.get("stage_start_s") or {}).items():
        for axis in axes:
            axis.axvline(start, color="black", linewidth=0.5, linestyle=":")
        top.annotate(stage, (start, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -4),
                     textcoords="offset points", rotation=90, va="top", fontsize=9,
                     bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    fig.suptitle(f"stream-osc at {source or '?'}, {run['rows']:,} rows, {run['scenario']} "
                 f"load ({run['load_tx_per_s']} tx/s)")
    name = "benchmarks-stream-osc-timeline.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name


def scaling_plot(out_dir: Path, results: list[dict[str, Any]]) -> str | None:
    """benchmarks-scaling.png: idle time and stream-osc peak RSS against table size, from the newest commit
    measured at 2+ sizes (results are in invocation order)."""
    plt = _pyplot()
    idle = [r for r in results if r["scenario"] == "idle" and r["seconds_median"]]
    sources = [src for src in dict.fromkeys(r["stream_osc_source"] for r in reversed(idle))
               if len({r["rows"] for r in idle if r["stream_osc_source"] == src}) >= 2]
    if plt is None or not sources:
        return None
    idle = [r for r in idle if r["stream_osc_source"] == sources[0]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for tool in sorted({r["tool"] for r in idle}):
        points = sorted((r["rows"], r["seconds_median"]) for r in idle if r["tool"] == tool)
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=tool_colour(tool), label=tool)
    left.set_xlabel("rows")
    left.set_ylabel("seconds (idle, median)")
    left.set_ylim(bottom=0)
    left.legend()
    rss = sorted((r["rows"], r["peak_rss_mb"]) for r in idle if r["tool"] == "stream-osc" and r.get("peak_rss_mb"))
    right.plot([p[0] for p in rss], [p[1] for p in rss], marker="o", color=tool_colour("stream-osc"))
    right.set_xlabel("rows")
    right.set_ylabel("stream-osc peak RSS (MB)")
    right.set_ylim(bottom=0)
    fig.suptitle(f"idle, stream-osc at {sources[0]}")
    name = "benchmarks-scaling.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name
