"""Cutover windows: which moments are inside, when the next opens, and what is refused."""
from datetime import datetime, timezone

import pytest

from core.endpoints import ConfigError
from core.schedule import parse_schedule
from core.spec import MigrationSpec


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def test_inside_and_outside_a_window():
    schedule = parse_schedule("02:00-04:00")
    assert schedule.is_open(at("2026-11-23T02:00:00")) and schedule.is_open(at("2026-11-23T03:59:59"))
    assert not schedule.is_open(at("2026-11-23T04:00:00")) and not schedule.is_open(at("2026-11-23T01:59:59"))
    assert schedule.next_opening(at("2026-11-23T05:00:00")) == at("2026-11-24T02:00:00")
    assert schedule.next_opening(at("2026-11-23T01:00:00")) == at("2026-11-23T02:00:00")


def test_a_window_past_midnight_and_several_windows():
    schedule = parse_schedule("23:30-00:30, 12:00-12:15")
    assert schedule.is_open(at("2026-11-23T23:45:00")) and schedule.is_open(at("2026-11-24T00:10:00"))
    assert schedule.is_open(at("2026-11-23T12:05:00")) and not schedule.is_open(at("2026-11-23T18:00:00"))
    assert schedule.next_opening(at("2026-11-23T13:00:00")) == at("2026-11-23T23:30:00")


def test_the_time_zone_is_the_schedules():
    schedule = parse_schedule("02:00-04:00", "Europe/Berlin")   # UTC+1 in November
    assert schedule.is_open(at("2026-11-23T01:30:00")) and not schedule.is_open(at("2026-11-23T03:30:00"))


@pytest.mark.parametrize("text, zone, message", [("2-4", "UTC", "HH:MM-HH:MM"), ("25:00-26:00", "UTC", "HH:MM"),
                                                  ("02:00-02:00", "UTC", "empty"),
                                                  ("02:00-04:00", "Mars/Olympus", "unknown time zone")])
def test_a_bad_schedule_is_refused(text, zone, message):
    with pytest.raises(ConfigError, match=message):
        MigrationSpec.from_table_arg("shop.orders", "ADD COLUMN c INT", cutover_window_schedule=text,
                                     cutover_timezone=zone)


def test_no_schedule_means_any_time():
    assert MigrationSpec("shop", "orders", "ADD COLUMN c INT").validate().schedule() is None
