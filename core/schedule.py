"""Cutover windows: the times of day at which a migration may swap its tables (`--cutover-window-schedule`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.endpoints import ConfigError

_WINDOW = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*-\s*([01]?\d|2[0-3]):([0-5]\d)\s*$")


@dataclass(frozen=True)
class CutoverSchedule:
    """Daily windows in one time zone; a window whose end is before its start runs past midnight."""

    windows: tuple[tuple[time, time], ...]
    zone: ZoneInfo
    text: str

    def is_open(self, now: datetime) -> bool:
        """True when `now` (aware) falls inside a window."""
        local = now.astimezone(self.zone).time()
        return any(start <= local < end if start < end else (local >= start or local < end)
                   for start, end in self.windows)

    def next_opening(self, now: datetime) -> datetime:
        """When the next window opens after `now` (aware; in the schedule's zone)."""
        local = now.astimezone(self.zone)
        candidates = [datetime.combine(local.date() + timedelta(days=day), start, self.zone)
                      for day in (0, 1) for start, _ in self.windows]
        return min(c for c in candidates if c > local)

    def describe(self) -> str:
        return f"{self.text} ({self.zone.key})"


def parse_schedule(text: str, zone: str = "UTC") -> CutoverSchedule | None:
    """"02:00-04:00,13:30-14:00" in the time zone `zone` (an IANA name); None for an empty schedule.

    ConfigError on a malformed window, an empty one (start equal to end) or an unknown time zone.
    """
    try:   # (first: a zone given without a schedule is refused too, not silently unused)
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {zone!r} for --cutover-timezone (use an IANA name such as "
                          "Europe/Berlin or UTC)") from None
    if not text.strip():
        return None
    windows = []
    for part in text.split(","):
        match = _WINDOW.match(part)
        if match is None:
            raise ConfigError(f"invalid cutover window {part.strip()!r}: use HH:MM-HH:MM, e.g. 02:00-04:00")
        start, end = time(int(match[1]), int(match[2])), time(int(match[3]), int(match[4]))
        if start == end:
            raise ConfigError(f"cutover window {part.strip()!r} is empty")
        windows.append((start, end))
    return CutoverSchedule(tuple(windows), tz, ",".join(p.strip() for p in text.split(",")))
