"""Copy batches sized by time, not rows (as Spirit's target chunk time).

A batch is one statement the application's writes may queue behind (its row locks, its share of the
binlog group commit), so what must stay bounded is how long it runs, and that changes with the load
and the rows' width. After each batch the next one is sized so it would have taken the target time:
shrinking at once when a batch ran long, growing at most by GROWTH per batch so one quick batch on a
quiet moment cannot jump to a huge one.
"""
from __future__ import annotations

MIN_ROWS = 50
MAX_ROWS = 100_000
GROWTH = 1.5
PARTIAL = 0.5   # a batch with fewer rows than this share of its size (a range's tail) says little about speed


class BatchSizer:
    """The row count of a copy worker's next batch; one per worker, so each follows what it sees."""

    def __init__(self, start_rows: int, target_s: float) -> None:
        self.start_rows = start_rows
        self.target_s = target_s
        self.size = float(start_rows)

    def restart(self, start_rows: int, target_s: float) -> None:
        """Start again from new settings (`stream-osc set batch-size=… target-batch-time=…`)."""
        if (start_rows, target_s) != (self.start_rows, self.target_s):
            self.__init__(start_rows, target_s)

    def rows(self) -> int:
        return max(1, int(self.size))

    def observe(self, rows: int, seconds: float, time_scale: float = 1.0) -> None:
        """Learn from a batch that wrote `rows` rows in `seconds`; `time_scale` (0..1) shortens the target
        while the application is feeling the work (throttle/yielding.py). A target of 0 keeps the size fixed."""
        if self.target_s <= 0 or rows < PARTIAL * self.size or seconds <= 0:
            return
        ideal = rows * (self.target_s * time_scale) / seconds
        self.size = min(max(ideal, MIN_ROWS), self.size * GROWTH, MAX_ROWS)
