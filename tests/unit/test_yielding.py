"""Copy and validation yield to the application's latency (throttle/yielding.py) with batches sized by time
(applier/pacing.py): pure logic, fed with samples."""
from __future__ import annotations

import threading

import pymysql
import pytest

from throttle import app_activity
from core.endpoints import ConfigError
from applier.pacing import MAX_ROWS, MIN_ROWS, BatchSizer
from core.spec import MigrationSpec
from throttle.yielding import AUTO_FLOOR_MS, BASELINE_SAMPLES, BUSY_AT, HELD_NOTE_S, MIN_COUNTS, WINDOW, Yielding
from tests.waiting import wait_for


def feed(yielding: Yielding, latency_ms: float, windows: int = 1, start: float = 0.0,
         others: list[int | None] | None = None) -> float:
    """Give `windows` full windows of samples of `latency_ms`, 0.1 s apart, each window's samples with the
    other sessions' statement counts `others` (one before each sample; default: none counted); returns the time
    reached."""
    now = start
    for _ in range(windows):
        for count in others if others is not None else [None] * WINDOW:
            if others is not None:
                yielding.count_others(count)
            now += 0.1
            yielding.sample(latency_ms, now)
    return now


def auto_with_baseline(workers: int, baseline_ms: float) -> Yielding:
    yielding = Yielding(workers, "auto")
    for _ in range(BASELINE_SAMPLES):
        yielding.sample(baseline_ms, 0.0)
    return yielding


IDLE = [0] * WINDOW                     # no other session ran a statement at any sample
TRICKLE = [1, 1] + [0] * (WINDOW - 2)   # 0.2 at a time: under BUSY_AT
BUSY = [1, 1, 1] + [0] * (WINDOW - 3)   # 0.3 at a time


@pytest.mark.parametrize("start_rows, target_s, rows, seconds, time_scale, expected", [
    pytest.param(5_000, 0.25, 5_000, 1.0, 1.0, 1_250, id="a slow batch makes the next one smaller at once"),
    pytest.param(1_000, 0.25, 1_000, 0.01, 1.0, 1_500,        # would ideally be 25,000 rows
                 id="a fast batch grows the next one only gradually"),
    pytest.param(5_000, 0.25, 10, 2.0, 1.0, 5_000,            # the last few rows of a range: says nothing
                 id="a range tail does not resize the batch"),
    pytest.param(5_000, 0.0, 5_000, 30.0, 1.0, 5_000, id="target zero keeps batches at the row count"),
    pytest.param(4_000, 0.5, 4_000, 0.5, 0.25, 1_000, id="yielding shortens the batch target"),
])
def test_the_next_batch_size(start_rows, target_s, rows, seconds, time_scale, expected):
    sizer = BatchSizer(start_rows=start_rows, target_s=target_s)
    sizer.observe(rows=rows, seconds=seconds, time_scale=time_scale)
    assert sizer.rows() == expected


def test_batch_sizes_stay_within_bounds():
    sizer = BatchSizer(start_rows=MAX_ROWS, target_s=0.25)
    sizer.observe(rows=MAX_ROWS, seconds=0.001)
    assert sizer.rows() == MAX_ROWS
    sizer.observe(rows=MAX_ROWS, seconds=10_000)
    assert sizer.rows() == MIN_ROWS


def test_auto_target_is_twice_the_baseline_with_a_floor():
    yielding = Yielding(4, "auto")
    for _ in range(BASELINE_SAMPLES):
        yielding.sample(5.0, 0.0)
    assert yielding.baseline_ms == 5.0 and yielding.target_ms == 10.0
    quiet = Yielding(4, "auto")
    for _ in range(BASELINE_SAMPLES):
        quiet.sample(0.2, 0.0)
    assert quiet.target_ms == AUTO_FLOOR_MS


def test_work_halves_while_the_application_suffers_and_returns_one_worker_at_a_time():
    yielding = Yielding(8, 10.0)
    now = feed(yielding, 50.0)
    assert (yielding.allowed, yielding.time_scale) == (4, 0.5)
    now = feed(yielding, 50.0, windows=3, start=now)
    assert yielding.allowed == 1 and yielding.time_scale == 0.25
    assert "1 of 8 workers" in yielding.reason() and "--max-app-latency" in yielding.reason()
    now = feed(yielding, 8.0, start=now)              # under the target but not well under: hold
    assert yielding.allowed == 1
    now = feed(yielding, 2.0, windows=2, start=now)
    assert yielding.allowed == 3
    feed(yielding, 2.0, windows=10, start=now)
    assert yielding.allowed == 8 and yielding.time_scale == 1.0 and yielding.reason() is None


