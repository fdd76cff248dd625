"""The coordinator's loops with fakes (no services): a pause is waited out and an abort ends it, a lock given up
to the throttle waits longer each time, cutover attempts back off and give up after --cutover-attempts (throttled
locks and holders not counted), and a `stream-osc cutover` request opens a closed window, taken up once."""
from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from core.spec import MigrationSpec
from core.stages import Stage, Status
from cutover.swap import CutoverResult
from migration.coordination import Coordination, MigrationStopped
from migration.cutover_loop import CutoverLoop
from migration.supervision import Supervisor

SPEC = MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT").validate()
CTX = SimpleNamespace(migration=SimpleNamespace(id=7, connector="c"), pair=SimpleNamespace(remote=False))


class FakeClock:
    """Time that moves only when slept through."""

    def __init__(self, at: datetime = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)) -> None:
        self.t, self.at, self.slept = 1000.0, at, []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def now(self) -> datetime:
        return self.at


class FakeStore:
    def __init__(self, statuses: list[str] | None = None) -> None:
        self.statuses = statuses or []
        self.stages: list[tuple[Stage, dict]] = []
        self.requested = False

    def status(self, migration_id: int) -> str:
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    def enter_stage(self, migration_id: int, stage: Stage, **values: object) -> None:
        self.stages.append((stage, values))

    def cutover_requested(self, migration_id: int) -> bool:
        return self.requested

    def clear_cutover_request(self, migration_id: int) -> None:
        self.requested = False


def shared(spec: MigrationSpec = SPEC, store: FakeStore | None = None) -> Coordination:
    said: list[str] = []
    metrics = SimpleNamespace(stage=lambda stage: None, cutover_attempt=lambda swapped, ms: None)
    return Coordination(endpoints=None, spec=spec, progress=SimpleNamespace(say=said.append, said=said),
                        metrics=metrics, conn=None, store=store or FakeStore(), info=SimpleNamespace(is_mariadb=True),
                        connect=None, lease=SimpleNamespace(owner="here", lost=threading.Event()), yielding=None,
                        clock=FakeClock())


class FakeWorkers:
    def __init__(self) -> None:
        self.appliers, self.checks = None, 0

    def start_appliers(self, ctx) -> None:
        self.appliers = "running"

    def stop_appliers(self, raise_error: bool = True) -> None:
        self.appliers = None

    def raise_if_failed(self, ctx) -> None:
        self.checks += 1


def supervisor(coordination: Coordination, workers: FakeWorkers | None = None) -> Supervisor:
    watched = Supervisor(coordination, workers or FakeWorkers())
    watched.health_checks = 0
    def check_health(ctx) -> None:
        watched.health_checks += 1
    watched.check_health = check_health
    return watched


def test_a_pause_is_waited_out_and_said_once():
    coordination = shared(store=FakeStore([Status.PAUSED, Status.PAUSED, Status.PAUSED, Status.RUNNING]))
    watched = supervisor(coordination)
    watched.hold_while_paused(CTX)
    said = coordination.progress.said
    assert said[0].startswith("paused: no writes until `stream-osc resume --table shop.orders`")
    assert said[1:] == ["resumed"] and watched.health_checks == 3 and coordination.clock.slept == [0.5] * 3


def test_an_abort_during_a_pause_stops_the_run_for_good():
    watched = supervisor(shared(store=FakeStore([Status.PAUSED, Status.ABORTED])))
    with pytest.raises(MigrationStopped, match="was aborted") as stopped:
        watched.hold_while_paused(CTX)
    assert not stopped.value.resumable


@pytest.mark.parametrize("times, waited", [(1, 2), (3, 8), (5, 30), (9, 30)])
def test_a_postponed_lock_waits_longer_each_time_up_to_30_s(times, waited):
    coordination, workers = shared(), FakeWorkers()
    watched = supervisor(coordination, workers)
    watched.postpone(CTX, "cutover: held", times)
    assert sum(coordination.clock.slept) == waited
    assert workers.checks == watched.health_checks == waited / 0.5   # failures and health looked at meanwhile
    assert coordination.progress.said == [f"cutover: held; next try in {waited} s at the earliest"]


class FakeCutover:
    def __init__(self, results: list[CutoverResult]) -> None:
        self.results, self.attempts = results, 0

    def refresh_statistics(self) -> float:
        return 0.01

    def attempt(self, window_s: float, owner: str) -> CutoverResult:
        self.attempts += 1
        return self.results.pop(0)


class FakeSupervisor:
    def __init__(self) -> None:
        self.postponed: list[int] = []

    def hold_while_paused(self, ctx) -> None:
        pass

    def hold_while_throttled(self, ctx, stage: str) -> bool:
        return False

    def postpone(self, ctx, why: str, times: int) -> None:
        self.postponed.append(times)

    def check_while_waiting(self, ctx) -> None:
        pass


def cutover_loop(coordination: Coordination) -> CutoverLoop:
    lag = SimpleNamespace(wait_for_lag=lambda ctx, limit, look_for_blockers=False: 0,
                          keep_in_sync_until=lambda ctx, ready, event, **fields: None)
    loop = CutoverLoop(coordination, FakeSupervisor(), FakeWorkers(), lag, SimpleNamespace(saw=lambda *a: None))
    loop.wait_for_blockers = lambda ctx, stage: None
    return loop


ROLLED_BACK = CutoverResult(False, 3100.0, 0, reason="drain did not finish")


def test_attempts_back_off_and_give_up_after_cutover_attempts():
    coordination = shared(replace(SPEC, cutover_attempts=4))
    loop = cutover_loop(coordination)
    cutover = FakeCutover([ROLLED_BACK] * 4)
    with pytest.raises(MigrationStopped, match="did not fit the 3.0 s window in 4 attempts") as stopped:
        loop.cut_over(CTX, cutover)
    assert stopped.value.resumable and cutover.attempts == 4
    assert coordination.clock.slept == [2, 4, 8, 16]
    assert coordination.store.stages == []


def test_throttled_locks_and_holders_are_not_counted_as_attempts():
    coordination = shared(replace(SPEC, cutover_attempts=2))
    loop = cutover_loop(coordination)
    throttled = CutoverResult(False, 0.0, 0, reason="Threads_running=30 >= 25 (--max-load)", throttled=True)
    held = CutoverResult(False, 0.0, 0, reason="a session holds the table", blockers=("b",))
    swapped = CutoverResult(True, 120.0, 5, locked_at=1.0)
    cutover = FakeCutover([throttled, throttled, ROLLED_BACK, held, throttled, swapped])
    loop.cut_over(CTX, cutover)
    assert cutover.attempts == 6 and loop.supervisor.postponed == [1, 2, 1]   # the count starts over after a lock
    assert coordination.clock.slept == [2]   # one rolled-back attempt's back-off
    assert coordination.store.stages == [(Stage.CLEANUP, {"cutover_blocked_ms": 120, "cutover_at": 1.0})]
    assert coordination.progress.said[-1].startswith("cutover: swapped shop.orders")


def test_a_cutover_request_opens_a_closed_window_and_is_taken_up_once():
    spec = replace(SPEC, cutover_window_schedule="02:00-03:00")
    coordination = shared(spec)
    loop = cutover_loop(coordination)
    assert not loop.window_open(CTX)   # noon, outside 02:00-03:00
    coordination.store.requested = True
    assert loop.window_open(CTX) and coordination.cutover_now and not coordination.store.requested
    assert coordination.progress.said == ["cutover: asked for by `stream-osc cutover`"]
    assert loop.window_open(CTX) and len(coordination.progress.said) == 1
