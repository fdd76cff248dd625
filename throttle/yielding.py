"""Yield to the application: fewer concurrent copy and validation statements, and shorter ones, while
the application feels the work.

What the application feels is measured the way it feels it (throttle/app_latency.py: the commit latency
of a tiny write, ten times a second). Once a second the worst-but-one of those samples is compared
with the target: above it, the concurrency and the batch time are halved at once (down to one worker
and a quarter of the target batch time); well below it, one worker and a quarter more batch time come
back per second. This is the additive-increase / multiplicative-decrease rule of congestion control: the
work backs off as fast as the application suffers and returns slowly.

The target is `--max-app-latency`: a duration, `off`, or `auto` (the default): twice what the samples
showed before the work started, and at least AUTO_FLOOR_MS, so that the noise of an idle server does
not hold the work back. Init starts the capture only once that baseline is taken (`wait_for_baseline`): a
sample taken while the connector starts or the copy runs holds the tool's own load, and would raise the
target by what the application is to be spared (measured under a heavy load: baselines of 12–45 ms taken
beside the connector's start, where the application's own p99 was 4–6 ms; docs/benchmarks.md).

`auto` yields only to an application that is busy: one whose statements were in flight at least BUSY_AT
of the time over the second judged (throttle/app_activity.py). Without one, the latency the probe measures is
the work's own (its commits, on an otherwise idle server), and the work comes back as if it were well under
the target. A duration is a ceiling the operator set, kept whatever else runs.

Work held at its slowest for HELD_NOTE_S, the latency over the target in at least HELD_OVER_SHARE of the
seconds judged meanwhile, is told once per such stretch (`held_at_slowest`): on a server whose other load
(the application's, the capture's and the apply's) keeps the latency there, the yield buys the application
nothing and lengthens the work (measured on a saturated 2-core machine: 2.3–2.4 times the time, with more of
the application's transactions held back over the run; docs/benchmarks.md). The operator decides: the work
keeps yielding until told otherwise.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

AUTO_FACTOR = 2.0
AUTO_FLOOR_MS = 2.0
BUSY_AT = 0.25              # other sessions' statements in flight on average: below it, no application to yield to
MIN_COUNTS = 6              # counts of them a judged second needs to be called idle (throttle/app_activity.py)
BASELINE_SAMPLES = 20       # half a second of samples before the capture starts (throttle/app_latency.py)
RECOVER_BELOW = 0.6         # share of the target under which work is added back
MIN_TIME_SCALE = 0.25
WINDOW = 10                 # samples judged together: one second
WINDOW_S = 1.0              # ... or fewer, when they take that long
HELD_NOTE_S = 60.0          # held at the slowest this long, the latency mostly over the target: told once
HELD_OVER_SHARE = 0.75      # ... "mostly": this share of the seconds judged at the slowest
STRETCH_GAP_S = 5.0         # judged seconds further apart than this (the probe stopped or failing) are two stretches


def window_latency(samples: list[float]) -> float:
    """The worst-but-one sample of a full window: one outlier (a checkpoint, a pause elsewhere) is not a
    trend. A window cut short by slow samples is judged by its worst: those were the slow ones."""
    ordered = sorted(samples)
    return ordered[-2] if len(ordered) > WINDOW // 2 else ordered[-1]


def window_activity(counts: list[int | None]) -> float | None:
    """Other sessions' statements in flight on average over a window; None (the application is then taken to
    be busy) when a count could not be read, or when fewer than MIN_COUNTS were taken: a few say too little."""
    if len(counts) < MIN_COUNTS or None in counts:
        return None
    return sum(counts) / len(counts)


@dataclass(frozen=True)
class HeldAtSlowest:
    """A stretch of judged seconds that all left the work at its slowest, with the latency over the target in most."""

    seconds: float
    judged: int          # seconds judged in the stretch
    over: int            # ... with the latency over the target
    latency_ms: float    # the last second's
    target_ms: float

    def text(self) -> str:
        return (f"the copy has run at its slowest (one statement at a time, batches of {MIN_TIME_SCALE:.0%} of the "
                f"target time) for {self.seconds:.0f} s, and the application's write latency was over its target in "
                f"{self.over} of the {self.judged} seconds judged (last {self.latency_ms:.1f} ms against "
                f"{self.target_ms:.1f} ms, --max-app-latency): yielding has not kept it under, and at this pace "
                f"the copy takes longer while the capture and the apply go on loading the server")


class Yielding:
    """How many copy/validation statements may run at once, and how long each should take, right now."""

    def __init__(self, workers: int, target: float | str | None) -> None:
        """`target`: milliseconds, "auto" (from the baseline), or None (never yield)."""
        self.workers = workers
        self.mode = target
        self.target_ms: float | None = target if isinstance(target, float) else None
        self.baseline_ms: float | None = None
        self.allowed = workers
        self.time_scale = 1.0
        self.last_window_ms: float | None = None
        self.last_window_activity: float | None = None
        self._baseline: list[float] = []
        self._window: list[float] = []
        self._activity: deque[int | None] = deque(maxlen=3 * WINDOW)   # counts since the last judgement
        self._window_began: float | None = None
        self._running = 0
        self._slowest: tuple[float, float, int, int] | None = None   # first and last second judged, judged, over
        self._slowest_told = False
        self._changed = threading.Condition()
        self.on_judged: Callable[[Yielding], None] | None = None   # told after each judged second (the metrics)

    # measurement ---------------------------------------------------------------------------------
    def set_baseline(self, baseline_ms: float) -> None:
        """The application's latency before the work started (measured here, or by the coordinator)."""
        with self._changed:
            self.baseline_ms = baseline_ms
            if self.mode == "auto":
                self.target_ms = max(AUTO_FACTOR * baseline_ms, AUTO_FLOOR_MS)
            self._changed.notify_all()

    def needs_baseline(self) -> bool:
        """Whether the target still waits for the baseline (`auto`, not measured yet)."""
        return self.mode == "auto" and self.baseline_ms is None

    def wait_for_baseline(self, timeout_s: float, stopped: Callable[[], bool]) -> bool:
        """Block until the baseline is taken (True), `timeout_s` passed or `stopped()` (False)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.needs_baseline() and not stopped() and time.monotonic() < deadline:
                self._changed.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            return not self.needs_baseline()

    def sample(self, latency_ms: float, now: float | None = None) -> float | None:
        """Take one probe sample; returns the baseline the moment it is established (else None)."""
        now = time.monotonic() if now is None else now
        established = None
        with self._changed:
            if self.baseline_ms is None and self.mode == "auto":
                self._baseline.append(latency_ms)
                if len(self._baseline) >= BASELINE_SAMPLES:
                    established = window_latency(self._baseline)
                    self.set_baseline(established)
                    self._window_began = now
                return established
            self._window.append(latency_ms)
            if self._window_began is None:
                self._window_began = now
            if len(self._window) >= WINDOW or now - self._window_began >= WINDOW_S:
                self._judge(window_latency(self._window), window_activity(list(self._activity)), now)
                self._window, self._window_began = [], now
                self._activity.clear()
                if self.on_judged is not None:
                    self.on_judged(self)
        return established

    def count_others(self, count: int | None) -> None:
        """One count of the statements other sessions run (throttle/app_activity.py; None: it could not be read)."""
        with self._changed:
            self._activity.append(count)

    def restart_window(self) -> None:
        """Forget the second under way: the probe stopped sampling (a pause, an outage), and what it had is stale."""
        with self._changed:
            self._window, self._window_began = [], None
            self._activity.clear()
            self._slowest, self._slowest_told = None, False

    def _judge(self, latency_ms: float, activity: float | None, now: float) -> None:
        self.last_window_ms, self.last_window_activity = latency_ms, activity
        if self.target_ms is None:
            return
        idle = self._idle(activity)   # no application to yield to: the latency is the work's own
        over = latency_ms > self.target_ms and not idle
        if over:
            self.allowed = max(1, self.allowed // 2)
            self.time_scale = max(MIN_TIME_SCALE, self.time_scale / 2)
        elif idle or latency_ms < RECOVER_BELOW * self.target_ms:
            self.allowed = min(self.workers, self.allowed + 1)
            self.time_scale = min(1.0, self.time_scale * 1.25)
        if not self._at_slowest():
            self._slowest, self._slowest_told = None, False
        elif self._slowest is None or now - self._slowest[1] > STRETCH_GAP_S:
            self._slowest, self._slowest_told = (now, now, 1, int(over)), False
        else:
            first, _, judged, over_count = self._slowest
            self._slowest = (first, now, judged + 1, over_count + int(over))
        self._changed.notify_all()

    def _at_slowest(self) -> bool:
        return self.allowed == 1 and self.time_scale == MIN_TIME_SCALE

    def held_at_slowest(self) -> HeldAtSlowest | None:
        """Once per stretch, when every second judged for HELD_NOTE_S left the work at its slowest and at least
        HELD_OVER_SHARE of them found the latency over the target: what the operator should know, and may change
        (`stream-osc set`). The stretch ends at a second that lets work come back (the latency well under the
        target, or no application busy); it is measured from its first judged second to its last, and a gap of
        over STRETCH_GAP_S between two (the probe stopped or failing) begins a new one: seconds not judged never
        lengthen it."""
        with self._changed:
            if self._slowest is None or self._slowest_told or self.target_ms is None or self.last_window_ms is None:
                return None
            first, last, judged, over = self._slowest
            if last - first < HELD_NOTE_S or over < HELD_OVER_SHARE * judged:
                return None
            self._slowest_told = True
            return HeldAtSlowest(last - first, judged, over, self.last_window_ms, self.target_ms)

    def forget_stretch(self) -> None:
        """Begin no stretch earlier than now: the work it would speak of starts or ends here."""
        with self._changed:
            self._slowest, self._slowest_told = None, False

    def configure(self, workers: int, target: float | str | None) -> None:
        """New settings (`stream-osc set copy-workers=… max-app-latency=…`); the baseline is kept. Either one
        changed begins a new stretch at the slowest (held_at_slowest)."""
        with self._changed:
            if (workers, target) != (self.workers, self.mode):
                self._slowest, self._slowest_told = None, False
            self.workers, self.mode = workers, target
            self.target_ms = target if isinstance(target, float) else None
            if target == "auto" and self.baseline_ms is not None:
                self.set_baseline(self.baseline_ms)
            self.allowed = workers if self.target_ms is None else min(max(self.allowed, 1), workers)
            if self.target_ms is None:
                self.time_scale = 1.0
            self._changed.notify_all()

    def judges_activity(self) -> bool:
        """Whether samples need the other sessions' statements: `auto`, once the baseline is taken."""
        return self.mode == "auto" and self.baseline_ms is not None

    def _idle(self, activity: float | None) -> bool:
        """Whether, under `auto`, a second with this activity showed no application to yield to."""
        return self.mode == "auto" and activity is not None and activity < BUSY_AT

    # use -----------------------------------------------------------------------------------------
    def yielding(self) -> bool:
        return self.allowed < self.workers or self.time_scale < 1.0

    def reason(self) -> str | None:
        """Why the work runs below its settings, for `status` and the metrics; None when it does not. Read under
        the lock: the figures of one judged second, not of two."""
        with self._changed:
            target = self.target_ms
            if not self.yielding() or target is None:
                return None
            return (f"application write latency {self._against(target)} (--max-app-latency): {self.allowed} of "
                    f"{self.workers} workers, batches of {self.time_scale:.0%} of the target time")

    def _against(self, target: float) -> str:
        """The last second's latency as it stands to the target: the work is held back after it came under
        the target too, until it is well under (then the work comes back a step a second)."""
        latency = self.last_window_ms
        if latency is None:
            return f"not measured yet against {target:.1f} ms"
        activity = self.last_window_activity
        if self._idle(activity):
            return (f"{latency:.1f} ms against {target:.1f} ms, but no application busy "
                    f"({activity:.2f} statements of others at a time): work coming back")
        if latency > target:
            return f"{latency:.1f} ms over {target:.1f} ms"
        if latency < RECOVER_BELOW * target:
            return f"{latency:.1f} ms, back under {target:.1f} ms: work coming back"
        return f"{latency:.1f} ms, at or under {target:.1f} ms but not well under: held"

    @contextmanager
    def turn(self, stopped: Callable[[], bool], waiting: Callable[[], None] | None = None) -> Iterator[bool]:
        """Hold one of the `allowed` places while a statement runs; yields False (without a place) when
        `stopped()` became true while waiting. `waiting` runs about every half second of the wait, outside the
        lock (a copy worker renews its chunk's lease there, so that waiting for a place does not lose the chunk;
        a slow Redis must not hold up the probe's samples or the other workers' turns)."""
        placed = False
        while not placed:
            with self._changed:
                if stopped():
                    break
                if self._running < self.allowed:
                    self._running += 1
                    placed = True
                    break
                self._changed.wait(0.5)
                still = self._running >= self.allowed and not stopped()
            if waiting is not None and still:
                waiting()
        if not placed:
            yield False
            return
        try:
            yield True
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()


def never_yielding(workers: int) -> Yielding:
    """For work that must not be held back by the latency of others (and for tests of other parts)."""
    return Yielding(workers, None)