@pytest.mark.parametrize("latency_ms, said", [
    (10.0, "10.0 ms, at or under 10.0 ms but not well under: held"),
    (6.0, "6.0 ms, at or under 10.0 ms but not well under: held"),
    (5.9, "5.9 ms, back under 10.0 ms: work coming back"),
])
def test_the_reason_says_whether_the_latency_is_over_the_target_or_back_under_it(latency_ms, said):
    yielding = Yielding(4, 10.0)
    now = feed(yielding, 50.0)
    assert yielding.reason().startswith("application write latency 50.0 ms over 10.0 ms (--max-app-latency): "
                                        "2 of 4 workers")
    feed(yielding, latency_ms, start=now)
    assert yielding.reason().startswith(f"application write latency {said} (--max-app-latency)")
    assert " over " not in yielding.reason()


def test_the_reason_before_any_second_was_judged_says_so():
    yielding = Yielding(4, 10.0)
    yielding.configure(8, 10.0)   # more workers asked for: 4 of 8 until the latency allows more
    assert yielding.reason().startswith("application write latency not measured yet against 10.0 ms")


def test_one_slow_outlier_in_a_window_does_not_hold_the_work_back():
    yielding = Yielding(4, 10.0)
    for i in range(WINDOW):
        yielding.sample(500.0 if i == 3 else 1.0, 0.1 * (i + 1))
    assert yielding.allowed == 4


def test_a_sample_that_took_seconds_is_judged_without_waiting_for_a_full_window():
    yielding = Yielding(4, 10.0)
    yielding.sample(1.0, 0.1)
    yielding.sample(3_000.0, 3.1)       # the probe waited three seconds: the window is judged now
    assert yielding.allowed == 2


@pytest.mark.parametrize("others", [IDLE, TRICKLE], ids=["nothing else running", "a trickle of statements"])
def test_auto_does_not_yield_to_its_own_latency_while_no_application_is_busy(others):
    """On an idle server the probe's write waits for the copy's own commits: nobody to protect."""
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    feed(yielding, 50.0, windows=3, others=others)
    assert (yielding.allowed, yielding.time_scale) == (4, 1.0)
    assert yielding.reason() is None


def test_the_counts_fed_are_busy_and_not_busy_as_named():
    assert sum(BUSY) / WINDOW >= BUSY_AT > sum(TRICKLE) / WINDOW


@pytest.mark.parametrize("others", [BUSY, [None] * WINDOW, IDLE[:-1] + [None]],
                         ids=["busy", "sessions not read", "one count of the second not read"])
def test_auto_yields_to_a_busy_application_and_when_it_cannot_tell(others):
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    feed(yielding, 50.0, others=others)
    assert (yielding.allowed, yielding.time_scale) == (2, 0.5)


@pytest.mark.parametrize("counts, judged", [(MIN_COUNTS - 1, (2, 0.5)), (MIN_COUNTS, (4, 1.0))],
                         ids=["too few counts: busy", "just enough: idle"])
def test_a_second_needs_enough_counts_to_be_called_idle(counts, judged):
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    for i in range(counts):                       # the counter fell behind: fewer counts than samples
        yielding.count_others(0)
        yielding.sample(50.0, 0.1 * (i + 1))
    yielding.sample(50.0, 1.0)                    # the second is over: judged
    assert yielding.last_window_ms == 50.0
    assert (yielding.allowed, yielding.time_scale) == judged


def test_a_slow_probe_write_does_not_thin_the_counts_of_its_second():
    """The counts come on their own schedule: a second judged on one slow write is judged by them."""
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    for _ in range(WINDOW):
        yielding.count_others(0)
    yielding.sample(1_500.0, 1.5)                # the probe's one write of the second took 1.5 s
    assert (yielding.last_window_ms, yielding.last_window_activity) == (1_500.0, 0.0)   # judged, by the counts
    assert (yielding.allowed, yielding.time_scale) == (4, 1.0)


def test_counts_from_before_a_pause_do_not_judge_the_second_after_it():
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    for _ in range(WINDOW):
        yielding.count_others(0)
    yielding.restart_window()                    # the probe stopped sampling: paused
    feed(yielding, 50.0, start=100.0)            # nothing counted since: not called idle
    assert (yielding.allowed, yielding.time_scale) == (2, 0.5)


