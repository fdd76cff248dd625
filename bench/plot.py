"""PNG plots drawn from the recorded runs: stream-osc throughput and lag over time, and scaling.

Each tool has one colour in every plot, and a line joins only runs of one stream-osc commit."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import current_invocations, latest_source

TOOL_COLOURS = {"stream-osc": "tab:blue", "server-copy": "tab:gray", "pt-osc": "tab:orange",
                "gh-ost": "tab:green"}


STAGE_COLOURS = ("#dbe9f6", "#fde2c8", "#d9f0d3", "#ead9f0", "#f6d8d8", "#f0ecd0", "#d8eff0")
LABEL_LEVELS = 3   # rows a stage strip staggers the labels of stages too short to hold their own


def tool_colour(tool: str) -> str:
    return TOOL_COLOURS.get(tool, "tab:brown")


def stage_spans(stage_start_s: dict[str, float], end_s: float) -> list[tuple[str, float, float]]:
    """(stage, start, end) in time order; a stage ends where the next starts, the last at `end_s`."""
    starts = sorted(stage_start_s.items(), key=lambda item: item[1])
    return [(stage, start, starts[i + 1][1] if i + 1 < len(starts) else max(end_s, start))
            for i, (stage, start) in enumerate(starts)]


def label_levels(spans: list[tuple[str, float, float]], seconds_per_char: float) -> list[int]:
    """The row of each span's label in the stage strip: 0 (centred in its span) when the label fits the span,
    else 1, 2, … in turn, so that neighbouring short stages (validate, cutover, cleanup often take a second
    each) never print over one another."""
    levels, turn = [], 0
    for stage, start, end in spans:
        if end - start >= (len(stage) + 2) * seconds_per_char:
            levels.append(0)
        else:
            levels.append(1 + turn % (LABEL_LEVELS - 1))
            turn += 1
    return levels


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
    fig, all_axes = plt.subplots(4 if app else 3, 1, sharex=True, figsize=(11, 9 if app else 7),
                                 gridspec_kw={"height_ratios": [0.55] + [3] * (3 if app else 2)})
    strip, axes = all_axes[0], all_axes[1:]
    top, bottom = axes[0], axes[1]
    top.plot(t, rate(copied), color=tool_colour("stream-osc"), label="copy rows/s")
    top.plot(t, rate(applied), color="tab:cyan", label="apply events/s")
    if run.get("binlog_row_events_per_s"):
        top.axhline(run["binlog_row_events_per_s"], color="grey", linestyle="--", label="load's binlog row events/s")
    top.set_ylabel("per second")
    top.legend(**OUTSIDE)
    bottom.plot([p[0] for p in lag_points], [p[1] for p in lag_points], color="tab:red", label="apply lag (events)")
    bottom.set_ylabel("events")
    bottom.legend(**OUTSIDE)
    if app:
        axes[2].plot([a[0] for a in app], [a[2] for a in app], color="tab:purple",
                     label="application p99 ms (per second)")
        if run.get("baseline_app_p99_ms"):
            axes[2].axhline(run["baseline_app_p99_ms"], color="grey", linestyle="--", label="baseline p99")
        axes[2].set_yscale("log")
        axes[2].set_ylabel("ms")
        axes[2].legend(**OUTSIDE)
    axes[-1].set_xlabel("seconds since start")
    draw_stages(strip, axes, stage_spans(run.get("stage_start_s") or {}, max(t)), max(t))
    fig.suptitle(f"stream-osc at {source or '?'}, {run['rows']:,} rows, {run['scenario']} "
                 f"load ({run['load_tx_per_s']} tx/s)")
    name = "benchmarks-stream-osc-timeline.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name


OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": 9}


def draw_stages(strip, axes, spans: list[tuple[str, float, float]], end_s: float) -> None:
    """The stages as coloured spans in a strip of their own above the plots, each named horizontally (short
    ones staggered beneath), with their boundaries drawn through every plot."""
    strip.set_ylim(LABEL_LEVELS, 0)
    strip.set_yticks([])
    strip.set_ylabel("stage", rotation=0, ha="right", va="center")
    for side in ("top", "right", "left"):
        strip.spines[side].set_visible(False)
    seconds_per_char = max(end_s, 1.0) / 150   # about 150 characters of 8-point text across the strip
    for i, ((stage, start, end), level) in enumerate(zip(spans, label_levels(spans, seconds_per_char))):
        strip.axvspan(start, end, ymin=0, ymax=1, color=STAGE_COLOURS[i % len(STAGE_COLOURS)])
        if level == 0:
            strip.text((start + end) / 2, 0.5, stage, ha="center", va="center", fontsize=8)
        else:
            strip.text(start, level + 0.5, f"{stage} ({end - start:.1f} s)", ha="left", va="center", fontsize=8)
        for axis in (strip, *axes):
            axis.axvline(start, color="black", linewidth=0.5, linestyle=":")


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
    sizes = sorted({r["rows"] for r in idle})
    for axis in (left, right):
        axis.set_xticks(sizes, [row_label(n) for n in sizes])
    left.set_xlabel("rows")
    left.set_ylabel("seconds (idle, median)")
    left.set_ylim(bottom=0)
    left.legend()
    rss = sorted((r["rows"], r["peak_rss_mb"]) for r in idle if r["tool"] == "stream-osc" and r.get("peak_rss_mb"))
    right.plot([p[0] for p in rss], [p[1] for p in rss], marker="o", color=tool_colour("stream-osc"))
    right.set_xlabel("rows")
    right.set_ylabel("stream-osc peak RSS (MB)")
    right.set_ylim(0, max((p[1] for p in rss), default=1) * 1.2)
    fig.suptitle(f"idle, stream-osc at {sources[0]}")
    name = "benchmarks-scaling.png"
    fig.tight_layout()
    fig.savefig(out_dir / name, dpi=100)
    plt.close(fig)
    return name


def row_label(rows: int) -> str:
    """1000000 -> 1M, 250000 -> 250k."""
    if rows >= 1_000_000 and rows % 1_000_000 == 0:
        return f"{rows // 1_000_000}M"
    if rows >= 1_000 and rows % 1_000 == 0:
        return f"{rows // 1_000}k"
    return f"{rows:,}"
