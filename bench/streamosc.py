"""stream-osc as a contender: `stream-osc migrate` in its own process, observed from outside."""
from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Any

from bench.observe import Observer, cutover_blocked_ms, latest_migration_id
from bench.tools import Outcome, ToolRun, _outcome, run_process, stream_osc_abort, stream_osc_command


def stream_osc(run: ToolRun) -> Outcome:
    """Run one migration; add its phase times, apply figures, cutover block and peak RSS."""
    before = latest_migration_id(run.endpoints, run.table)
    cmd, env = stream_osc_command(run)
    observer = Observer(run.endpoints, run.table, before).start()
    try:
        result = run_process(cmd, run.limit_s, env=env)
    finally:
        observer.stop()
    outcome = _outcome(result, run, "stream-osc")
    outcome.figures.update(observer.figures(run.table.rows))
    outcome.figures.update(log_figures(result.output))
    if outcome.finished:
        outcome.figures["cutover_blocked_ms"] = cutover_blocked_ms(run.endpoints, run.table, before)
    else:
        stream_osc_abort(run)
    return outcome


def stream_osc_with_validation_ahead(run: ToolRun) -> Outcome:
    """stream-osc with --validate-ahead: copied chunks compared during the copy."""
    return stream_osc(dataclasses.replace(run, stream_osc_args=(*run.stream_osc_args, "--validate-ahead")))


LOGFMT = re.compile(r'(\w+)=("[^"]*"|\S+)')


def log_figures(output: str) -> dict[str, Any]:
    """Cutover attempts, rollback reasons, the locked drain time and the run's restarts after a transient
    failure (each waits a backoff), from stream-osc's logfmt lines; with a session holding the table, the
    seconds from its first sighting to its kill and from the kill to the swap."""
    rollbacks, figures, restarts = [], {}, 0
    seen_at = killed_at = swapped_at = None
    for line in output.splitlines():
        fields = {k: v.strip('"') for k, v in LOGFMT.findall(line)}
        at = _epoch(fields.get("ts"))
        if fields.get("msg") == "cutover attempt rolled back":
            rollbacks.append(fields.get("reason", "?"))
        elif fields.get("msg") == "tables swapped" and "drain_ms" in fields:
            figures["cutover_locked_drain_ms"] = float(fields["drain_ms"])
            swapped_at = at
        elif fields.get("msg") == "waiting for sessions holding the table" and seen_at is None:
            seen_at = at
        elif fields.get("msg") == "killed blocking connection" and killed_at is None:
            killed_at = at
        elif fields.get("msg") == "transient failure":
            restarts += 1
    figures["cutover_attempts"] = len(rollbacks) + (1 if "cutover_locked_drain_ms" in figures else 0)
    figures["run_restarts"] = restarts
    if rollbacks:
        figures["cutover_rollbacks"] = rollbacks
    if seen_at is not None and killed_at is not None:
        figures["blocker_seen_to_kill_s"] = round(killed_at - seen_at, 2)
        if swapped_at is not None:
            figures["blocker_kill_to_swap_s"] = round(swapped_at - killed_at, 2)
    return figures


def _epoch(ts: str | None) -> float | None:
    """A log line's ts (ISO 8601, UTC) as epoch seconds."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
