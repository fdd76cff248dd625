"""The cutover: lock, fence, drain the last changes in the lock session, rename, unlock — inside a window.

Why this is safe, and what it relies on, is written in docs/cutover.md ("The swap"). In short:
MariaDB refuses RENAME under LOCK TABLES, so a second session's RENAME waits on the lock session's
metadata locks while the last changes are drained; the lock session then drops the sentry that holds
the old-table name and unlocks, and the RENAME, queued on the original table ahead of every waiting
application write, runs first. That holds only because every helper name sorts after the original's
(the server takes a statement's metadata locks in name order) and the RENAME is seen waiting for a
table metadata lock before the unlock. MySQL 8.0.13+ renames inside the lock session.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pymysql

from core.context import RunContext
from cutover.validate import Sessions
from core.spec import MigrationSpec
from core.db import DatabaseUnreachable, kill_connection, qualified, query, scalar
from core.foreign_keys import own_foreign_keys
from core.logs import log_event
from core.source_check import check_source_unchanged
from core.swap_preconditions import check_swap_settings
from core.triggers import move_triggers, recorded_triggers, settle_triggers
from cutover.queued_ddl import queued_statements
from cutover.blockers import TARGET, Blocker, find_blockers
from cutover.session_bounds import apply_settings, bound_lock_session, remaining_statement_settings, \
    server_is_mariadb, tighten_idle_limit
from cutover.short_lock import LockNotTaken, lock_tables_briefly
from cutover.watchdog import StatementWatchdog
from cutover.drain import FenceDrain
from cutover.foreign_keys import (add_foreign_keys, drop_old_foreign_keys, rebuild_child_keys,
                                  remove_foreign_keys)
from cutover.outcome import CoordinatorReplaced, CutoverAborted, CutoverResult
from cutover.renamer import Renamer, rename_queues_on_original
from streams.fence import FenceReader, FenceTimeout
from streams.topics import TopicNames, partition_count

log = logging.getLogger("stream_osc.cutover")

SENTRY_COMMENT = "stream-osc cutover sentry"
WITHDRAW_WAIT_S = 5.0   # a killed RENAME session ends at once; past this the sentry is the guard
# A statement stopped at the window's end: killed (by the watchdog, cutover/watchdog.py), or over MariaDB's
# max_statement_time, or MySQL's max_execution_time (cutover/session_bounds.py)
OUT_OF_WINDOW = frozenset({1317, 1969, 3024})


@contextmanager
def within_window(where: str) -> Iterator[None]:
    """Statements under the lock that the window's bounds stopped end the attempt (CutoverAborted: rolled back, the
    source takes writes again), not the run."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in OUT_OF_WINDOW:
            raise CutoverAborted(f"a statement {where} did not fit the window: {exc.args[-1]}") from None
        raise


