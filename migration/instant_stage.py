"""Instant when the server can (--algorithm auto, the default): init's first step once the migration's row exists,
before anything else is made (no connector, topic or helper table). The ALTER is tried on the table itself as
ALGORITHM=INSTANT (core/instant.py); the server refuses at once when it cannot, and then the copy runs as it always
has; when it can, that statement is the change, and the migration is done, recorded with the path it took.

The try follows the cutover's metadata-lock discipline (docs/cutover.md, "Look before locking"): the sessions
holding the table are waited for first, requesting nothing (killed only with --force-kill-blockers-after, as the
cutover kills them); each try queues in front of the application at most --lock-wait-timeout
(cutover/instant_alter.py); --lock-tries tries make an attempt, --cutover-attempts attempts are made, with the
cutover's pauses between them. Attempts that all time out end the migration refused, with nothing left behind.
"""
from __future__ import annotations

import logging
import time
from functools import partial

import redis

from core import redis_keys
from core.context import RunContext, spec_pair
from core.db import connect, qualified, query
from core.keys import primary_key
from core.instant import COPY, INSTANT, instant_statement, why_not_instant
from core.logs import log_event
from core.source_check import DEFINITION_OPTION, table_definition
from core.stages import Stage, Status
from core.state_records import ALTERED_DEFINITION_OPTION, PATH_OPTION, PATH_REASON_OPTION, Migration
from cutover.blocker_wait import BlockerClock, BlockerWait
from cutover.blockers import find_blockers
from cutover.instant_alter import InstantTry, prepare_session, refusal_on_empty_copy, try_instant
from cutover.short_lock import backoff_s
from migration.checks import PreflightError
from migration.coordination import Coordination, MigrationStopped
from migration.foreign_keys import definition_after_alter
from migration.init_stage import create_new_table
from throttle.sources import throttle_for

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

MAX_ATTEMPT_PAUSE_S = 30   # between attempts: 2, 4, 8 … s, as between cutover attempts


class InstantNotTaken(PreflightError):
    """Every try of the instant change timed out waiting for the table's metadata lock: nothing was changed."""


