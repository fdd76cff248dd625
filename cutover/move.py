"""The cutover of a table moved to another server (docs/move.md): no RENAME can span two servers.

The source table is locked (writes wait, none fails), the last changes are drained into the target in the
lock session, the drained rows are compared on both servers, the lease is proven, and the source table is
renamed away to its old-table name, queued ahead of the waiting writes exactly as the same-server swap's
RENAME (docs/cutover.md): once the lock goes, every waiting and later write to the old name fails loudly
(table does not exist) instead of landing in a table nobody reads. The moment is recorded; the application
then switches to the target (docs/move.md lists the patterns).

Both servers are looked at and bounded: the target table's holders are waited for as the source's are (a
statement on the target under the source's lock would wait for them, and the application with it); the target's
AUTO_INCREMENT is raised before the lock and only read under it (cutover/counters.py); every target statement
under the lock ends within what remains of the window (cutover/session_bounds.py, cutover/watchdog.py), or the
attempt rolls back and the source takes writes again.
"""
from __future__ import annotations

import logging
import time
import uuid

import pymysql

from core.db import qualified, query
from core.keys import Key, show_key
from core.logs import log_event
from core.source_check import check_source_unchanged
from core.swap_preconditions import check_swap_settings
from cutover.counters import FIRST_MARGIN, MARGIN_GROWTH, raise_counter, raise_to, read_counter, short_of
from cutover.session_bounds import server_is_mariadb, tighten_idle_limit
from cutover.renamer import Renamer, rename_queues_on_original
from cutover.swap import Cutover, CutoverAborted, CutoverResult, drop_sentry, SENTRY_COMMENT, within_window
from cutover.validate import row_hasher
from cutover.watchdog import StatementWatchdog
from streams.fence import FenceReader, FenceTimeout

log = logging.getLogger("stream_osc.cutover")


class MoveFailed(Exception):
    """The target does not hold what the source holds under the lock: the source table stays in place."""

    user_facing = True


