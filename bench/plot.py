"""PNG plots drawn from the recorded runs: stream-osc throughput and lag over time, and scaling."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def timeline_plot(out_dir: Path, runs: list[dict[str, Any]]) -> str | None:
    """benchmarks-stream-osc-timeline.png from the first finished stream-osc run under the heaviest load
    (of the latest invocation)."""
    plt = _pyplot()
    candidates = [r for r in runs if r["tool"] == "stream-osc" and r["finished"] and r.get("timeline")]
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
    top.plot(t, rate(copied), label="copy rows/s")
    top.plot(t, rate(applied), label="apply events/s")
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
            axis.axvline(start, color="black", linewidth=0.5)
        top.annotate(stage, (start, 0), textcoords="offset points", xytext=(2, 2), fontsize=7)
    fig.suptitle(f"stream-osc, {run['rows']:,} rows, {run['scenario']} load ({run['load_tx_per_s']} tx/s)")
    name = "benchmarks-stream-osc-timeline.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name


def scaling_plot(out_dir: Path, results: list[dict[str, Any]]) -> str | None:
    """benchmarks-scaling.png: idle time and stream-osc peak RSS against table size (needs 2+ sizes)."""
    plt = _pyplot()
    idle = [r for r in results if r["scenario"] == "idle" and r["seconds_median"]]
    if plt is None or len({r["rows"] for r in idle}) < 2:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for tool in sorted({r["tool"] for r in idle}):
        points = sorted((r["rows"], r["seconds_median"]) for r in idle if r["tool"] == tool)
        left.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=tool)
    left.set_xlabel("rows")
    left.set_ylabel("seconds (idle, median)")
    left.set_ylim(bottom=0)
    left.legend()
    rss = sorted((r["rows"], r["peak_rss_mb"]) for r in idle if r["tool"] == "stream-osc" and r.get("peak_rss_mb"))
    right.plot([p[0] for p in rss], [p[1] for p in rss], marker="o", color="tab:green")
    right.set_xlabel("rows")
    right.set_ylabel("stream-osc peak RSS (MB)")
    right.set_ylim(bottom=0)
    name = "benchmarks-scaling.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name
