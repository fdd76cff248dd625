"""Every deadlock during a data test, attributed from the server's own report, and the application's lock-wait
timeouts counted (invariant 10: the tool gives way, the application never does).

Writers in data tests never retry: a transaction the server refused for a lock conflict (1213 deadlock, 1205
lock-wait timeout) is simply not acknowledged, so it is not in their record, and it is noted as a `Refusal`.
A `ConflictWatch` notes the position of the server's error log when it starts; `attribute` reads the deadlock
reports written since (monitor/deadlocks.py) on the test's schemas (other tests may share the server):

- one in which a stream-osc statement and an application transaction took part is a problem: the test fails,
  naming the statements;
- one between the tool's own sessions alone (two appliers on the new table) is counted: the server rolls one
  back and it retries, and no application transaction is in it;
- one between application transactions alone is reported (a warning naming the statements), not failed;
- a writer's 1213 that no report on those schemas explains is a problem (the refusal cannot be attributed);
- 1205s are in no report: they are counted, and against the same workload alone where the test has measured
  it (`beyond_alone`).

The embedded stack's server writes every deadlock to its error log (`innodb_print_all_deadlocks`, stack/mariadb.py;
`.run/mariadb.log`). Against other endpoints the watch turns the setting on with SET GLOBAL where it may, and reads
the file named by STREAM_OSC_ERROR_LOG; without one it says that it cannot attribute, and every 1213 a writer met
is then a problem.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from core.db import connect, query
from core.endpoints import ENV_KEYS, MySQLAddress
from monitor.deadlocks import Deadlock, ErrorLog, parse_deadlocks
from stack.config import StackConfig

DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205
LOCK_CONFLICTS = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})
ERROR_LOG_ENV = "STREAM_OSC_ERROR_LOG"


class ApplicationDeadlock(UserWarning):
    """A deadlock between application transactions alone during a data test: reported, not failed."""


@dataclass(frozen=True)
class Refusal:
    """An application transaction the server refused for a lock conflict: not acknowledged, never retried."""

    code: int            # 1213 or 1205
    at: float            # time.monotonic() when refused
    thread_id: int       # the session's id on the server (a deadlock report names it)
    doing: str           # what the writer was doing

    def __str__(self) -> str:
        kind = "deadlock victim" if self.code == DEADLOCK else "lock-wait timeout"
        return f"{kind} (error {self.code}) in session {self.thread_id}: {self.doing}"


def refusal(exc: pymysql.err.MySQLError, conn: pymysql.connections.Connection, doing: str) -> Refusal | None:
    """The lock conflict `exc` is, as a Refusal of `conn`'s transaction; None for any other error."""
    code = exc.args[0] if exc.args else None
    if code not in LOCK_CONFLICTS:
        return None
    return Refusal(code, time.monotonic(), conn.thread_id(), doing)


def source_error_log() -> ErrorLog:
    """STREAM_OSC_ERROR_LOG if set, else the embedded stack's (when the tests run against it)."""
    named = os.environ.get(ERROR_LOG_ENV)
    if named:
        return ErrorLog(Path(named))
    if any(os.environ.get(var) not in (None, StackConfig().env()[var]) for var in ENV_KEYS.values()):
        return ErrorLog(None, f"the server's error log is not readable here (set {ERROR_LOG_ENV} to its path)")
    return ErrorLog(StackConfig().log_file("mariadb"))


_reports_on: dict[tuple[str, int], str | None] = {}


def deadlock_reports_on(addr: MySQLAddress) -> str | None:
    """Make sure the server writes every deadlock to its error log (SET GLOBAL if it does not yet); None when it
    does, else why not. Asked once per server and process."""
    where = (addr.host, addr.port)
    if where not in _reports_on:
        conn = connect(addr)
        try:
            if not int(query(conn, "SELECT @@GLOBAL.innodb_print_all_deadlocks")[0][0]):
                query(conn, "SET GLOBAL innodb_print_all_deadlocks = ON")
            _reports_on[where] = None
        except pymysql.err.MySQLError as exc:
            _reports_on[where] = f"innodb_print_all_deadlocks is off and could not be turned on ({exc})"
        finally:
            conn.close()
    return _reports_on[where]


