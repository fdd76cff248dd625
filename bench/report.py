"""Aggregate the runs into docs/benchmarks.json and docs/benchmarks.md."""
from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.config import SCENARIOS
from bench.conflicts import COUNTS, RULE

ANALYSIS_START, ANALYSIS_END = "<!-- analysis -->", "<!-- /analysis -->"
# figures summarised per tool/scenario/size: (key in a run, how runs are combined)
CPU_ROLES = ("database", "kafka_connect", "kafka", "redis", "tool", "load")
PER_RUN = {
    "peak_rss_mb": max, "copy_rows_per_s": statistics.median, "copy_seconds": statistics.median,
    "apply_capacity_events_per_s": statistics.median, "backlog_events": statistics.median,
    "apply_latency_ms_p50": statistics.median, "apply_latency_ms_p99": max, "apply_latency_probes": sum,
    "cutover_blocked_ms": max, "cutover_attempts": max, "cutover_locked_drain_ms": max, "run_restarts": max,
    "app_tps": statistics.median, "app_p99_ms": statistics.median,
    "app_p99_ms_worst_second": max, "app_errors": sum, "app_stalled_seconds": max,
    "baseline_app_tps": statistics.median, "baseline_app_p99_ms": statistics.median,
    "binlog_row_events_per_s": statistics.median,
    "held_app_p99_ms_worst_second": max, "held_app_stalled_seconds": max, "held_app_tps": statistics.median,
    "blocker_held_s": statistics.median, "blocker_to_swap_s": statistics.median,
    "blocker_seen_to_kill_s": statistics.median, "blocker_kill_to_swap_s": statistics.median,
    **{f"cpu_cores_{role}": statistics.median for role in CPU_ROLES}, "cpu_machine_busy": statistics.median,
    **dict.fromkeys(COUNTS, sum), "app_deadlock_victims": sum, "app_lock_wait_timeouts": sum,
    "app_lock_wait_timeouts_alone": sum, "app_other_errors": sum,
}


