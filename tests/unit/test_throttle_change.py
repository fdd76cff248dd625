"""What the migration says when what holds its work back changes (pure logic): every change of cause is told,
including one cause following another with no gap between them; what changes under one option is not."""
from __future__ import annotations

from throttle.load import throttle_change

MAX_LOAD = "Threads_running=33 >= 25 (--max-load)"
APP_LATENCY = ("application write latency 41.5 ms over 20.0 ms (--max-app-latency): 1 of 2 workers, "
               "batches of 50% of the target time")


def test_a_throttle_starting_and_ending_is_told():
    assert throttle_change(None, MAX_LOAD) == [f"throttled: {MAX_LOAD}"]
    assert throttle_change(MAX_LOAD, None) == ["throttle released (--max-load)"]


def test_figures_moving_under_one_cause_are_not_told_again():
    assert throttle_change(MAX_LOAD, "Threads_running=40 >= 25 (--max-load)") == []
    assert throttle_change(APP_LATENCY, APP_LATENCY.replace("41.5", "60.2").replace("1 of 2", "2 of 2")) == []
    assert throttle_change(None, None) == []
    assert throttle_change(APP_LATENCY.replace("41.5 ms", "high"), APP_LATENCY) == []
    assert throttle_change("replica db-1:3306 is 12 s behind >= 10 s (--max-replica-lag)",
                           "replica db-2:3306 unreachable (--max-replica-lag)") == []


def test_one_cause_taking_over_from_another_releases_the_first_and_names_the_second():
    assert throttle_change(MAX_LOAD, APP_LATENCY) == ["throttle released (--max-load)", f"throttled: {APP_LATENCY}"]


def test_a_reason_naming_no_option_is_released_plainly():
    assert throttle_change("paused by the operator", None) == ["throttle released"]