@dataclass
class Attribution:
    """What a watch found: the deadlocks on the test's schemas, told apart, and the application's refusals."""

    what: str
    tool: list[Deadlock] = field(default_factory=list)          # a stream-osc statement and an application's
    application: list[Deadlock] = field(default_factory=list)   # application transactions alone
    internal: list[Deadlock] = field(default_factory=list)      # the tool's own sessions alone (a batch retried)
    refusals: list[Refusal] = field(default_factory=list)
    unexplained: list[Refusal] = field(default_factory=list)   # 1213s no report on the schemas names
    unavailable: str | None = None

    @property
    def lock_wait_timeouts(self) -> list[Refusal]:
        return [r for r in self.refusals if r.code == LOCK_WAIT_TIMEOUT]

    @property
    def deadlock_victims(self) -> list[Refusal]:
        return [r for r in self.refusals if r.code == DEADLOCK]

    def problems(self) -> list[str]:
        """What fails the test: deadlocks the tool took part in, and application deadlocks no report explains."""
        found = [f"{self.what}: {d.describe()}" for d in self.tool]
        if self.unexplained:
            why = self.unavailable or "no deadlock report on the test's schemas names its session"
            found += [f"{self.what}: {r} cannot be attributed ({why})" for r in self.unexplained]
        return found

    def summary(self) -> str:
        return (f"{self.what}: {len(self.tool)} deadlock(s) between a stream-osc statement and the application, "
                f"{len(self.application)} between application transactions alone, {len(self.internal)} between the "
                f"tool's own sessions; the application's transactions refused: "
                f"{len(self.deadlock_victims)} deadlock victim(s), {len(self.lock_wait_timeouts)} lock-wait "
                f"timeout(s)" + (f" ({self.unavailable})" if self.unavailable else ""))

    def report(self) -> None:
        """Tell (print, and a warning in the run's summary) every application deadlock and the counts."""
        print(self.summary())
        for deadlock in self.application:
            text = f"{self.what}: {deadlock.describe()}"
            print(text)
            warnings.warn(text, ApplicationDeadlock, stacklevel=3)


class ConflictWatch:
    """From its start on: the deadlocks the server reports on `schemas`, to be attributed with the refusals of the
    application's writers."""

    def __init__(self, addr: MySQLAddress, schemas: Iterable[str], what: str, log: ErrorLog | None = None) -> None:
        self.schemas = frozenset(schemas)
        self.what = what
        self.log = log or source_error_log()
        self.unavailable = self.log.why_not or deadlock_reports_on(addr)
        self.start = self.log.position()
        self.started_at = time.monotonic()

    def deadlocks(self) -> list[Deadlock]:
        return [d for d in parse_deadlocks(self.log.since(self.start)) if d.touches(self.schemas)]

    def attribute(self, refusals: Iterable[Refusal] = ()) -> Attribution:
        """Read the reports written since the start; call once the writers stopped (every report complete)."""
        refused = sorted(refusals, key=lambda r: r.at)
        found = Attribution(self.what, refusals=refused, unavailable=self.unavailable)
        deadlocks = [] if self.unavailable else self.deadlocks()
        for deadlock in deadlocks:
            if not deadlock.tool_took_part:
                found.application.append(deadlock)
            elif deadlock.application_took_part:
                found.tool.append(deadlock)
            else:   # two of the tool's sessions on its own new table: the server rolls one back, which retries
                found.internal.append(deadlock)
        victims = [d.rolled_back.thread_id for d in deadlocks if d.rolled_back is not None]
        for r in found.deadlock_victims:
            if r.thread_id in victims:
                victims.remove(r.thread_id)
            else:
                found.unexplained.append(r)
        return found


def beyond_alone(during: list[Refusal], seconds_during: float, alone: list[Refusal], seconds_alone: float) -> int:
    """How many more of `during` there were than the same workload alone would have had in as long (its rate
    alone, rounded up): 0 when the migration cost the application none."""
    expected = math.ceil(len(alone) * seconds_during / seconds_alone) if seconds_alone > 0 else 0
    return max(0, len(during) - expected)


def traffic_refusals(refused: Iterable[tuple[int, str, int, float]]) -> list[Refusal]:
    """The demo load's refused writes (demo/traffic.py, TrafficStats.refused) as Refusals."""
    return [Refusal(code, at, session, op) for code, op, session, at in refused]


def assert_no_tool_deadlock(watch: ConflictWatch, refusals: Iterable[Refusal],
                            migration: tuple[float, float] | None = None) -> Attribution:
    """Attribute what `watch` saw, report it, and fail on a deadlock a stream-osc statement took part in or a
    refusal no report explains; with `migration` (its start and end, time.monotonic()), also on lock-wait timeouts
    during it beyond the workload's own rate before it (alone)."""
    attribution = watch.attribute(refusals)
    attribution.report()
    assert attribution.problems() == []
    if migration is not None:
        started, ended = migration
        timeouts = attribution.lock_wait_timeouts
        during = [r for r in timeouts if started <= r.at <= ended]
        alone = [r for r in timeouts if r.at < started]
        assert beyond_alone(during, ended - started, alone, started - watch.started_at) == 0, \
            [str(r) for r in during]
    return attribution