def summarise(runs: list[dict[str, Any]],
              invocations: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One result per (tool, scenario, rows, stream-osc commit), shaped as the issue asks, with ratios from the same
    repetition; runs appended from invocations that measured different stream-osc code are not pooled."""
    def source(run: dict[str, Any]) -> str | None:
        index = run.get("invocation", 0)
        known = invocations and index < len(invocations)
        return invocations[index].get("stream_osc_source") if known else None

    groups: dict[tuple[str, str, int, str | None], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        groups[run["tool"], run["scenario"], run["rows"], source(run)].append(run)
    def same_run(r: dict[str, Any]) -> tuple[int, str, int, int]:
        return r.get("invocation", 0), r["scenario"], r["rows"], r["repetition"]

    copy_time = {same_run(r): r["seconds"] for r in runs if r["tool"] == "server-copy" and r["finished"]}
    results = []
    for (tool, scenario, rows, src), group in groups.items():
        done = [r for r in group if r["finished"]]
        secs = [r["seconds"] for r in done]
        result: dict[str, Any] = {
            "tool": tool, "scenario": scenario, "rows": rows, "stream_osc_source": src,
            "seconds_median": round(statistics.median(secs), 1) if secs else None,
            "seconds_min": round(min(secs), 1) if secs else None,
            "seconds_max": round(max(secs), 1) if secs else None,
            "runs": len(group), "finished_runs": len(done), "finished": len(done) == len(group),
            "load_tx_per_s": group[0]["load_tx_per_s"],
        }
        reasons = sorted({r["reason"] for r in group if r.get("reason")})
        if reasons:
            result["reasons"] = reasons
        ratios = [r["seconds"] / copy_time[same_run(r)] for r in done if same_run(r) in copy_time]
        if ratios:
            result["ratio_to_server_copy"] = round(statistics.median(ratios), 2)
        if secs:
            result["rows_per_s"] = round(rows / statistics.median(secs))
        for key, combine in PER_RUN.items():   # measured in unfinished runs too (e.g. stopped at the limit)
            values = [r[key] for r in group if r.get(key) is not None]
            if values:
                result[key] = round(combine(values), 2)
        result.update(_deadlock_runs(group))
        if result.get("app_p99_ms") and result.get("baseline_app_p99_ms"):
            result["app_p99_vs_baseline"] = round(result["app_p99_ms"] / result["baseline_app_p99_ms"], 2)
        if result.get("apply_capacity_events_per_s") and result.get("binlog_row_events_per_s"):
            result["apply_capacity_vs_load"] = round(
                result["apply_capacity_events_per_s"] / result["binlog_row_events_per_s"], 1)
        results.append(result)
    for result in results:   # loaded vs idle time of the same tool and size
        idle = next((r for r in results if r["tool"] == result["tool"] and r["rows"] == result["rows"]
                     and r["stream_osc_source"] == result["stream_osc_source"] and r["scenario"] == "idle"), None)
        if result["scenario"] != "idle" and idle and idle["seconds_median"] and result["seconds_median"]:
            result["ratio_to_own_idle"] = round(result["seconds_median"] / idle["seconds_median"], 2)
    return results


def _deadlock_runs(group: list[dict[str, Any]]) -> dict[str, Any]:
    """How many of a group's runs had their deadlocks attributed, the tool's count in each, and why any were not."""
    attributed = [r for r in group if r.get(COUNTS[0]) is not None]
    why_not = sorted({r["deadlocks_not_attributed"] for r in group if r.get("deadlocks_not_attributed")})
    figures: dict[str, Any] = {}
    if attributed:
        figures["deadlocks_attributed_runs"] = len(attributed)
        figures[f"{COUNTS[0]}_per_run"] = [r[COUNTS[0]] for r in attributed]
    if why_not:
        figures["deadlocks_not_attributed"] = why_not
    codes: Counter[str] = Counter()
    for r in group:
        codes.update(r.get("app_other_error_codes") or {})
    if codes:
        figures["app_other_error_codes"] = dict(sorted(codes.items()))
    return figures


def write_json(path: Path, invocations: list[dict[str, Any]], runs: list[dict[str, Any]]) -> None:
    """docs/benchmarks.json: the summary per tool/scenario/size, how it was run, every run (with its timeline)."""
    doc = {"results": summarise(runs, invocations), "invocations": invocations, "runs": runs}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read_previous(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Invocations and runs of an existing benchmarks.json (for --append)."""
    if not path.exists():
        return [], []
    doc = json.loads(path.read_text())
    return doc.get("invocations", []), doc.get("runs", [])


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}" if value < 100 else f"{value:,.0f}{suffix}"
    return f"{value:,}{suffix}" if isinstance(value, int) else f"{value}{suffix}"


def _main_table(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| rows | scenario | tool | median s | min–max s | finished | × server-copy | × own idle | rows/s | "
             "app tx/s (baseline) | app p99 ms (baseline) | peak RSS MB |",
             "| ---: | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(results, key=lambda r: (r["rows"], SCENARIOS.index(r["scenario"]), r["tool"],
                                            r.get("stream_osc_source") or "")):
        spread = f"{_fmt(r['seconds_min'])}–{_fmt(r['seconds_max'])}" if r["seconds_min"] is not None else "–"
        finished = f"{r['finished_runs']}/{r['runs']}"
        app = (f"{_fmt(r.get('app_tps'))} ({_fmt(r.get('baseline_app_tps'))})" if r.get("app_tps") is not None
               else "–")
        p99 = (f"{_fmt(r.get('app_p99_ms'))} ({_fmt(r.get('baseline_app_p99_ms'))})" if r.get("app_p99_ms")
               else "–")
        lines.append(f"| {r['rows']:,} | {r['scenario']} | {r['tool']} | {_fmt(r['seconds_median'])} | "
                     f"{spread} | "
                     f"{finished} | {_fmt(r.get('ratio_to_server_copy'))} | {_fmt(r.get('ratio_to_own_idle'))} | "
                     f"{_fmt(r.get('rows_per_s'))} | {app} | {p99} | {_fmt(r.get('peak_rss_mb'))} |")
    return lines


