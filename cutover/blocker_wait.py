"""Waiting, without asking for any lock, until no session holds the table; killing the holders when asked to.

While it waits the application is not held up at all (nothing is queued on the table); `status` shows
who is waiting for whom. With `--force-kill-blockers-after`, a session that has held the table for
that long while the tool waited is killed (its transaction rolls back), except a transaction that
changed more rows than `--force-kill-max-rows`: its rollback would take about as long as its changes
did, and hold the table meanwhile.

On a move the new table's server is looked at too, exactly so: a session holding the target table would make
a statement the cutover runs there under the source's lock wait (cutover/move.py), and the application with it.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import pymysql
import redis

from core import redis_keys
from core.context import RunContext
from core.db import close_quietly, kill_connection
from core.logs import log_event
from cutover.blockers import TARGET, Blocker, find_blockers
from cutover.session_bounds import server_is_mariadb

log = logging.getLogger("stream_osc.cutover")

POLL_S = 0.5
AFTER_KILL_S = 0.05      # the next look after a kill: the holder's session ends within milliseconds
NOTE_TTL_S = 10          # the `status` note outlives the last check by this much, then vanishes


def kill_refusal(blocker: Blocker, max_rows: int) -> str | None:
    """Why this blocker must not be killed, or None."""
    if blocker.rows_modified is not None and blocker.rows_modified > max_rows:
        return (f"its transaction changed {blocker.rows_modified} rows (more than --force-kill-max-rows "
                f"{max_rows}); rolling it back would hold the table as long")
    return None


@dataclass
class BlockerClock:
    """When the tool first saw each holder of the table (connection and transaction), and which it killed or
    spared. One clock serves every wait and cutover attempt of a run, so that --force-kill-blockers-after
    counts from the first sighting of a holder, not from the start of the latest attempt."""

    first_seen: dict[tuple[int, str | None, str], float] = field(default_factory=dict)
    refused: set[tuple[int, str | None, str]] = field(default_factory=set)
    killed: set[tuple[int, str | None, str]] = field(default_factory=set)

    def note(self, blockers: list[Blocker], now: float) -> None:
        """Start the clock of new holders; forget those gone (a connection's next transaction starts anew)."""
        self.first_seen = {b.identity: self.first_seen.get(b.identity, now) for b in blockers}

    def saw(self, blockers: list[Blocker] | tuple[Blocker, ...], now: float) -> None:
        """Start the clock of holders seen outside a wait (by an attempt's look, or while the lag is awaited)."""
        for blocker in blockers:
            self.first_seen.setdefault(blocker.identity, now)

    def held_up_s(self, blocker: Blocker, now: float) -> float:
        return now - self.first_seen.get(blocker.identity, now)


class BlockerWait:
    """One wait of a migration for the sessions holding its table."""

    def __init__(self, ctx: RunContext, is_mariadb: bool, clock: BlockerClock | None = None) -> None:
        self.ctx = ctx
        self.is_mariadb = is_mariadb
        self.clock = clock or BlockerClock()

    def wait(self, tick: Callable[[], None], say: Callable[[str], None]) -> float:
        """Return once no session holds the table; the seconds waited. `tick` runs every poll (it may raise
        to stop the wait: abort, a failed applier, a failed connector)."""
        spec = self.ctx.spec
        conn = self.ctx.db()
        started = time.monotonic()
        shown: set[tuple[int, str]] = set()
        target: pymysql.connections.Connection | None = None
        try:
            target = self.ctx.target_db() if self.ctx.pair.remote else None
            target_mariadb = target is not None and server_is_mariadb(target)
            while True:
                blockers = find_blockers(conn, spec.database, spec.table, self.is_mariadb)
                if target is not None:
                    blockers += find_blockers(target, spec.target_database, spec.new_table, target_mariadb,
                                              server=TARGET)
                now = time.monotonic()
                self.clock.note(blockers, now)
                self._publish(blockers)
                if not blockers:
                    break
                new = [b for b in blockers if (b.connection_id, b.server) not in shown]
                if new:
                    shown.update((b.connection_id, b.server) for b in new)
                    for blocker in new:
                        say(f"waiting for {blocker.describe()}")
                    log_event(log, "waiting for sessions holding the table", logging.WARNING,
                              table=spec.qualified_name, blockers=json.dumps([b.as_dict() for b in blockers]))
                killed = spec.force_kill_blockers_after_s is not None and self._kill_overdue(
                    lambda b: target if b.server == TARGET and target is not None else conn, blockers, now, say)
                tick()
                time.sleep(AFTER_KILL_S if killed else POLL_S)   # a killed holder is gone at once: look again
        finally:
            conn.close()
            close_quietly(target)
        waited = time.monotonic() - started
        if shown:
            say(f"no session holds {spec.qualified_name} any more (waited {waited:.1f} s)")
            log_event(log, "table no longer held", table=spec.qualified_name, waited_s=round(waited, 1))
        return waited

    def _kill_overdue(self, session_on: Callable[[Blocker], pymysql.connections.Connection],
                      blockers: list[Blocker], now: float, say: Callable[[str], None]) -> bool:
        """Kill the holders overdue for it (unless refused), each through `session_on` its server; True if any was
        killed."""
        spec, clock = self.ctx.spec, self.clock
        killed = False
        for blocker in blockers:
            held_up_s = clock.held_up_s(blocker, now)
            if held_up_s < spec.force_kill_blockers_after_s or blocker.identity in clock.killed | clock.refused:
                continue
            refusal = kill_refusal(blocker, spec.force_kill_max_rows)
            if refusal is not None:
                clock.refused.add(blocker.identity)
                say(f"not killing connection {blocker.connection_id}: {refusal}")
                log_event(log, "blocker not killed", logging.WARNING, reason=refusal, **blocker.as_dict())
                continue
            try:
                if not kill_connection(session_on(blocker), blocker.connection_id):
                    continue   # it ended by itself meanwhile
            except pymysql.err.MySQLError as exc:
                clock.refused.add(blocker.identity)
                say(f"could not kill connection {blocker.connection_id}: {exc.args[-1]}")
                log_event(log, "blocker kill failed", logging.ERROR, error=str(exc), **blocker.as_dict())
                continue
            clock.killed.add(blocker.identity)
            killed = True
            say(f"killed {blocker.describe()} (it held the migration up for {held_up_s:.1f} s)")
            log_event(log, "killed blocking connection", logging.WARNING, held_up_s=round(held_up_s, 1),
                      **blocker.as_dict())
        return killed

    def _publish(self, blockers: list[Blocker]) -> None:
        """Tell `status` who holds the table (best effort: a display only)."""
        key = redis_keys.blockers_note(self.ctx.migration.id)
        try:
            if blockers:
                self.ctx.shared_redis().set(key, json.dumps([b.as_dict() for b in blockers]), ex=NOTE_TTL_S)
            else:
                self.ctx.shared_redis().delete(key)
        except redis.RedisError:
            pass