class InstantStage:
    """The instant try of one migration, as its coordinator makes it."""

    def __init__(self, shared: Coordination, blocker_clock: BlockerClock) -> None:
        self.shared = shared
        self.blocker_clock = blocker_clock   # --force-kill-blockers-after counts from a holder's first sighting
        self.took_ms = 0.0                   # how long the statement that made the change ran
        self.made_at = 0.0                   # when it ended (wall clock)

    # init's step -----------------------------------------------------------------------------------
    def decide(self, migration: Migration) -> bool:
        """Try the change instantly if it may be tried: True when the server made it (the migration is then done,
        its path recorded); False when the copy is to run (its path and why recorded, and said)."""
        shared = self.shared
        reason = why_not_instant(shared.spec, shared.clock.now())
        if reason is None:
            self._check_alter(migration)
            reason = refusal_on_empty_copy(shared.conn, shared.spec) or self._hook_refusal(migration)
        if reason is None:
            reason = self._try(migration)
        if reason is None:
            self._done(migration)
            return True
        shared.store.change_options(migration.id, lambda current: {
            **current.options, PATH_OPTION: COPY, PATH_REASON_OPTION: reason})
        shared.metrics.path(COPY)
        shared.say(f"init: copying ({reason})")
        log_event(log, "path", path=COPY, reason=reason)
        return False

    def expected(self) -> str:
        """The dry run's line: the path it expects, tried on an empty copy of the table, and why it may differ."""
        shared, spec = self.shared, self.shared.spec
        reason = why_not_instant(spec, shared.clock.now())
        if reason is not None:
            path, line = COPY, f"dry run: expected path copy ({reason})"
        else:
            reason = refusal_on_empty_copy(shared.conn, spec)
            if reason is None:
                path, line = INSTANT, (
                    f"dry run: expected path instant: the server made this ALTER with ALGORITHM=INSTANT on an empty "
                    f"copy of {spec.qualified_name}; the table itself can differ (MariaDB refuses instant changes "
                    "on a table with an older row format or after many instant changes), and the copy then runs")
            else:
                path, line = COPY, (f"dry run: expected path copy ({reason}, tried on an empty copy of "
                                    f"{spec.qualified_name})")
        log_event(log, "dry run path", path=path, reason=reason)
        return line

    def _check_alter(self, migration: Migration) -> None:
        """Refuse what the copy would refuse (PreflightError), so that an ALTER is taken or refused whichever path
        it would take, as the dry run says: the ALTER made on an empty new table (its server error, a changed
        primary key, a key that would compare otherwise, a NOT NULL column without a DEFAULT), dropped at once.
        The definition it has is kept with the migration, for `landed` to know the change after a kill."""
        shared, spec = self.shared, self.shared.spec
        create_new_table(shared.conn, spec, primary_key(shared.conn, spec.database, spec.table))
        altered = {**definition_after_alter(shared.conn, spec, table_definition(shared.conn, spec.database,
                                                                                spec.new_table)),
                   "triggers": table_definition(shared.conn, spec.database, spec.table)["triggers"]}   # stay on it
        query(shared.conn, f"DROP TABLE {qualified(spec.database, spec.new_table)}")
        shared.store.change_options(migration.id, lambda current: {
            **current.options, ALTERED_DEFINITION_OPTION: altered})

    def landed(self, migration: Migration) -> bool:
        """Whether a migration left at init (its coordinator killed) had its change made by the server: the table
        is as the ALTER makes it and no longer as init found it. It is then recorded done, as the try would have."""
        conn, spec = self.shared.conn, self.shared.spec
        altered = migration.options.get(ALTERED_DEFINITION_OPTION)
        if altered is None:
            return False
        now = table_definition(conn, spec.database, spec.table)
        if now != altered or now == migration.options.get(DEFINITION_OPTION):
            return False
        self._done(migration)
        return True

    def _hook_refusal(self, migration: Migration) -> str | None:
        """The before-cutover hooks, asked before the change lands as before a swap: why the copy runs when one did
        not exit 0 (the copy's swap then waits for it as always)."""
        refused = self.shared.before_cutover(migration.id)
        if refused is None:
            return None
        return f"the before-cutover hook did not let the change land now ({refused.describe()})"

    def _done(self, migration: Migration) -> None:
        """Record the instant change: path, the moment and the statement's time, stage done; nothing to remove but
        the latency probe's row and the Redis notes."""
        shared = self.shared
        shared.store.change_options(migration.id, lambda current: {
            **current.options, PATH_OPTION: INSTANT, PATH_REASON_OPTION: None})
        shared.store.remove_latency_probes(migration.id)
        try:
            redis_keys.clear_migration(redis.Redis.from_url(shared.endpoints.redis_url), migration.id)
        except redis.RedisError:
            pass   # notes that expire by themselves
        shared.metrics.path(INSTANT)
        shared.enter_stage(migration.id, Stage.DONE, status=Status.DONE, error=None,
                           cutover_blocked_ms=round(self.took_ms), cutover_at=self.made_at)
        log_event(log, "path", path=INSTANT, took_ms=round(self.took_ms, 1))

    # the tries -------------------------------------------------------------------------------------
    def _try(self, migration: Migration) -> str | None:
        """Attempts until the server makes the change (None) or refuses it (why); holders of the table are waited
        for before each attempt, uncounted. InstantNotTaken when every attempt timed out."""
        shared, spec = self.shared, self.shared.spec
        statement = instant_statement(spec.database, spec.table, spec.alter)
        before = table_definition(shared.conn, spec.database, spec.table)
        ctx = RunContext(shared.endpoints, spec, migration, spec_pair(shared.conn, spec, None), throttle_for,
                         shared.yielding)
        try:
            attempt = 0
            while attempt < spec.cutover_attempts:
                self._wait_for_blockers(ctx)
                result = self._attempt(statement, before)
                if result.done:
                    self.took_ms, self.made_at = result.took_ms, time.time()
                    return None
                if result.refusal is not None:
                    return result.refusal
                if result.blockers:   # seen right before a try: nothing was queued; wait for them again
                    self.blocker_clock.saw(result.blockers, shared.clock.monotonic())
                    continue
                attempt += 1
                if attempt < spec.cutover_attempts:
                    pause = min(2 ** attempt, MAX_ATTEMPT_PAUSE_S)
                    shared.say(f"init: the instant change could not get {spec.qualified_name}'s metadata lock in "
                               f"{spec.lock_tries} tries (attempt {attempt} of {spec.cutover_attempts}); trying "
                               f"again in {pause} s")
                    shared.clock.sleep(pause)
        finally:
            ctx.close()
        raise InstantNotTaken(
            f"the instant change of {spec.qualified_name} could not get the table's metadata lock in "
            f"{spec.cutover_attempts} attempts of {spec.lock_tries} tries, each queued at most "
            f"{spec.lock_wait_s:g} s in front of the application: nothing was changed. Run it again at a quieter "
            "time, with a larger --lock-wait-timeout, or copy with --algorithm copy")

    def _attempt(self, statement: str, before: dict) -> InstantTry:
        """Up to --lock-tries tries in one session of its own, each bounded, with the cutover's growing pauses."""
        shared, spec = self.shared, self.shared.spec
        session = connect(shared.endpoints.mysql)
        try:
            prepare_session(session, spec.lock_wait_s)
            result = InstantTry()
            for try_no in range(1, spec.lock_tries + 1):
                result = try_instant(session, statement, spec.lock_wait_s, shared.info.is_mariadb,
                                     partial(find_blockers, session, spec.database, spec.table, shared.info.is_mariadb))
                if result.lost or result.timed_out:
                    log_event(log, "instant try timed out" if result.timed_out else "instant try cut off",
                              logging.INFO, try_no=try_no, tries=spec.lock_tries, waited_ms=round(result.took_ms, 1))
                    if self._landed(before):   # the server made the change although the try did not say so
                        return InstantTry(done=True, took_ms=result.took_ms)
                    if result.lost:
                        session.close()
                        session = connect(shared.endpoints.mysql)
                        prepare_session(session, spec.lock_wait_s)
                    if try_no < spec.lock_tries:
                        shared.clock.sleep(backoff_s(try_no, spec.lock_wait_s))
                    continue
                return result
            return result
        finally:
            session.close()

    def _landed(self, before: dict) -> bool:
        """Whether the table's definition changed since before the tries (read on a fresh session)."""
        conn = connect(self.shared.endpoints.mysql)
        try:
            return table_definition(conn, self.shared.spec.database, self.shared.spec.table) != before
        finally:
            conn.close()

    def _wait_for_blockers(self, ctx: RunContext) -> None:
        """Wait, requesting nothing, while sessions hold the table (as the cutover waits); an abort or a lease lost
        meanwhile stops the migration."""
        shared = self.shared

        def tick() -> None:
            if shared.lease.lost.is_set():
                raise MigrationStopped(f"migration {ctx.migration.id}: another process took over as coordinator")
            if shared.store.status(ctx.migration.id) == Status.ABORTED:
                raise MigrationStopped(f"migration {ctx.migration.id} was aborted", resumable=False)
        BlockerWait(ctx, shared.info.is_mariadb, self.blocker_clock).wait(
            tick, lambda text: shared.say(f"init: {text}"))