def _stream_osc_table(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| rows | scenario | copy s | copy rows/s | binlog row events/s of the load | apply capacity events/s "
             "(× load) | commit→applied p50 / p99 ms (probes) | writes blocked at cutover ms (max) | "
             "cutover attempts (max) | restarts after a transient failure (max) | peak RSS MB |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted((r for r in results if r["tool"] == "stream-osc"),
                    key=lambda r: (r["rows"], r["load_tx_per_s"], r.get("stream_osc_source") or "")):
        capacity = (f"{_fmt(r.get('apply_capacity_events_per_s'))} ({_fmt(r.get('apply_capacity_vs_load'))}×)"
                    if r.get("apply_capacity_events_per_s") else "– (no backlog to drain)")
        latency = (f"{_fmt(r.get('apply_latency_ms_p50'))} / {_fmt(r.get('apply_latency_ms_p99'))} "
                   f"({_fmt(r.get('apply_latency_probes'))})" if r.get("apply_latency_probes") else "–")
        lines.append(f"| {r['rows']:,} | {r['scenario']} | {_fmt(r.get('copy_seconds'))} | "
                     f"{_fmt(r.get('copy_rows_per_s'))} | {_fmt(r.get('binlog_row_events_per_s'))} | {capacity} | "
                     f"{latency} | {_fmt(r.get('cutover_blocked_ms'))} | {_fmt(r.get('cutover_attempts'))} | "
                     f"{_fmt(r.get('run_restarts'))} | {_fmt(r.get('peak_rss_mb'))} |")
    return lines


def _counts(r: dict[str, Any]) -> list[str]:
    """The deadlock cells of a result or a run: the tool's (each run's when several), alone, other."""
    if r.get(COUNTS[0]) is None:
        return ["not attributed"] * len(COUNTS)
    tool = _fmt(r[COUNTS[0]])
    each = r.get(f"{COUNTS[0]}_per_run") or []
    if len(each) > 1:
        tool += f" ({' + '.join(map(str, each))})"
    return [tool, _fmt(r[COUNTS[1]]), _fmt(r[COUNTS[2]])]


def _other_errors(r: dict[str, Any]) -> str:
    """The other errors the load retried, with their codes: `8 (1146 × 8)`."""
    codes = r.get("app_other_error_codes") or {}
    detail = f" ({', '.join(f'{code} × {n}' for code, n in codes.items())})" if codes else ""
    return f"{_fmt(r.get('app_other_errors'))}{detail}"