def test_work_held_back_comes_back_once_the_application_is_gone():
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    now = feed(yielding, 50.0, windows=3, others=BUSY)
    assert yielding.allowed == 1
    now = feed(yielding, 50.0, others=IDLE, start=now)     # still slow, but only the work's own commits
    assert yielding.allowed == 2
    assert yielding.reason().startswith("application write latency 50.0 ms against 4.0 ms, but no application "
                                        "busy (0.00 statements of others at a time): work coming back")
    feed(yielding, 50.0, windows=8, others=IDLE, start=now)
    assert (yielding.allowed, yielding.time_scale) == (4, 1.0)


def test_work_held_at_its_slowest_with_the_latency_over_the_target_is_told_once_after_a_minute():
    yielding = auto_with_baseline(4, baseline_ms=2.0)
    now = feed(yielding, 30.0, windows=2, others=BUSY)        # 4 -> 2 -> 1 workers, 1 -> 0.5 -> 0.25: slowest now
    now = feed(yielding, 30.0, windows=int(HELD_NOTE_S) - 1, start=now, others=BUSY)
    assert yielding.held_at_slowest() is None                  # 59 s of the stretch
    now = feed(yielding, 30.0, windows=2, start=now, others=BUSY)
    held = yielding.held_at_slowest()
    assert held is not None and round(held.seconds) == 61 and (held.judged, held.over) == (62, 62)
    assert (held.latency_ms, held.target_ms) == (30.0, 4.0)
    assert "for 61 s" in held.text() and "in 62 of the 62 seconds judged (last 30.0 ms against 4.0 ms" in held.text()
    assert yielding.held_at_slowest() is None                  # once
    feed(yielding, 30.0, windows=120, start=now, others=BUSY)
    assert yielding.held_at_slowest() is None                  # once for the whole stretch, however long


def test_a_second_that_lets_work_come_back_ends_the_stretch_and_the_next_one_is_told_again():
    yielding = Yielding(4, 10.0)
    now = feed(yielding, 50.0, windows=70, start=0.0)
    assert yielding.held_at_slowest() is not None
    now = feed(yielding, 2.0, start=now)                       # well under the target: a worker comes back
    assert yielding.allowed == 2
    now = feed(yielding, 50.0, windows=int(HELD_NOTE_S), start=now)   # slowest again at its first second
    assert yielding.held_at_slowest() is None
    feed(yielding, 50.0, windows=2, start=now)
    assert yielding.held_at_slowest() is not None


@pytest.mark.parametrize("over_of_ten, told", [(8, True), (7, False)])
def test_seconds_under_the_target_but_not_well_under_keep_the_stretch_and_count_against_telling(over_of_ten, told):
    yielding = Yielding(4, 10.0)
    now = feed(yielding, 50.0, windows=2, start=0.0)           # slowest
    for _ in range(9):
        now = feed(yielding, 50.0, windows=over_of_ten, start=now)
        now = feed(yielding, 8.0, windows=10 - over_of_ten, start=now)   # held, not coming back
    assert yielding.allowed == 1 and yielding.time_scale == 0.25
    held = yielding.held_at_slowest()
    assert (held is not None) == told
    if told:
        assert (held.judged, held.over) == (91, 2 + 9 * over_of_ten - 1)


def test_seconds_not_judged_do_not_lengthen_the_stretch():
    yielding = Yielding(4, 10.0)
    now = feed(yielding, 50.0, windows=10, start=0.0)
    now = feed(yielding, 50.0, windows=55, start=now + 3600.0)   # an hour unjudged: a probe stopped or failing
    assert yielding.held_at_slowest() is None                  # 55 s since the gap, not an hour and a minute
    feed(yielding, 50.0, windows=7, start=now)
    assert yielding.held_at_slowest() is not None


