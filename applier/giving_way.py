"""The tool gives way to the application: its locking reads of the source never wait while holding row locks.

InnoDB rolls back the lighter transaction of a deadlock, and a locking read holding hundreds of rows is never
the lighter one against an application's single-row UPDATE. So every locking read of the source is bounded in
size (MAX_LOCKED_KEYS) and refuses to wait (NOWAIT): a read that meets a row an application holds fails at once,
having waited for nothing, and cannot be part of a lock cycle. Its transaction is rolled back, its keys split
in halves and tried again after a back-off. A single key refused again is read waiting (the session's short
lock wait): that transaction holds no other lock while it waits, so it can close no cycle, and once granted it
holds one share lock for a few milliseconds. A key that stays locked therefore still gets its re-read (a
committed change is never skipped, offsets are committed after the write) and does not starve its partition.
Keys waited for longer than LONG_WAIT_S are reported (`status`, metrics) through `LockWaits`.
The split goes in rounds with one back-off each, so a batch meeting many held rows pauses about as long as one
meeting a single row.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar
from weakref import WeakKeyDictionary

import pymysql
import redis

from core import redis_keys
from core.context import StopRequested
from core.db import scalar
from core.keys import Key
from core.logs import log_event

log = logging.getLogger("stream_osc.apply")

T = TypeVar("T")

# a NOWAIT read that met a locked row: MariaDB says lock wait timeout (at once), MySQL 8 ER_LOCK_NOWAIT
LOCK_REFUSED = frozenset({1205, 3572})
MAX_LOCKED_KEYS = 500      # rows one locking read of the source may hold
BACKOFF_FIRST_S = 0.002    # after a refusal: doubled per refusal of the same call, up to BACKOFF_MAX_S
BACKOFF_MAX_S = 0.1
LONG_WAIT_S = 1.0          # a key waited for this long is reported as long-locked
WAIT_TRIES = 2             # a held key's waiting read, tried again once when its lock wait runs out
WAITER_MARK = "\x1f"       # between a shown key and its waiter in LockWaits' fields
STALE_WAIT_S = 300         # a wait noted longer ago was left by a process that ended (waits are seconds long)

_MARIADB: WeakKeyDictionary[pymysql.connections.Connection, bool] = WeakKeyDictionary()


def is_mariadb(conn: pymysql.connections.Connection) -> bool:
    """Whether the server is MariaDB, asked once per session (a proxy may announce any version in its greeting)."""
    known = _MARIADB.get(conn)
    if known is None:
        known = _MARIADB[conn] = "mariadb" in str(scalar(conn, "SELECT VERSION()")).lower()
    return known


def share_lock(conn: pymysql.connections.Connection, nowait: bool = True) -> str:
    """The clause ending a share-locking read on this server: MariaDB has no FOR SHARE, and MySQL 8 has NOWAIT
    only after FOR SHARE."""
    clause = " LOCK IN SHARE MODE" if is_mariadb(conn) else " FOR SHARE"
    return clause + " NOWAIT" if nowait else clause


def refused(exc: BaseException) -> bool:
    """Whether `exc` is a locking read's refusal to wait (or a lock wait that ran out)."""
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in LOCK_REFUSED


def backoff_s(refusals: int) -> float:
    """The pause after the `refusals`-th refusal of one call: short, so a row held for a moment costs little."""
    return min(BACKOFF_FIRST_S * 2 ** (refusals - 1), BACKOFF_MAX_S)


def parts(keys: Sequence[Key], limit: int = MAX_LOCKED_KEYS) -> list[list[Key]]:
    """`keys` in runs of at most `limit`, in their order."""
    return [list(keys[i:i + limit]) for i in range(0, len(keys), limit)]


