"""Parsing and comparing --max-load / --critical-load thresholds (pure logic)."""
from __future__ import annotations

import pytest

from core.endpoints import ConfigError
from core.throttle_options import parse_thresholds
from throttle.load import over


def test_a_comma_separated_list_of_limits():
    assert parse_thresholds("Threads_running=25, Innodb_row_lock_current_waits=10", "--max-load") == {
        "Threads_running": 25, "Innodb_row_lock_current_waits": 10}
    assert parse_thresholds("", "--max-load") == {}


@pytest.mark.parametrize("text", ["Threads_running", "Threads_running=high", "=5", "Threads_running=-1",
                                  "Threads running=5"])
def test_malformed_limits_name_the_option_and_the_item(text):
    with pytest.raises(ConfigError, match="--critical-load: .* is not STATUS_VARIABLE=NUMBER"):
        parse_thresholds(text, "--critical-load")


def test_reached_at_or_above_the_limit_whatever_the_name_case():
    limits = {"Threads_running": 25}
    assert over({"threads_running": 24}, limits) is None
    assert over({"threads_running": 25}, limits) == "Threads_running=25 >= 25"
    assert over({}, limits) is None