def _conflicts_section(results: list[dict[str, Any]], runs: list[dict[str, Any]],
                       warm_ups: list[dict[str, Any]]) -> list[str]:
    """The application's deadlocks, attributed from the server's reports, and its lock-wait timeouts: per tool,
    scenario and size over the runs, then the warm-up run apart, then the first reports of the tool's deadlocks.
    Nothing for runs recorded before they were attributed."""
    loaded = [r for r in results if r["load_tx_per_s"] and
              (r.get("deadlocks_attributed_runs") or r.get("deadlocks_not_attributed"))]
    if not loaded and not warm_ups:
        return []
    lines = ["## The application's deadlocks and lock-wait timeouts", "",
             "Every deadlock on the benchmark's schema from the tool's start to the load's end, read from the "
             "server's own report (`innodb_print_all_deadlocks`; bench/conflicts.py): who is who — "
             f"{RULE}. The load's sysbench script prints the code of every error it ignores and retries "
             "(sysbench's `err/s` lumps them together): deadlock victims (1213), lock-wait timeouts (1205) and any "
             "other error as the application saw them during the run; for the timeouts, beside what the same load "
             "alone had in its baseline, scaled to the run's length. Sums over the runs; each run's count of the "
             "tool's deadlocks in brackets.", "",
             "| rows | scenario | tool | runs | deadlocks with the tool, application rolled back | "
             "application transactions alone | other | application's deadlock victims (1213) | "
             "application's lock-wait timeouts (1205) | 1205 with the load alone, for as long | other errors the "
             "application retried (codes) |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(loaded, key=lambda r: (r["rows"], SCENARIOS.index(r["scenario"]), r["tool"],
                                           r.get("stream_osc_source") or "")):
        attributed = r.get("deadlocks_attributed_runs", 0)
        counted = r["runs"] if attributed == r["runs"] else f"{attributed} of {r['runs']} attributed"
        lines.append(f"| {r['rows']:,} | {r['scenario']} | {r['tool']} | {counted} | "
                     f"{' | '.join(_counts(r))} | {_fmt(r.get('app_deadlock_victims'))} | "
                     f"{_fmt(r.get('app_lock_wait_timeouts'))} | {_fmt(r.get('app_lock_wait_timeouts_alone'))} | "
                     f"{_other_errors(r)} |")
    if warm_ups:
        lines += ["", "### The warm-up run", "",
                  "Kept out of every other table: the first stream-osc run, under the heaviest load chosen, with a "
                  "broker and Connect just started (no baseline is measured before it).", "",
                  "| rows | scenario | tool | s | finished | deadlocks with the tool, application rolled back | "
                  "application transactions alone | other | application's deadlock victims (1213) | "
                  "application's lock-wait timeouts (1205) | other errors the application retried (codes) |",
                  "| ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for w in warm_ups:
            lines.append(f"| {w['rows']:,} | {w['scenario']} | {w['tool']} | {_fmt(w.get('seconds'))} | "
                         f"{'yes' if w.get('finished') else 'no'} | {' | '.join(_counts(w))} | "
                         f"{_fmt(w.get('app_deadlock_victims'))} | {_fmt(w.get('app_lock_wait_timeouts'))} | "
                         f"{_other_errors(w)} |")
    why_not = sorted({why for r in loaded for why in r.get("deadlocks_not_attributed", [])} |
                     {w["deadlocks_not_attributed"] for w in warm_ups if w.get("deadlocks_not_attributed")})
    if why_not:
        lines += ["", *[f"Not attributed: {why}." for why in why_not]]
    return lines + ["", *_deadlock_examples([*warm_ups, *runs])]


def _deadlock_examples(runs: list[dict[str, Any]], limit: int = 5) -> list[str]:
    """The first reports of deadlocks in which the tool took part and the application was rolled back."""
    shown = []
    for r in runs:
        which = "warm-up" if r.get("repetition", 0) < 0 else f"repetition {r['repetition'] + 1}"
        for text in r.get(f"{COUNTS[0]}_examples", []):
            shown.append(f"{r['tool']}, {r['scenario']}, {r['rows']:,} rows, {which}: {text}")
    if not shown:
        return []
    return ["The application's transaction rolled back in a deadlock with the tool (the first "
            f"{min(limit, len(shown))} reports, from each run's `{COUNTS[0]}_examples` in the JSON):", "", "```",
            *shown[:limit], "```", ""]


def _cpu_table(results: list[dict[str, Any]]) -> list[str]:
    """Where the cores went during each tool's runs (medians over repetitions)."""
    measured = [r for r in results if r.get("cpu_machine_busy") is not None]
    if not measured:
        return []
    lines = ["## Where the CPU went", "",
             "| rows | scenario | tool | " + " | ".join(CPU_ROLES).replace("_", " ") + " | machine busy |",
             "| ---: | --- | --- |" + " ---: |" * (len(CPU_ROLES) + 1)]
    for r in sorted(measured, key=lambda r: (r["rows"], SCENARIOS.index(r["scenario"]), r["tool"])):
        cores = " | ".join(f"{r[f'cpu_cores_{role}']:.2f}" if r.get(f"cpu_cores_{role}") is not None else "–"
                           for role in CPU_ROLES)
        lines.append(f"| {r['rows']:,} | {r['scenario']} | {r['tool']} | {cores} | {r['cpu_machine_busy']:.0%} |")
    return [*lines, "",
            "Cores used on average over the tool's run (CPU seconds ÷ run seconds) by the database server, Kafka "
            "Connect (Debezium), the Kafka broker, Redis, the tool's own process and sysbench, all on the same "
            "machine; machine busy is the share of all its cores neither idle nor waiting for I/O (bench/cpu.py). "
            "For a run that did not finish, the window includes the removal of what it left.", ""]


def _held_section(results: list[dict[str, Any]]) -> list[str]:
    """The `blocked` scenario's runs, if any: what the application saw while the transaction held the table."""
    if not any(r["scenario"] == "blocked" for r in results):
        return []
    lines = ["## A transaction holding the table", "",
             "Scenario `blocked`: light load while an application transaction that read a few rows stays open on "
             "the table from the tool's start, or with `--blocker-at cutover` from the moment stream-osc enters "
             "stage cutover (its metadata lock makes any lock request on the table wait, and the "
             "application's statements queue behind such a request).", "",
             "| rows | tool | median s | transaction held s | transaction start → swap s | app tx/s while held | "
             "app p99 ms, worst second while held | seconds with no transaction while held |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted((r for r in results if r["scenario"] == "blocked"),
                    key=lambda r: (r["rows"], r["tool"], r.get("stream_osc_source") or "")):
        lines.append(f"| {r['rows']:,} | {r['tool']} | {_fmt(r['seconds_median'])} | "
                     f"{_fmt(r.get('blocker_held_s'))} | {_fmt(r.get('blocker_to_swap_s'))} | "
                     f"{_fmt(r.get('held_app_tps'))} | "
                     f"{_fmt(r.get('held_app_p99_ms_worst_second'))} | {_fmt(r.get('held_app_stalled_seconds'))} |")
    killed = [r for r in results if r["scenario"] == "blocked" and (r.get("blocker_seen_to_kill_s") is not None
                                                                   or r.get("blocker_kill_to_swap_s") is not None)]
    if killed:   # stream-osc with --force-kill-blockers-after (`--stream-osc-args`)
        lines += ["", "Where stream-osc killed the transaction (`--force-kill-blockers-after`), from its log "
                      "(medians over the runs):", "",
                  "| rows | tool | first seen holding the table → killed s | killed → swap s |",
                  "| ---: | --- | ---: | ---: |"]
        for r in sorted(killed, key=lambda r: (r["rows"], r["tool"], r.get("stream_osc_source") or "")):
            lines.append(f"| {r['rows']:,} | {r['tool']} | {_fmt(r.get('blocker_seen_to_kill_s'))} | "
                         f"{_fmt(r.get('blocker_kill_to_swap_s'))} |")
    return lines + [""]


def _unfinished(runs: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in runs:
        if not r["finished"]:
            lines.append(f"- {r['tool']}, {r['scenario']}, {r['rows']:,} rows, repetition {r['repetition'] + 1}: "
                         f"{r['reason']}")
    return sorted(set(lines)) or ["- none"]


def _kept_analysis(path: Path) -> str:
    """The hand-written analysis section of an existing report, kept across runs."""
    if not path.exists():
        return f"{ANALYSIS_START}\n## Analysis\n\n(not written yet)\n{ANALYSIS_END}"
    text = path.read_text()
    start, end = text.find(ANALYSIS_START), text.find(ANALYSIS_END)
    if start < 0 or end < 0:
        return f"{ANALYSIS_START}\n## Analysis\n\n(not written yet)\n{ANALYSIS_END}"
    return text[start:end + len(ANALYSIS_END)]


def _invocation(meta: dict[str, Any]) -> list[str]:
    return [
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}; machine: {meta['machine']}; server: {meta['server']}; stream-osc at "
        f"{meta.get('stream_osc_source', '?')}",
        f"- table: sysbench `oltp` table, {', '.join(f'{n:,}' for n in meta['sizes'])} rows; "
        f"change: `ALTER TABLE … {meta['alter']}`",
        f"- load: sysbench `oltp_write_only --rate` (4 row writes per transaction), light "
        f"{meta['light_rate']} tx/s, heavy {meta['heavy_rate']} tx/s, {meta['load_threads']} threads; "
        f"baseline {meta['baseline_s']:.0f} s of load alone before each loaded scenario",
        f"- {meta['repetitions']} repetition(s); in each, every scenario runs every tool once, in rotated order, "
        f"each on a table freshly restored from the same template; time limit per run "
        f"{meta['time_limit_s']:.0f} s", *_buffer_pool_line(meta), *_redo_log_line(meta), *_warm_up_line(meta),
        *_placement_line(meta), ""]


def _placement_line(meta: dict[str, Any]) -> list[str]:
    """Where the processes ran, and how busy the machine was at the start (absent from older invocations)."""
    if "topology" not in meta:
        return []
    where = ("split: the database server alone on one CPU, the broker, Connect, Redis, the tools and the load on "
             "the other (bench/topology.py)" if meta["topology"] == "split" else "shared: every process on every CPU")
    return [f"- topology: {where}; load average at the start {meta['load_average']:.2f}"]


def _warm_up_line(meta: dict[str, Any]) -> list[str]:
    if not meta.get("warm_up"):   # also invocations recorded before there was a warm-up
        return []
    kept = (" (what it cost the application: \"The warm-up run\" below)" if "warm_up_run" in meta
            else "")
    return ["- warm-up: one stream-osc run under the heaviest load chosen went first, kept out of the measured "
            f"figures{kept}, so the broker and Connect had compiled their code as a long-running worker has"]


def _buffer_pool_line(meta: dict[str, Any]) -> list[str]:
    return [_sizing_line(meta, "fit_buffer_pool", "buffer pool", "the embedded stack's 1 GiB",
                         "grown online before the runs to hold three copies of the table, within half the machine's "
                         "memory (`buffer_pool_mb` of each run in the JSON)")]


def _redo_log_line(meta: dict[str, Any]) -> list[str]:
    return [_sizing_line(meta, "fit_redo_log", "redo log", "the embedded server's 1 GiB",
                         "grown online before the runs to hold the table once, 1 to 4 GiB (`redo_log_mb` of each run "
                         "in the JSON); Debian's 96 MiB default stalls every write under the heavy load "
                         "(bench/server.py)")]


def _sizing_line(meta: dict[str, Any], flag: str, what: str, before_sizing: str, sized: str) -> str:
    """How the invocation left the server's `what`: as it was before the benchmark sized it (invocations recorded
    then have no `flag`), left alone on request, or sized."""
    if flag not in meta:
        return f"- {what}: {before_sizing}"
    return f"- {what}: {sized if meta[flag] else 'left as the server had it'}"


def latest_source(invocations: list[dict[str, Any]]) -> str | None:
    """The stream-osc commit the newest invocation measured: the report's main tables show its runs only."""
    return invocations[-1].get("stream_osc_source") if invocations else None


def current_invocations(invocations: list[dict[str, Any]]) -> list[int]:
    """Indexes of the invocations that measured the newest commit (`latest_source`): the current figures."""
    latest = latest_source(invocations)
    return [i for i, meta in enumerate(invocations) if meta.get("stream_osc_source") == latest]


def _history(results: list[dict[str, Any]], invocations: list[dict[str, Any]], latest: str | None) -> list[str]:
    """Earlier commits' results and invocations, newest first, apart from the current figures."""
    earlier = [r for r in results if r["stream_osc_source"] != latest]
    if not earlier:
        return []
    order = list(dict.fromkeys(m.get("stream_osc_source") for m in reversed(invocations)))
    lines = ["# Benchmarks of earlier commits", "",
             "Kept for comparison, newest first, written by `python -m bench` beside [benchmarks.md](benchmarks.md) "
             "(the newest commit's figures). Ratios compare tools measured side by side in the same repetition "
             "only.", ""]
    for source in order:
        group = [r for r in earlier if r["stream_osc_source"] == source]
        if group:
            lines += [f"### At {source}", "",
                      *[line for meta in invocations if meta.get("stream_osc_source") == source
                        for line in _invocation(meta)],
                      *_main_table(group), ""]
    return lines


HISTORY_PAGE = "benchmarks-history.md"   # earlier commits' figures, beside the report


def write_markdown(path: Path, invocations: list[dict[str, Any]], runs: list[dict[str, Any]],
                   plots: list[str]) -> None:
    """docs/benchmarks.md: how the newest commit's figures were produced, its tables, what did not finish, the
    plots and the analysis; earlier commits' figures on a page of their own beside it (HISTORY_PAGE)."""
    all_results = summarise(runs, invocations)
    latest = latest_source(invocations)
    results = [r for r in all_results if r["stream_osc_source"] == latest]
    current = current_invocations(invocations)
    lines = [
        "# Benchmarks", "",
        "Generated by `python -m bench` (`make bench`); the section between the analysis markers is kept "
        "across runs. Raw runs, timelines and the summary are in `benchmarks.json`. The tables show the "
        f"newest commit measured ({latest}); earlier commits' figures are in {HISTORY_PAGE}.", "",
        "## How these figures were produced", "",
        *[line for i in current for line in _invocation(invocations[i])],
        "Columns: `× server-copy` is the median over repetitions of the tool's time divided by the server-side "
        "copy's time in the same repetition and scenario. `app p99` is the median over the run's seconds of "
        "sysbench's per-second 99th-percentile latency (rate mode, so queueing behind a blocked table counts); "
        "seconds with no completed transaction are counted in `app_stalled_seconds` in the JSON. "
        "Peak RSS is the tool process's maximum resident set (wait4 rusage).", "",
        "## Results", "", *_main_table(results), "",
        *_conflicts_section(results, [r for r in runs if r.get("invocation", 0) in current],
                            [invocations[i]["warm_up_run"] for i in current if invocations[i].get("warm_up_run")]),
        "## stream-osc in detail", "", *_stream_osc_table(results), "",
        "Apply capacity is the rate at which the appliers drained a backlog left at the copy's end (events "
        "applied ÷ drain time; the appliers apply during the copy, so there is often none to drain, and the "
        "group's largest lag during the copy is `copy_peak_lag_events` in the JSON); commit→applied is measured "
        "by a probe that updates rows below sysbench's range (read by the copy's first batch) every 50 ms once the "
        "group's lag is at most 1,000 events and polls the new table until each value, or a later value of the same "
        "row, appears (apply writes a row as it is then; probes not in the new table by the swap are "
        "`apply_latency_unseen_probes` in the JSON).", "",
        *_cpu_table(results),
        *_held_section(results),
        "## Runs that did not finish", "", *_unfinished([r for r in runs if r.get("invocation", 0) in current]), "",
    ]

    if plots:
        lines += ["## Plots", "", *[f"![{p}]({p})" for p in plots], ""]
    history = _history(all_results, invocations, latest)
    lines += [_kept_analysis(path), ""]
    if history:
        lines += [f"Earlier commits' figures: [{HISTORY_PAGE}]({HISTORY_PAGE}).", ""]
        (path.parent / HISTORY_PAGE).write_text("\n".join(history))
    path.write_text("\n".join(lines))
