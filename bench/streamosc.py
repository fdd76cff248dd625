"""stream-osc as a contender: `stream-osc migrate` in its own process, observed from outside."""
from __future__ import annotations

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
    if outcome.finished:
        outcome.figures["cutover_blocked_ms"] = cutover_blocked_ms(run.endpoints, run.table, before)
    else:
        stream_osc_abort(run)
    return outcome
