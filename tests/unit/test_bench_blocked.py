"""The benchmark's "blocked" scenario: chosen explicitly, run under the light load, reported in its own section."""
import pytest

from bench.__main__ import _variant
from bench.config import parse_args
from bench.report import _held_section
from bench.streamosc import log_figures


def test_blocked_runs_only_when_asked_and_under_the_light_load():
    default = parse_args([], "python -m bench")
    assert "blocked" not in default.scenarios
    config = parse_args(["--scenarios", "blocked", "--blocker-seconds", "10", "--light-rate", "150"], "python -m bench")
    assert (config.scenarios, config.blocker_s, config.rate("blocked")) == (("blocked",), 10.0, 150)


def test_the_held_table_section_shows_what_the_application_saw_while_held():
    assert _held_section([{"scenario": "light", "tool": "stream-osc", "rows": 1000}]) == []
    lines = _held_section([{"scenario": "blocked", "tool": "stream-osc", "rows": 100_000, "seconds_median": 41.0,
                            "blocker_held_s": 25.0, "blocker_to_swap_s": 6.2, "held_app_tps": 248.0,
                            "held_app_p99_ms_worst_second": 312.0, "held_app_stalled_seconds": 0}])
    assert "| 100,000 | stream-osc | 41.0 | 25.0 | 6.2 | 248 | 312 | 0 |" in lines
    assert not any("killed" in line for line in lines)   # no kill figures: no kill table


def test_the_held_table_section_shows_when_stream_osc_killed_the_transaction():
    lines = _held_section([
        {"scenario": "blocked", "tool": "stream-osc", "rows": 100_000, "seconds_median": 12.0,
         "blocker_held_s": 6.0, "blocker_to_swap_s": 6.1, "blocker_seen_to_kill_s": 5.2,
         "blocker_kill_to_swap_s": 0.7},
        {"scenario": "blocked", "tool": "gh-ost", "rows": 100_000, "seconds_median": 40.0}])
    assert "| rows | tool | first seen holding the table → killed s | killed → swap s |" in lines
    assert "| 100,000 | stream-osc | 5.2 | 0.7 |" in lines
    assert not any(line.startswith("| 100,000 | gh-ost | –") for line in lines)   # it kills nothing


def test_a_transaction_opened_at_cutover_is_for_stream_osc_only_and_its_runs_are_reported_apart():
    config = parse_args(["--scenarios", "blocked", "--tools", "stream-osc", "--blocker-at", "cutover",
                         "--stream-osc-args", "--force-kill-blockers-after 5s"], "python -m bench")
    assert (config.blocker_at, config.stream_osc_args) == ("cutover", ("--force-kill-blockers-after", "5s"))
    assert _variant(config) == ", --force-kill-blockers-after 5s; transaction opened at cutover"
    with pytest.raises(SystemExit):
        parse_args(["--scenarios", "blocked", "--blocker-at", "cutover"], "python -m bench")


def test_the_log_gives_the_seconds_from_a_holders_sighting_to_its_kill_and_to_the_swap():
    output = "\n".join([
        'ts=2026-11-23T17:00:01.000Z level=warning msg="waiting for sessions holding the table" table=a.b',
        'ts=2026-11-23T17:00:02.000Z level=warning msg="waiting for sessions holding the table" table=a.b',
        'ts=2026-11-23T17:00:06.250Z level=warning msg="killed blocking connection" held_up_s=5.2',
        'ts=2026-11-23T17:00:07.000Z level=info msg="tables swapped" blocked_ms=100 drain_ms=20.0'])
    figures = log_figures(output)
    assert (figures["blocker_seen_to_kill_s"], figures["blocker_kill_to_swap_s"]) == (5.25, 0.75)
    assert (figures["cutover_attempts"], figures["run_restarts"]) == (1, 0)


def test_the_log_counts_the_runs_restarts_after_transient_failures():
    output = "\n".join([
        'ts=2026-11-23T17:00:01.000Z level=warning logger=stream_osc.runner msg="transient failure" '
        'error="(1213, \'Deadlock found\')" retry_in_s=2',
        'ts=2026-11-23T17:00:04.000Z level=warning logger=stream_osc.runner msg="transient failure" retry_in_s=4',
        'ts=2026-11-23T17:00:09.000Z level=info msg="tables swapped" blocked_ms=100 drain_ms=20.0'])
    assert log_figures(output)["run_restarts"] == 2