def test_new_settings_or_a_pause_begin_a_new_stretch_and_the_same_settings_do_not():
    yielding = Yielding(4, 10.0)
    now = feed(yielding, 50.0, windows=70, start=0.0)
    assert yielding.held_at_slowest() is not None
    yielding.configure(4, 10.0)                                # an unrelated `stream-osc set`: the same stretch
    now = feed(yielding, 50.0, windows=70, start=now)
    assert yielding.held_at_slowest() is None
    yielding.configure(4, 20.0)
    now = feed(yielding, 50.0, windows=30, start=now)
    assert yielding.held_at_slowest() is None                  # 30 s since the new target
    now = feed(yielding, 50.0, windows=40, start=now)
    assert yielding.held_at_slowest() is not None
    yielding.restart_window()                                  # a pause
    now = feed(yielding, 50.0, windows=int(HELD_NOTE_S) - 1, start=now + 5.0)
    assert yielding.held_at_slowest() is None
    now = feed(yielding, 50.0, windows=3, start=now)
    assert yielding.held_at_slowest() is not None
    yielding.forget_stretch()                                  # the copy ends (or begins)
    now = feed(yielding, 50.0, windows=int(HELD_NOTE_S) - 1, start=now)
    assert yielding.held_at_slowest() is None
    feed(yielding, 50.0, windows=3, start=now)
    assert yielding.held_at_slowest() is not None


def test_nothing_is_told_while_no_application_is_busy_or_with_off():
    idle = auto_with_baseline(1, baseline_ms=2.0)
    now = feed(idle, 30.0, windows=2, others=BUSY)             # one worker: slowest once the batch time is
    assert idle.time_scale == 0.25
    for _ in range(70):                                        # a busy second, then an idle one, and so on
        now = feed(idle, 30.0, start=now, others=IDLE)
        now = feed(idle, 30.0, start=now, others=BUSY)
    assert idle.held_at_slowest() is None
    off = Yielding(4, None)
    feed(off, 500.0, windows=70, start=0.0)
    assert off.held_at_slowest() is None


def test_a_duration_target_is_kept_whatever_else_runs():
    yielding = Yielding(4, 10.0)
    feed(yielding, 50.0, others=IDLE)
    assert (yielding.allowed, yielding.time_scale) == (2, 0.5)


def test_off_never_yields():
    yielding = Yielding(4, None)
    feed(yielding, 10_000.0, windows=5)
    assert yielding.allowed == 4 and yielding.reason() is None


def test_only_the_allowed_number_of_statements_run_at_once():
    yielding = Yielding(4, 10.0)
    feed(yielding, 50.0, windows=2)
    assert yielding.allowed == 1
    inside, most, lock, release = [0], [0], threading.Lock(), threading.Event()
    turns: list[bool] = []

    def statement() -> None:
        with yielding.turn(lambda: False) as allowed:
            with lock:
                turns.append(allowed)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=statement) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not [thread for thread in threads if thread.is_alive()]
    assert turns == [True] * 4
    assert most[0] == 1


def test_a_stopped_run_leaves_the_wait_for_a_turn():
    yielding = Yielding(2, 10.0)
    feed(yielding, 50.0, windows=2)
    with yielding.turn(lambda: False):
        with yielding.turn(lambda: True) as allowed:
            assert allowed is False


def test_new_settings_keep_the_baseline():
    yielding = Yielding(4, "auto")
    yielding.set_baseline(3.0)
    yielding.configure(8, "auto")
    assert yielding.target_ms == 6.0 and yielding.workers == 8
    yielding.configure(8, None)
    assert yielding.allowed == 8 and yielding.reason() is None


@pytest.mark.parametrize("text, expected", [("auto", "auto"), ("off", None), ("10ms", 10.0), ("0.5s", 500.0)])
def test_max_app_latency_values(text, expected):
    assert MigrationSpec("d", "t", "ADD x INT", max_app_latency=text).validate().app_latency_target() == expected


@pytest.mark.parametrize("field, text", [("max_app_latency", "fast"), ("max_app_latency", "0ms"),
                                         ("target_batch_time", "soon")])
def test_bad_pacing_options_are_refused(field, text):
    with pytest.raises(ConfigError, match=field.replace("_", "-")):
        MigrationSpec("d", "t", "ADD x INT", **{field: text}).validate()


def test_a_worker_waiting_for_its_turn_keeps_renewing_what_it_holds():
    yielding = Yielding(2, 10.0)
    feed(yielding, 50.0, windows=2)
    assert yielding.allowed == 1
    renewed = threading.Event()
    with yielding.turn(lambda: False):
        waiter = threading.Thread(target=lambda: yielding.turn(lambda: renewed.is_set(),
                                                               waiting=renewed.set).__enter__())
        waiter.start()
        waiter.join(10)
    assert renewed.is_set() and not waiter.is_alive()


