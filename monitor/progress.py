"""Progress shown while a migration runs: a bar with rows, rate and ETA during copy, then lag and results."""
from __future__ import annotations

import sys
import time
from typing import TextIO
from core.state_records import Chunk


def format_duration(seconds: float) -> str:
    """A duration as a terminal shows it, in its two largest units as gh-ost prints them: 3d04h, 1h02m, 3m05s, 42s.
    The one helper for every duration shown to a person (progress line, `status`, `list`); JSON keeps seconds."""
    seconds = max(round(seconds), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def bar(fraction: float, width: int = 30) -> str:
    filled = int(round(max(0.0, min(fraction, 1.0)) * width))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def copy_fraction(chunks: list[Chunk], chunk_rows: int) -> float:
    """Share of the bulk copy done.

    Chunks are planned to hold `chunk_rows` rows each, so a chunk's part is its rows copied over
    that; key spans are not used because keys can be sparse (one far-away key would stretch them).
    """
    if not chunks:
        return 1.0
    parts = [1.0 if c.done else min(c.rows_copied / chunk_rows, 0.99) for c in chunks]
    return sum(parts) / len(parts)


class CopyRate:
    """Rows/s and ETA from successive (time, done fraction, rows) samples."""

    def __init__(self) -> None:
        self.first: tuple[float, float, int] | None = None
        self.last: tuple[float, float, int] | None = None

    def sample(self, fraction: float, rows: int, now: float | None = None) -> tuple[float | None, float | None]:
        """Record a sample; return (rows per second, seconds left), each None while not known (the first
        sample gives no rate)."""
        now = time.monotonic() if now is None else now
        if self.first is None:
            self.first = (now, fraction, rows)
        self.last = (now, fraction, rows)
        elapsed = now - self.first[0]
        if elapsed <= 0:
            return None, None
        rate = (rows - self.first[2]) / elapsed
        frac_rate = (fraction - self.first[1]) / elapsed
        eta = (1.0 - fraction) / frac_rate if frac_rate > 0 else None
        return rate, eta


class Progress:
    """Writes one status line at a time: rewritten in place on a terminal, appended (throttled) otherwise."""

    def __init__(self, stream: TextIO = sys.stderr, quiet: bool = False, interval_s: float | None = None) -> None:
        self.stream = stream
        self.quiet = quiet
        self.tty = stream.isatty()
        self.interval = interval_s if interval_s is not None else (0.5 if self.tty else 5.0)
        self.last_write = 0.0
        self.open_line = False

    def _status(self, text: str, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self.last_write < self.interval:
            return
        self.last_write = now
        if self.tty:
            self.stream.write("\r\033[K" + text)
            self.open_line = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def say(self, text: str) -> None:
        """A permanent line (stage changes, results)."""
        if self.quiet:
            return
        if self.open_line:
            self.stream.write("\n")
            self.open_line = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def copy(self, fraction: float, rows: int, chunks_done: int, chunks_total: int, rate: float | None = None,
             eta: float | None = None, force: bool = False) -> None:
        """The copy line; `rate` and `eta` come from the coordinator's one CopyRate (MigrationMetrics)."""
        eta_text = format_duration(eta) if eta is not None else "?"
        rate_text = f"{rate:,.0f}" if rate is not None else "?"
        self._status(f"copy {bar(fraction)} {fraction * 100:5.1f}%  {rows:,} rows  {rate_text} rows/s  "
                     f"chunks {chunks_done}/{chunks_total}  ETA {eta_text}", force)

    def apply(self, lag_events: int, applied_events: int, lag_seconds: float | None, force: bool = False) -> None:
        secs = f"~{lag_seconds:.1f}s" if lag_seconds is not None else "?"
        self._status(f"apply  lag {lag_events:,} events ({secs})  applied {applied_events:,} events", force)