class MoveCutover(Cutover):
    """Cutover attempts for a new table on another server."""

    counter_margin = FIRST_MARGIN   # grown on the instance after an attempt the source's ids outran

    def attempt(self, window_s: float, coordinator: str) -> CutoverResult:
        """One bounded attempt: lock the source, drain into the target, prove the drained rows, rename the source
        away; the applier group must be stopped (its committed offsets are the start)."""
        spec, ctx = self.ctx.spec, self.ctx
        consumer, reader = self.fence.reader()
        lock_conn = ctx.db()
        target = ctx.target_db()
        renamer: Renamer | None = None
        watchdog: StatementWatchdog | None = None
        locked_at = 0.0
        try:
            target_mariadb = server_is_mariadb(target)
            on_target = (target, target_mariadb)
            check_swap_settings(lock_conn, self.is_mariadb)   # changed since init? Refused before anything is made
            self._refuse_if_held(lock_conn, on_target)
            tables, renamer = self._ready_move(lock_conn, window_s)
            start = self.fence.catch_up(lock_conn, reader, consumer, target)
            self._raise_target_counter(lock_conn, target, target_mariadb)
            watchdog = self._bound_target(target, window_s, target_mariadb)
            self._lock(lock_conn, tables, window_s, [self.migrations_table], on_target)
            locked_at, locked_wall = time.monotonic(), time.time()
            deadline = locked_at + window_s
            self._limit_target(target, target_mariadb, watchdog, deadline)
            check_source_unchanged(lock_conn, ctx.migration)
            keys = self._drain_into_target(lock_conn, reader, start, deadline, target, target_mariadb)
            watchdog.close()
            if watchdog.fired or time.monotonic() > deadline:
                raise CutoverAborted(f"window of {window_s:.1f} s exceeded by the statements on the target")
            tighten_idle_limit(lock_conn, deadline)   # only the RENAME's queueing is left to wait for
            self._prove_lease(lock_conn, coordinator)
            if renamer is not None:
                blocked = self._rename_queued(lock_conn, renamer, locked_at, deadline)
            else:
                blocked = self._rename_in_lock_session(lock_conn, self._move_sql(), locked_at, deadline, window_s)
            log_event(log, "source renamed away; the target holds the table", blocked_ms=round(blocked, 1),
                      drained_keys=len(keys), renamed_to=spec.old_table)
            return CutoverResult(True, blocked, len(keys), locked_at=locked_wall)
        except CutoverAborted as exc:
            return self._aborted(exc, lock_conn, renamer, locked_at)
        except BaseException:
            try:
                self._roll_back(lock_conn, renamer)
            except pymysql.err.Error as exc:
                log_event(log, "cutover roll-back incomplete; the next attempt or abort removes the sentry",
                          logging.WARNING, reason=str(exc))
            raise
        finally:
            if watchdog is not None:
                watchdog.close()
            if renamer is not None:
                renamer.close_unless_started()
            lock_conn.close()
            target.close()

    def _move_sql(self) -> str:
        """The RENAME that moves the source table away to its old-table name."""
        spec = self.ctx.spec
        return f"RENAME TABLE {qualified(spec.database, spec.table)} TO {qualified(spec.database, spec.old_table)}"

    def _ready_move(self, lock_conn: pymysql.connections.Connection,
                    window_s: float) -> tuple[list[str], Renamer | None]:
        """Before the catch-up: the tables the attempt locks on the source and, on MariaDB, the sentry holding the
        old-table name (locked too) and the RENAME's own session, which waits for the lock (None on MySQL: the lock
        session renames)."""
        spec = self.ctx.spec
        source, old = qualified(spec.database, spec.table), qualified(spec.database, spec.old_table)
        tables = [source, self.fence_table]
        if not self.is_mariadb:
            return tables, None
        if not rename_queues_on_original(spec.table, [spec.old_table]):
            raise CutoverAborted(f"{spec.old_table} sorts before {spec.table}: the RENAME would not queue "
                                 "on the original table")
        drop_sentry(lock_conn, spec)
        query(lock_conn, f"CREATE TABLE {old} (sentry INT) COMMENT=%s", (SENTRY_COMMENT,))
        tables.append(old)
        return tables, Renamer(self.ctx, max(2, int(window_s) + 2), self._move_sql())

    def _drain_into_target(self, lock_conn: pymysql.connections.Connection, reader: FenceReader,
                           start: dict[int, int], deadline: float, target: pymysql.connections.Connection,
                           target_mariadb: bool) -> set[Key]:
        """Under the lock: check the target is still the server init wrote to, drain the last changes into it,
        compare the drained rows on both servers and the counters; returns the keys drained. A drain or a statement
        (on either server) that does not fit the window ends the attempt (CutoverAborted)."""
        try:
            with within_window("under the lock (on the target or the source)"):
                self.ctx.check_target(target)   # still the server init wrote to, before the drain writes there
                _, keys = self.fence.drain_keys(lock_conn, reader, start, f"lock-{uuid.uuid4().hex[:12]}",
                                                max(deadline - time.monotonic(), 0.01), False, target)
                self._prove_rows(lock_conn, target, keys)
                self._check_target_counter(lock_conn, target, target_mariadb)
        except FenceTimeout as exc:
            raise CutoverAborted(f"changes did not drain within the window: {exc}") from None
        return keys

    def _prove_rows(self, lock_conn: pymysql.connections.Connection, target: pymysql.connections.Connection,
                    keys: set[Key]) -> None:
        """Compare the drained keys' rows on both servers under the lock (each hashed by its own server, as
        validation hashes them): the writes acknowledged before the lock are all in the target. The rows written
        earlier were compared by validation and kept by the appliers, which re-read the source by key."""
        if not keys:
            return
        pair = self.ctx.pair
        hasher = row_hasher(target, pair)
        ordered = list(keys)
        where, params = pair.pk.in_list(len(ordered)), pair.pk.flat(ordered)
        width = len(pair.pk.names)
        source_rows = {tuple(r[:width]): r[width] for r in query(
            lock_conn, f"SELECT {pair.pk.column_list()}, {hasher.row_sql(True)} FROM {pair.source_name} "
                       f"WHERE ({where}){pair.source_filter}", params)}
        target_rows = {tuple(r[:width]): r[width] for r in query(
            target, f"SELECT {pair.pk.column_list()}, {hasher.row_sql(False)} FROM {pair.target_name} "
                    f"WHERE {where}", params)}
        if source_rows != target_rows:
            differing = [k for k in source_rows.keys() | target_rows.keys() if source_rows.get(k) != target_rows.get(k)]
            first = show_key(pair.pk, differing[0])
            raise MoveFailed(f"{len(differing)} of the {len(keys)} rows drained under the lock differ between "
                             f"{self.ctx.spec.qualified_name} and the target (first {first}); the source table is "
                             "left in place")
        log_event(log, "drained rows equal on both servers", logging.DEBUG, rows=len(keys))

    def _raise_target_counter(self, lock_conn: pymysql.connections.Connection,
                              target: pymysql.connections.Connection, target_mariadb: bool) -> None:
        """Before the lock: the target's AUTO_INCREMENT raised to the source's plus the margin, its statement
        queueing at most --lock-wait-timeout (a session that appeared on the target table since the look makes the
        attempt roll back, having locked nothing)."""
        spec = self.ctx.spec
        source = read_counter(lock_conn, spec.database, spec.table, self.is_mariadb)
        current = read_counter(target, spec.target_database, spec.new_table, target_mariadb)
        value = raise_to(source, current, self.counter_margin)
        if value is None:
            return
        try:
            raise_counter(target, spec.target_database, spec.new_table, value, target_mariadb, spec.lock_wait_s)
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in (1205, 1969):   # lock wait timeout; MariaDB max_statement_time
                raise CutoverAborted(f"the target table's AUTO_INCREMENT could not be raised within "
                                     f"{spec.lock_wait_s:.2f} s (a session holds the table there)") from None
            raise
        log_event(log, "target AUTO_INCREMENT raised before the lock", source=source, was=current, now=value)

    def _check_target_counter(self, lock_conn: pymysql.connections.Connection,
                              target: pymysql.connections.Connection, target_mariadb: bool) -> None:
        """Under the lock, reads only: the target would hand out no id the source handed out (or rolled back).
        Short of it, the attempt rolls back and the next one raises with a larger margin."""
        spec = self.ctx.spec
        source = read_counter(lock_conn, spec.database, spec.table, self.is_mariadb)
        current = read_counter(target, spec.target_database, spec.new_table, target_mariadb)
        if short_of(source, current):
            self.counter_margin *= MARGIN_GROWTH
            raise CutoverAborted(f"the source's AUTO_INCREMENT ({source}) passed the target's ({current}) since it "
                                 f"was raised; the next attempt raises it {self.counter_margin} ahead")