class LockWaits:
    """The keys whose re-read is waiting for another session's row lock now, shared with `status` and metrics
    through Redis (a hash: shown key and waiter -> Unix time the wait began). Only a display: a Redis failure is
    logged and never stops a re-copy."""

    def __init__(self, client: redis.Redis, migration_id: int) -> None:
        self.r = client
        self.key = redis_keys.lock_waits(migration_id)
        self.waiter = uuid.uuid4().hex[:8]   # two waiters of one key keep an entry each

    def began(self, shown: str) -> None:
        try:
            pipe = self.r.pipeline()
            pipe.hset(self.key, self._field(shown), f"{time.time():.3f}")
            pipe.expire(self.key, STALE_WAIT_S)
            pipe.execute()
        except redis.RedisError as exc:
            log_event(log, "a key's wait could not be shown", logging.DEBUG, reason=str(exc))

    def ended(self, shown: str) -> None:
        try:
            self.r.hdel(self.key, self._field(shown))
        except redis.RedisError as exc:
            log_event(log, "a key's wait could not be cleared", logging.DEBUG, reason=str(exc))

    def _field(self, shown: str) -> str:
        return f"{shown}{WAITER_MARK}{self.waiter}:{threading.get_ident()}"

    @staticmethod
    def read(client: redis.Redis, migration_id: int, now: float | None = None) -> list[tuple[str, float]]:
        """(key, seconds waited) of every key waited for at least LONG_WAIT_S, longest first (a wait older than
        STALE_WAIT_S was noted by a process that ended before it could clear it); [] when Redis cannot say."""
        now = time.time() if now is None else now
        try:
            noted = client.hgetall(redis_keys.lock_waits(migration_id))
        except redis.RedisError:
            return []
        longest: dict[str, float] = {}
        for field, began in noted.items():
            shown = field.decode().rpartition(WAITER_MARK)[0]
            longest[shown] = max(longest.get(shown, 0.0), now - float(began))
        return sorted(((k, w) for k, w in longest.items() if LONG_WAIT_S <= w < STALE_WAIT_S), key=lambda kw: -kw[1])


def giving_way(action: Callable[[list[Key], bool], T], keys: Sequence[Key], *,
               show: Callable[[Key], str] = repr, waits: LockWaits | None = None,
               stop: threading.Event | None = None, sleep: Callable[[float], None] = time.sleep,
               limit: int = MAX_LOCKED_KEYS) -> list[T]:
    """`action(part, nowait)` over `keys` in parts of at most `limit`; returns the parts' results.

    `action` is one transaction whose only locking read of the source is of `part`, NOWAIT when asked; it rolls
    back on any error. The parts are tried in rounds: the parts a round had refused (a row of each is locked) are
    split in halves and tried in the next, after one back-off (at most about 10 rounds: BACKOFF_MAX_S in all, for
    any number of held rows). A single key refused is read waiting, as the only lock its transaction asks for
    (module docstring), after every other part is written, so that a hot row holds back no other key; a wait that
    runs out is tried again, up to WAIT_TRIES times, unless `stop` is set meanwhile (StopRequested).
    """
    results: list[T] = []
    current = parts(keys, limit)
    held: list[Key] = []   # single keys refused: waited for one by one once every other key is written
    rounds = 0
    while current:
        split: list[list[Key]] = []
        for part in current:
            try:
                results.append(action(part, True))
            except pymysql.err.OperationalError as exc:
                if not refused(exc):
                    raise
                if len(part) == 1:
                    held.append(part[0])
                else:
                    split += [part[:len(part) // 2], part[len(part) // 2:]]
        if split:
            rounds += 1
            sleep(backoff_s(rounds))
        current = split
    for key in held:
        results.append(_waiting_for(action, key, show, waits, stop))
    return results


def _waiting_for(action: Callable[[list[Key], bool], T], key: Key, show: Callable[[Key], str],
                 waits: LockWaits | None, stop: threading.Event | None) -> T:
    """The one key's action with a waiting read, its wait tried again when it runs out; a wait of LONG_WAIT_S or
    more is logged and, meanwhile, shown through `waits`."""
    shown = show(key)
    started = time.monotonic()
    if waits is not None:
        waits.began(shown)
    try:
        for tries in range(1, WAIT_TRIES + 1):
            try:
                return action([key], False)
            except pymysql.err.OperationalError as exc:
                if not refused(exc) or tries == WAIT_TRIES:
                    raise
                if stop is not None and stop.is_set():
                    raise StopRequested(f"asked to stop while waiting for a row lock on {shown}") from exc
        raise AssertionError("unreachable")
    finally:
        if waits is not None:
            waits.ended(shown)
        waited = time.monotonic() - started
        if waited >= LONG_WAIT_S:
            log_event(log, "a key's re-read waited for a row lock held by another session", logging.WARNING,
                      key=shown, waited_s=round(waited, 3))