class Cutover:
    """Runs cutover attempts for one migration."""

    def __init__(self, ctx: RunContext, is_mariadb: bool) -> None:
        self.ctx = ctx
        self.is_mariadb = is_mariadb
        spec = ctx.spec
        self.names = TopicNames(ctx.migration.prefix, spec.database, spec.table)
        self.partitions = partition_count(ctx.endpoints.kafka, self.names.changes)
        self.fence_table = qualified(spec.metadata_schema, ctx.migration.fence_table)
        self.migrations_table = qualified(spec.metadata_schema, "migrations")
        self.fence = FenceDrain(ctx, self.names, self.partitions)
        self.triggers_moved = False   # this attempt began moving the triggers: its roll-back puts them back
        self.old_keys: list[str] | None = None   # the original's foreign keys, read before each attempt's lock
        self.keys_added: list[str] = []           # the new table's, added in this attempt's lock

    def close(self) -> None:
        """Close the fence consumer, if one was made."""
        self.fence.close()

    def _holders(self, conn: pymysql.connections.Connection,
                 target: tuple[pymysql.connections.Connection, bool] | None = None) -> list[Blocker]:
        """Sessions holding the table; on a move also those holding the new table on its server (`target`: its
        session and whether it is MariaDB): a statement the cutover runs there under the lock would wait for them."""
        spec = self.ctx.spec
        found = find_blockers(conn, spec.database, spec.table, self.is_mariadb)
        if target is not None:
            found += find_blockers(target[0], spec.target_database, spec.new_table, target[1], server=TARGET)
        return found

    def _refuse_if_held(self, conn: pymysql.connections.Connection,
                        target: tuple[pymysql.connections.Connection, bool] | None = None) -> None:
        """CutoverAborted naming the sessions that hold the table, if any: checked before anything is prepared
        (sentry, catch-up), so that an attempt a holder would stop costs nothing (cutover/blocker_wait.py)."""
        blockers = self._holders(conn, target)
        if blockers:
            raise CutoverAborted(f"{len(blockers)} session(s) hold {self.ctx.spec.qualified_name}: "
                                 + "; ".join(b.describe() for b in blockers), tuple(blockers))

    def _lock(self, lock_conn: pymysql.connections.Connection, tables: list[str], window_s: float,
              read_tables: list[str] | None = None,
              target: tuple[pymysql.connections.Connection, bool] | None = None) -> None:
        """LOCK TABLES … WRITE (`read_tables` … READ), never requested while a session holds the table (on a move,
        the target table too), each try queueing only --lock-wait-timeout in front of the application
        (cutover/short_lock.py). The session is first given the server-side bounds that end it, and so the lock,
        if this process stops answering (cutover/session_bounds.py). The --critical-load
        thresholds are read afresh first (CriticalLoad: the migration stops): no worker may have read the load
        lately (a swap's appliers are stopped, as are a move's for its snapshot). A throttle holding the work back
        (--max-load, read afresh on this server; a move's target, CloudWatch and replicas as cached) postpones
        the lock: CutoverAborted(throttled), not an attempt that counts; the attempt's catch-up may have taken
        seconds since the coordinator looked."""
        spec = self.ctx.spec
        if self.ctx.throttle is not None:
            held = self.ctx.throttle.before_lock(lock_conn)
            if held is not None:
                raise CutoverAborted(f"throttled ({held}): no lock requested", throttled=True)
        bound_lock_session(lock_conn, window_s, self.is_mariadb)
        try:
            lock_tables_briefly(lock_conn, tables, self.is_mariadb, spec.lock_wait_s, spec.lock_tries,
                                lambda: self._holders(lock_conn, target), read_tables or [])
        except LockNotTaken as exc:
            raise CutoverAborted(str(exc), exc.blockers) from None

    def _bound_target(self, target: pymysql.connections.Connection, window_s: float,
                      mariadb: bool) -> StatementWatchdog:
        """Before the lock: a move's target session bounded by its server as a lock session is, and the watchdog that
        will stop its statements at the window's end, its own session opened now (not in the window)."""
        bound_lock_session(target, window_s, mariadb)
        return StatementWatchdog(self.ctx.target_db, target.thread_id(), "target")

    @staticmethod
    def _limit_target(target: pymysql.connections.Connection, mariadb: bool, watchdog: StatementWatchdog,
                      deadline: float) -> None:
        """Under the lock: every statement on the target ends within what remains of the window."""
        apply_settings(target, remaining_statement_settings(deadline - time.monotonic(), mariadb))
        watchdog.arm(deadline)

    def refresh_statistics(self) -> float:
        """ANALYZE TABLE the new table, so that the optimizer's first plans after the swap use fresh
        statistics (the copy leaves them stale); returns the seconds it took. Only the new table is
        analyzed: the application does not use it yet."""
        spec = self.ctx.spec
        started = time.monotonic()
        conn = self.ctx.target_db()
        try:
            rows = query(conn, f"ANALYZE TABLE {qualified(spec.target_database, spec.new_table)}")
        finally:
            conn.close()
        took = time.monotonic() - started
        failed = [str(r[3]) for r in rows if str(r[2]).lower() == "error"]
        if failed:   # statistics are not a correctness matter: the cutover goes on
            log_event(log, "ANALYZE TABLE failed", logging.WARNING, table=spec.new_table, error="; ".join(failed))
        else:
            log_event(log, "statistics refreshed", table=spec.new_table, took_ms=round(took * 1000, 1))
        return took

    def consistent_snapshots(self, window_s: float, sessions: list[Sessions]) -> float:
        """Open a consistent snapshot in each session at a moment the new table equals the source.

        The proof is the cutover's (lock, fence, drain in the lock session), without the rename: the
        snapshots are taken while writes wait, then the lock is released. Returns the milliseconds
        writes were blocked; raises CutoverAborted when the lock or the drain does not fit the window.
        The drain starts at the applier group's committed offsets; appliers may run when the new table is on
        this server (the lock holds them off both tables: docs/cutover.md, "The validation snapshot"). A
        new table on another server has its snapshots (each pair's second session) taken under the same
        lock, after the drain: the appliers must be stopped there, so that nothing else writes it.
        """
        spec, ctx = self.ctx.spec, self.ctx
        consumer, reader = self.fence.reader()
        lock_conn = ctx.db()
        target = ctx.target_db() if ctx.pair.remote else None
        watchdog: StatementWatchdog | None = None
        every = [s for pair in sessions for s in pair if s is not None]
        try:
            target_mariadb = target is not None and server_is_mariadb(target)
            on_target = (target, target_mariadb) if target is not None else None
            self._refuse_if_held(lock_conn, on_target)
            for session in every:
                query(session, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            start = self.fence.catch_up(lock_conn, reader, consumer, target)
            tables = [qualified(spec.database, spec.table), self.fence_table]
            if target is None:
                tables.append(qualified(spec.database, spec.new_table))
            else:   # written under the lock: bounded by its server as the lock session is
                watchdog = self._bound_target(target, window_s, target_mariadb)
            self._lock(lock_conn, tables, window_s, target=on_target)
            locked_at = time.monotonic()
            if target is not None and watchdog is not None:
                self._limit_target(target, target_mariadb, watchdog, locked_at + window_s)
            try:
                with within_window("under the snapshot's lock"):
                    _, drained = self.fence.drain(lock_conn, reader, start, f"snap-{uuid.uuid4().hex[:12]}",
                                             max(locked_at + window_s - time.monotonic(), 0.01), False, target)
                for session in every:
                    query(session, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
            except FenceTimeout as exc:
                raise CutoverAborted(f"changes did not drain within the window: {exc}") from None
            finally:
                query(lock_conn, "UNLOCK TABLES")
            blocked = (time.monotonic() - locked_at) * 1000
            log_event(log, "consistent snapshots taken", sessions=len(every), blocked_ms=round(blocked, 1),
                      drained_keys=drained)
            return blocked
        finally:
            if watchdog is not None:
                watchdog.close()
            lock_conn.close()
            if target is not None:
                target.close()

    def _prove_lease(self, lock_conn: pymysql.connections.Connection, coordinator: str) -> None:
        """Raise CoordinatorReplaced unless `coordinator` holds the migration's lease.

        Read in the lock session, which holds the migrations table READ-locked until its UNLOCK: a takeover
        (an UPDATE of that table) waits until then, so the lease read here is still ours when the RENAME runs.
        """
        holder = self.ctx.store(lock_conn).coordinator(self.ctx.migration.id)
        if holder != coordinator:
            log_event(log, "cutover fenced: lease taken over", logging.ERROR, coordinator=coordinator, holder=holder)
            raise CoordinatorReplaced(f"migration {self.ctx.migration.id}: {holder or 'no process'} holds the "
                                      f"coordinator lease, not this process ({coordinator}); the tables were not "
                                      "renamed")

    def attempt(self, window_s: float, coordinator: str) -> CutoverResult:
        """One bounded attempt by `coordinator`, renaming only while it holds the lease; the applier group must be
        stopped (its committed offsets are the start)."""
        ctx = self.ctx
        consumer, reader = self.fence.reader()
        lock_conn = ctx.db()
        renamer: Renamer | None = None
        locked_at = 0.0
        self.triggers_moved = False
        try:
            self._settle_triggers(lock_conn)   # a roll-back that could not finish: exactly one set, on the table
            check_swap_settings(lock_conn, self.is_mariadb)   # changed since init? Refused before anything is made
            self._refuse_if_held(lock_conn)
            tables, renamer = self._ready_swap(lock_conn, window_s)
            start = self.fence.catch_up(lock_conn, reader, consumer)
            self._lock(lock_conn, tables, window_s, [self.migrations_table])
            locked_at = time.monotonic()
            locked_wall = time.time()
            deadline = locked_at + window_s
            check_source_unchanged(lock_conn, ctx.migration)   # decisive: no DDL can run while the lock is held
            drained = self._drain_under_lock(lock_conn, reader, start, deadline)
            tighten_idle_limit(lock_conn, deadline)   # only the RENAME's queueing is left to wait for
            drained_at = time.monotonic()
            self._prove_lease(lock_conn, coordinator)   # decisive: no takeover can commit until the unlock
            self._move_triggers(lock_conn, deadline)
            if renamer is not None:
                blocked = self._rename_queued(lock_conn, renamer, locked_at, deadline)
            else:
                blocked = self._rename_in_lock_session(lock_conn, self._swap_sql(), locked_at, deadline, window_s)
            self._after_swap(lock_conn)   # first: the old table's keys still hold the parents
            log_event(log, "tables swapped", blocked_ms=round(blocked, 1), drained_keys=drained,
                      drain_ms=round((drained_at - locked_at) * 1000, 1))
            return CutoverResult(True, blocked, drained, locked_at=locked_wall)
        except CutoverAborted as exc:
            return self._aborted(exc, lock_conn, renamer, locked_at)
        except BaseException:
            # SourceChanged, a cut connection, anything else: no sentry may outlive the attempt
            # (a real original under the old name is never dropped: the sentry is known by its comment).
            try:
                self._roll_back(lock_conn, renamer)
            except pymysql.err.Error as exc:
                log_event(log, "cutover roll-back incomplete; the next attempt or abort removes the sentry",
                          logging.WARNING, reason=str(exc))
            raise
        finally:
            if renamer is not None:
                renamer.close_unless_started()
            lock_conn.close()

    def _move_triggers(self, lock_conn: pymysql.connections.Connection, deadline: float) -> None:
        """Under the lock, after the last drain (the tool's writes into the new table fire none): the source's
        triggers moved to the new table, guarded (core/triggers.py), so that the RENAME swaps them in with it."""
        triggers = recorded_triggers(self.ctx.migration.options)
        if not triggers:
            return
        if time.monotonic() > deadline:
            raise CutoverAborted(f"window of {self.ctx.spec.cutover_window_s:.1f} s exceeded")
        spec = self.ctx.spec
        self.triggers_moved = True
        started = time.monotonic()
        with within_window("moving the triggers"):
            move_triggers(lock_conn, spec.database, spec.table, spec.new_table, triggers, self.ctx.migration.id)
        log_event(log, "triggers moved to the new table", triggers=len(triggers),
                  took_ms=round((time.monotonic() - started) * 1000, 1))

    def _settle_triggers(self, lock_conn: pymysql.connections.Connection) -> None:
        """The recorded triggers back on the table named as the original, and no guard left (core/triggers.py)."""
        spec, migration = self.ctx.spec, self.ctx.migration
        if settle_triggers(lock_conn, spec, recorded_triggers(migration.options), migration.id):
            log_event(log, "triggers put back on the table", logging.WARNING, table=spec.qualified_name)
    def _after_swap(self, conn: pymysql.connections.Connection) -> None:
        """Right after the swap, the old table's foreign keys dropped and the children's rebuilt on the new table
        (cutover/foreign_keys.py); what fails is done again by the cleanup, which never drops the old table before."""
        try:
            drop_old_foreign_keys(conn, self.ctx.spec, self.old_keys)
            rebuild_child_keys(conn, self.ctx.spec, self.ctx.migration.options)
        except pymysql.err.Error as exc:
            log_event(log, "child foreign keys not rebuilt yet; the cleanup does it", logging.WARNING,
                      reason=str(exc))

    def _swap_sql(self) -> str:
        """The RENAME that swaps the tables: the original to the old-table name, the new table to the original's."""
        spec = self.ctx.spec
        db = spec.database
        return (f"RENAME TABLE {qualified(db, spec.table)} TO {qualified(db, spec.old_table)}, "
                f"{qualified(db, spec.new_table)} TO {qualified(db, spec.table)}")

    def _ready_swap(self, lock_conn: pymysql.connections.Connection,
                    window_s: float) -> tuple[list[str], Renamer | None]:
        """Before the catch-up: the tables the attempt locks and, on MariaDB, the sentry holding the old-table name
        (locked too) and the RENAME's own session, which waits for the lock (None on MySQL: the lock session
        renames)."""
        spec = self.ctx.spec
        db = spec.database
        tables = [qualified(db, spec.table), qualified(db, spec.new_table), self.fence_table]
        remove_foreign_keys(lock_conn, spec, self.ctx.migration.options)   # left by an attempt that stopped
        self.keys_added = []
        # the original's keys, dropped from it right after the swap (read here: no DDL runs until then unseen)
        self.old_keys = [fk.name for fk in own_foreign_keys(lock_conn, db, spec.table)]
        if not self.is_mariadb:
            return tables, None
        if not rename_queues_on_original(spec.table, [spec.new_table, spec.old_table]):
            raise CutoverAborted(f"helper tables {spec.new_table}, {spec.old_table} sort before "
                                 f"{spec.table}: the RENAME would not queue on the original table")
        # Sentry and RENAME session are made ready before the lock: neither belongs in the window.
        drop_sentry(lock_conn, self.ctx.spec)
        query(lock_conn, f"CREATE TABLE {qualified(db, spec.old_table)} (sentry INT) COMMENT=%s",
              (SENTRY_COMMENT,))
        tables.append(qualified(db, spec.old_table))
        return tables, Renamer(self.ctx, max(2, int(window_s) + 2), self._swap_sql())

    def _drain_under_lock(self, lock_conn: pymysql.connections.Connection, reader: FenceReader,
                          start: dict[int, int], deadline: float) -> int:
        """Under the lock: drain the last changes to a fence in the lock session, then carry the AUTO_INCREMENT
        counter over and add the new table's foreign keys; returns the keys drained. A drain or a statement that
        does not fit the window ends the attempt (CutoverAborted)."""
        try:
            with within_window("under the lock"):
                _, drained = self.fence.drain(lock_conn, reader, start, f"lock-{uuid.uuid4().hex[:12]}",
                                              max(deadline - time.monotonic(), 0.01), False)
                self._carry_auto_increment(lock_conn)
                self.keys_added = add_foreign_keys(lock_conn, self.ctx.spec, self.ctx.migration.options)
        except FenceTimeout as exc:
            raise CutoverAborted(f"changes did not drain within the window: {exc}") from None
        return drained

    def _rename_queued(self, lock_conn: pymysql.connections.Connection, renamer: Renamer, locked_at: float,
                       deadline: float) -> float:
        """MariaDB, once the lease is proved: queue the RENAME on the lock session's metadata locks, drop the
        sentry and unlock, so that the RENAME runs ahead of every waiting write; returns the milliseconds writes
        were blocked."""
        check_swap_settings(lock_conn, self.is_mariadb)   # once more, before the RENAME is queued
        self._queue_rename(renamer, deadline)
        query(lock_conn, f"DROP TABLE {qualified(self.ctx.spec.database, self.ctx.spec.old_table)}")
        query(lock_conn, "UNLOCK TABLES")
        renamer.join()
        if renamer.error is not None:
            raise CutoverAborted(f"rename failed: {renamer.error}")
        return (renamer.finished_at - locked_at) * 1000

    @staticmethod
    def _rename_in_lock_session(lock_conn: pymysql.connections.Connection, rename_sql: str, locked_at: float,
                                deadline: float, window_s: float) -> float:
        """MySQL, once the lease is proved: `rename_sql` in the lock session itself, still within the window, then
        unlock; returns the milliseconds writes were blocked."""
        if time.monotonic() > deadline:
            raise CutoverAborted(f"window of {window_s:.1f} s exceeded")
        query(lock_conn, rename_sql)
        query(lock_conn, "UNLOCK TABLES")
        return (time.monotonic() - locked_at) * 1000

    def _aborted(self, exc: CutoverAborted, lock_conn: pymysql.connections.Connection, renamer: Renamer | None,
                 locked_at: float) -> CutoverResult:
        """Roll an attempt back that did not fit (or gave way to a throttle) and say what it cost."""
        self._roll_back(lock_conn, renamer)
        blocked = (time.monotonic() - locked_at) * 1000 if locked_at else 0.0
        log_event(log, "cutover attempt postponed" if exc.throttled else "cutover attempt rolled back",
                  logging.INFO if exc.throttled else logging.WARNING, reason=str(exc))
        return CutoverResult(False, blocked, 0, str(exc), blockers=exc.blockers, throttled=exc.throttled)

    def _withdraw(self, renamer: Renamer, lock_conn: pymysql.connections.Connection) -> None:
        """End the RENAME's session (our own user's: no privilege needed) until its thread is gone, through the
        lock session or, if that one was cut, a new one; the sentry stays the guard if that fails.

        The connection, not the statement: a KILL QUERY that arrives before the RENAME is dispatched is
        cleared when it is, and the attempt may give up before it has seen the RENAME queue. The RENAME
        cannot be granted meanwhile: the lock session holds the table."""
        end = time.monotonic() + WITHDRAW_WAIT_S
        killer, own = lock_conn, False
        try:
            while renamer.is_alive() and time.monotonic() < end:
                try:
                    kill_connection(killer, renamer.thread_id)
                except pymysql.err.Error:
                    if own:
                        raise
                    killer, own = self.ctx.db(), True
                    continue
                renamer.join(0.05)
        except (pymysql.err.Error, DatabaseUnreachable) as exc:
            log_event(log, "queued RENAME not withdrawn; the sentry makes it fail", logging.WARNING, reason=str(exc))
        finally:
            if own:
                killer.close()
        if renamer.is_alive():
            log_event(log, "queued RENAME still running after its session was killed; the sentry makes it fail",
                      logging.WARNING, waited_s=WITHDRAW_WAIT_S)

    def _queue_rename(self, renamer: Renamer, deadline: float) -> None:
        """Issue the RENAME and wait until it queues on the lock session's metadata locks.

        It is issued only after the drain: while a RENAME waits on the metadata lock, the lock
        session's fence commit was seen to reach the binlog about a second late.
        """
        renamer.start()
        probe = self.ctx.db()
        try:
            while not renamer.waiting_on_table_lock(probe):
                if time.monotonic() > deadline or not renamer.is_alive():
                    raise CutoverAborted("the RENAME session did not queue within the window")
                time.sleep(0.002)
            queued = queued_statements(probe, self.ctx.spec.database, self.ctx.spec.table, (renamer.thread_id,))
        finally:
            probe.close()
        if queued:   # it may be granted before the RENAME: the check made under the lock would not hold
            session, statement = queued[0]
            raise CutoverAborted(f"session {session} runs a statement on {self.ctx.spec.qualified_name} that is "
                                 f"not a row change ({' '.join(statement.split())[:120]!r}) and may run before "
                                 "the RENAME; the next attempt checks the table again")
        if time.monotonic() > deadline:
            raise CutoverAborted(f"window of {self.ctx.spec.cutover_window_s:.1f} s exceeded")

    def _carry_auto_increment(self, lock_conn: pymysql.connections.Connection) -> None:
        """Give the new table the original's AUTO_INCREMENT counter, read under the lock.

        The copy inserts explicit ids, so the new table's counter stands just above the largest id it
        holds; ids handed out and deleted since (or rows rolled back) would be handed out again.
        """
        spec = self.ctx.spec
        if not self.is_mariadb:   # MySQL 8 caches information_schema table statistics, the counter too
            query(lock_conn, "SET SESSION information_schema_stats_expiry = 0")
        rows = query(lock_conn, "SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES "
                                "WHERE TABLE_SCHEMA=%s AND TABLE_NAME IN (%s, %s)",
                     (spec.database, spec.table, spec.new_table))

        def counter(name: str) -> int | None:
            """The exact name's counter; with lower_case_table_names the server stores another case."""
            exact = [value for stored, value in rows if stored == name]
            folded = [value for stored, value in rows if stored.lower() == name.lower()]
            return (exact or folded or [None])[0]
        source, target = counter(spec.table), counter(spec.new_table)
        if source is not None and target is not None and int(target) < int(source):
            query(lock_conn, f"ALTER TABLE {qualified(spec.database, spec.new_table)} AUTO_INCREMENT = {int(source)}")

    def _roll_back(self, lock_conn: pymysql.connections.Connection, renamer: Renamer | None) -> None:
        """Withdraw a queued RENAME, put the triggers back on the original if they were being moved, unlock with the
        sentry still in place (so a RENAME the withdrawal missed fails on it), then remove the sentry.

        The sentry alone is not enough: a statement queued on it before the RENAME (a DROP of `t_osc_old`)
        is granted first at the unlock, and the RENAME would then swap."""
        if renamer is not None and renamer.started and renamer.is_alive():
            self._withdraw(renamer, lock_conn)
        if self.triggers_moved:   # before the unlock: no write may reach the table without them
            self._settle_triggers(lock_conn)
        try:   # while the lock holds the new table: no write can wait for it
            if self.keys_added:
                remove_foreign_keys(lock_conn, self.ctx.spec, self.ctx.migration.options, self.keys_added)
                self.keys_added = []
        except pymysql.err.Error as exc:
            log_event(log, "new table's foreign keys not removed; the next attempt removes them", logging.WARNING,
                      reason=str(exc))
        query(lock_conn, "UNLOCK TABLES")
        if renamer is not None and renamer.started:
            renamer.join()
        if self.is_mariadb:
            drop_sentry(lock_conn, self.ctx.spec)


def drop_sentry(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """Remove a sentry table left by an earlier attempt (never a real table: known by its comment)."""
    comment = scalar(conn, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                           "AND TABLE_NAME=%s", (spec.database, spec.old_table))
    if comment == SENTRY_COMMENT:
        query(conn, f"DROP TABLE {qualified(spec.database, spec.old_table)}")
