"""The benchmark's warm-up: one unrecorded stream-osc run before the measured ones, unless --no-warm-up."""
from __future__ import annotations

import dataclasses

import pytest

from bench import run as bench_run
from bench.config import parse_args
from bench.report import _warm_up_line
from bench.run import UNRECORDED_REP, Schedule, warm_up_tool


class FakeTable:
    def __init__(self, addr, database, table, rows) -> None:
        self.rows, self.template = rows, f"{table}_tpl_{rows}"

    def ensure_template(self) -> None:
        pass


def schedule(argv: list[str], monkeypatch) -> tuple[list[tuple], list[dict]]:
    """Run the schedule with every run and baseline replaced: the calls of `_one` in order, and what was recorded."""
    config = dataclasses.replace(parse_args(argv, "python -m bench"), fit_buffer_pool=False, fit_redo_log=False)
    calls: list[tuple] = []
    recorded: list[dict] = []
    monkeypatch.setattr(bench_run, "BenchTable", FakeTable)
    sched = Schedule(config, endpoints=type("E", (), {"mysql": None})(), record=recorded.append, say=lambda _: None)
    monkeypatch.setattr(sched, "_baseline", lambda table, scenario: None)
    monkeypatch.setattr(sched, "_one", lambda table, tool, scenario, rep, baseline:
                        calls.append((table.rows, tool, scenario, rep)) or {"tool": tool, "repetition": rep})
    sched.run()
    return calls, recorded


def test_one_unrecorded_stream_osc_run_under_the_heaviest_load_goes_first(monkeypatch):
    calls, recorded = schedule(["--rows", "1M", "--repetitions", "1", "--tools", "pt-osc,stream-osc",
                                "--scenarios", "idle,heavy,light"], monkeypatch)
    assert calls[0] == (1_000_000, "stream-osc", "heavy", UNRECORDED_REP)
    assert [c[3] for c in calls[1:]] == [0] * 6
    assert all(r["repetition"] == 0 for r in recorded) and len(recorded) == 6


def test_the_warm_up_runs_once_for_all_sizes_and_never_with_a_blocker(monkeypatch):
    calls, _ = schedule(["--scaling", "--repetitions", "1", "--scenarios", "blocked"], monkeypatch)
    warm = [c for c in calls if c[3] == UNRECORDED_REP]
    assert warm == [(1_000_000, "stream-osc", "light", UNRECORDED_REP)]


@pytest.mark.parametrize("argv", [["--no-warm-up"], ["--tools", "server-copy,pt-osc"]])
def test_no_warm_up_when_asked_not_to_or_without_stream_osc(argv, monkeypatch):
    calls, _ = schedule(["--rows", "1M", "--repetitions", "1", "--scenarios", "idle", *argv], monkeypatch)
    assert calls and all(c[3] != UNRECORDED_REP for c in calls)


def test_the_report_says_when_a_warm_up_went_first():
    assert _warm_up_line({"warm_up": True})[0].startswith("- warm-up: one stream-osc run")
    assert _warm_up_line({"warm_up": False}) == _warm_up_line({}) == []


def test_the_warm_up_prefers_stream_osc_as_it_runs_by_default_and_is_recorded_only_when_it_ran():
    def tool(*argv: str) -> str | None:
        return warm_up_tool(parse_args(list(argv), "python -m bench"))

    assert tool("--tools", "stream-osc-ahead,stream-osc") == "stream-osc"
    assert tool("--tools", "pt-osc,stream-osc-ahead") == "stream-osc-ahead"
    assert tool("--tools", "pt-osc,server-copy") is None
    assert [tool("--tools", "stream-osc"), tool("--tools", "pt-osc"), tool("--tools", "stream-osc", "--no-warm-up")] \
        == ["stream-osc", None, None]