def test_the_copy_waits_for_the_baseline_taken_before_it():
    """A baseline sampled while the copy runs would hold the copy's own load and raise the target."""
    yielding = Yielding(4, "auto")
    assert yielding.needs_baseline()
    assert not yielding.wait_for_baseline(0.05, lambda: False), "no baseline: the wait ends at its timeout"
    taken = threading.Timer(0.05, lambda: [yielding.sample(1.5, 0.01 * i) for i in range(BASELINE_SAMPLES)])
    taken.start()
    assert yielding.wait_for_baseline(10.0, lambda: False)
    taken.join()
    assert not yielding.needs_baseline() and yielding.target_ms == 3.0


def test_a_fixed_target_or_off_needs_no_baseline_and_a_stop_ends_the_wait():
    assert not Yielding(4, 10.0).needs_baseline() and not Yielding(4, None).needs_baseline()
    assert Yielding(4, 10.0).wait_for_baseline(10.0, lambda: False)
    assert not Yielding(4, "auto").wait_for_baseline(10.0, lambda: True)


def test_the_renewal_while_waiting_for_a_turn_holds_no_lock():
    """A slow Redis in the lease renewal must not hold up the probe's samples or the other workers' turns."""
    yielding = Yielding(2, 10.0)
    feed(yielding, 50.0, windows=2)
    assert yielding.allowed == 1
    stop = threading.Event()
    renewals: list[bool] = []

    def renew() -> None:
        sampled = threading.Thread(target=lambda: yielding.sample(1.0))   # takes the lock
        sampled.start()
        sampled.join(5)
        renewals.append(not sampled.is_alive())
        stop.set()
    with yielding.turn(lambda: False):
        with yielding.turn(stop.is_set, waiting=renew) as allowed:
            assert allowed is False
    assert renewals == [True]


class Session:
    """What the activity counter does with its session: close it."""

    def __init__(self) -> None:
        self.open = True

    def close(self) -> None:
        self.open = False


class RecordingYielding(Yielding):
    """An `auto` Yielding past its baseline that records the counts it is given."""

    def __init__(self) -> None:
        super().__init__(4, "auto")
        self.set_baseline(2.0)
        self.counts: list[int | None] = []

    def count_others(self, count: int | None) -> None:
        self.counts.append(count)
        super().count_others(count)


def test_a_failing_count_is_given_as_none_logged_once_and_the_counter_goes_on(monkeypatch, caplog):
    """A count that cannot be read counts as busy, and no failure ends the counter (throttle/app_activity.py)."""
    failures = [RuntimeError("no process list"), pymysql.err.OperationalError(1227, "denied")]

    def count(conn):
        if failures:
            raise failures.pop()
        return [41, 42]
    monkeypatch.setattr(app_activity, "sessions_of_others_running", count)
    monkeypatch.setattr(app_activity, "RETRY_EVERY_S", 0.01)
    yielding = RecordingYielding()
    counter = app_activity.ActivityCounter(lambda: Session(), yielding).start()
    try:
        wait_for(lambda: 2 in yielding.counts, 10, "a count after the failures", every_s=0.01)
        assert yielding.counts[:3] == [None, None, 2] and counter.thread.is_alive()
    finally:
        counter.stop()
    assert caplog.text.count("cannot count the server's running sessions") == 1


def test_nothing_is_counted_while_paused_and_the_session_is_let_go(monkeypatch):
    """A pause may outlast the server's idle timeout: the counter's session is closed, and opened again after."""
    paused, looks = threading.Event(), []
    sessions: list[Session] = []

    def is_paused() -> bool:
        looks.append(paused.is_set())
        return looks[-1]

    def connect() -> Session:
        sessions.append(Session())
        return sessions[-1]
    monkeypatch.setattr(app_activity, "sessions_of_others_running", lambda conn: [])
    yielding = RecordingYielding()
    counter = app_activity.ActivityCounter(connect, yielding, paused=is_paused).start()
    try:
        wait_for(lambda: len(yielding.counts) >= 2, 10, "counts while running", every_s=0.01)
        paused.set()
        wait_for(lambda: looks.count(True) >= 3, 10, "three looks at the pause", every_s=0.01)
        counted = len(yielding.counts)
        assert not sessions[0].open
        wait_for(lambda: looks.count(True) >= 6, 10, "three more looks at the pause", every_s=0.01)
        assert len(yielding.counts) == counted, "counted while paused"
        paused.clear()
        wait_for(lambda: len(yielding.counts) > counted, 10, "counts again after the pause", every_s=0.01)
        assert len(sessions) == 2 and sessions[1].open
    finally:
        counter.stop()

