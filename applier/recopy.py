"""Re-copy rows by primary key: make the new table match the source's current state.

State-based apply: docs/invariants.md, 2.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

import pymysql

from applier.conflicts import ROUNDS, ConstraintCheck, primary_key_race, with_refusals_resolved
from applier.giving_way import LockWaits, giving_way, share_lock
from applier.remote import CollidingKeys, kept_colliding, read_keys, write_rows
from core.context import StopRequested
from core.keys import Key, show_key
from core.table import TablePair
from core.db import query, query_count, quote_ident
from core.logs import log_event

log = logging.getLogger("stream_osc.apply")

T = TypeVar("T")
RETRYABLE = {1205, 1213}   # lock wait timeout, deadlock
PK_RACE_RETRIES = 5        # a concurrent re-copy of the same key (an applier and a validation repair)
CONFIRM_ROUNDS = 10        # re-copies of keys present in one table only until both agree


def recopy_keys(conn: pymysql.connections.Connection, pair: TablePair, keys: Collection[Key],
                in_transaction: bool = True,
                target: pymysql.connections.Connection | None = None,
                waits: LockWaits | None = None, stop: threading.Event | None = None) -> tuple[int, int]:
    """Make the new table's rows of `keys` what the source holds now, a transaction per part of at most
    MAX_LOCKED_KEYS keys: a locking read of the source, then the new table's rows of the keys deleted and the
    present ones inserted by INSERT … SELECT (or, where the primary key is the new table's only unique key, the
    present ones written in place and only the others deleted: _write_upserting); returns (rows written, rows of the
    new table deleted).

    The locking read comes first and alone: it makes sure any writer of these keys has committed (a change
    reaches the binlog before a plain read can see it) and locks exactly the rows it returns (the
    session is READ COMMITTED). It never waits while holding rows (NOWAIT; a part meeting a locked row is
    split, and one key alone waits: applier/giving_way.py), so the tool gives way to the application and is
    never a lock cycle's heavier side. The later statements read those locked rows without locking again: a
    second, differently-moded lock request on a row an application UPDATE already waits for would
    deadlock with it, and the application's statement would be the victim.

    Which keys match which rows is left to the server: a change key `User1@x` finds the source row
    `uSER1@X` under a case-insensitive collation; the new table's rows are deleted by the change keys
    and the rows inserted are the source rows those keys found. Python never decides two keys differ.

    The write never deletes a row other than the keys' own (REPLACE would, silently, for a row that
    collides under a UNIQUE key). When the new table refuses a row, the rows involved are checked by the
    server (applier/conflicts.py): a stale row of the new table is removed, a real violation (the
    application wrote data the new definition refuses) stops the migration with ConstraintViolated.

    A key whose locking read finds no row locks nothing: another re-copy may write the row inserted meanwhile just
    before this one's delete removes it. So after such a read, the keys the two tables then disagree on are
    re-copied again, up to CONFIRM_ROUNDS times; keys still disagreeing then are logged and left to their own
    changes (a row that keeps coming and going has one for each write) and to validation, if it is still to run.

    With in_transaction=False (the session holding LOCK TABLES, where BEGIN would release the locks)
    the transaction is opened by turning autocommit off, which keeps the table locks.

    A new table on another server is written through `target` (applier/remote.py): the source's locking
    read is held until the target has committed, so two re-copies of a key write it in the order they read it.
    """
    if not keys:
        return 0, 0
    distinct = list(dict.fromkeys(keys))   # exact duplicates only: equality under a collation is the server's
    assert target is not None or not pair.remote, "a new table on another server is written through its own session"

    def recopy_part(part: list[Key], nowait: bool) -> tuple[int, int]:
        if target is not None and pair.remote:
            return _write_remote(conn, target, pair, part, in_transaction, nowait,
                                 lambda others: recopy_keys(conn, pair, others, in_transaction, target, waits, stop))
        return _recopy_local(conn, pair, part, in_transaction, share_lock(conn, nowait))

    done = giving_way(recopy_part, distinct, show=lambda key: show_key(pair.pk, key), waits=waits, stop=stop)
    return sum(written for written, _ in done), sum(deleted for _, deleted in done)


def _recopy_local(conn: pymysql.connections.Connection, pair: TablePair, keys: list[Key], in_transaction: bool,
                  lock: str) -> tuple[int, int]:
    """recopy_keys for one part of the keys, the new table on the source's server; `lock` ends the locking read."""
    written, deleted, unsettled = 0, 0, keys
    for _ in range(CONFIRM_ROUNDS):
        rows, removed = with_refusals_resolved(
            conn, pair,
            lambda constraint_check, batch=unsettled: _write_racing(conn, pair, batch, in_transaction,
                                                                    constraint_check, lock),
            during_apply=True, rounds=ROUNDS)
        written, deleted = written + rows, deleted + removed
        if rows >= len(unsettled):
            return written, deleted   # every key's row was locked from its read to the commit
        unsettled = _keys_present_on_one_side(conn, pair, unsettled)
        if not unsettled:
            return written, deleted
    log_event(log, "keys still present in only one of the tables after their re-copies; left to their changes "
                   "and to validation", logging.WARNING, keys=len(unsettled), rounds=CONFIRM_ROUNDS,
              first=show_key(pair.pk, unsettled[0]))
    return written, deleted


def _keys_present_on_one_side(conn: pymysql.connections.Connection, pair: TablePair,
                              keys: Sequence[Key]) -> list[Key]:
    """After a re-copy that found a key without a row (its locking read locked nothing, READ COMMITTED): the keys
    of rows that the source or the new table holds and the other does not. Another re-copy may have written the
    row inserted meanwhile just before this one's delete removed it; those keys are re-copied again. (The delete
    is all such a re-copy writes for that key: it can remove a row, never write an old one, so a key present on
    both sides or on neither is settled.) The server matches the two tables' rows by key, under the key's
    collation: a row is one row whichever way each table spells its key (under a PAD SPACE collation, 'a ' in a
    VARCHAR and 'a' in the CHAR the ALTER made of it). Tables are named, not aliased, and each once per
    statement: the cutover's session holds them so under LOCK TABLES."""
    pk = pair.pk

    def only_in(outer: str, inner: str) -> str:
        same_key = " AND ".join(f"{inner}.{c.ident} = {outer}.{c.ident}" for c in pk.columns)
        return (f"SELECT {pk.column_list(outer)} FROM {outer} WHERE {pk.in_list(len(keys), outer)} "
                f"AND NOT EXISTS (SELECT 1 FROM {inner} WHERE {same_key})")

    return list(dict.fromkeys(tuple(r) for outer, inner in ((pair.source_name, pair.target_name),
                                                              (pair.target_name, pair.source_name))
                              for r in query(conn, only_in(outer, inner), pk.flat(keys))))


def _write_racing(conn: pymysql.connections.Connection, pair: TablePair, keys: Sequence[Key], in_transaction: bool,
                  constraint_check: ConstraintCheck | None, lock: str) -> tuple[int, int]:
    """_write, retried while another session races it on the same primary key."""
    for attempt in range(PK_RACE_RETRIES):
        try:
            return _write(conn, pair, keys, in_transaction, constraint_check, lock)
        except pymysql.err.MySQLError as exc:
            if not primary_key_race(exc) or attempt == PK_RACE_RETRIES - 1:
                raise
            # the retry's DELETE finds the other session's row and locks it
    raise AssertionError("unreachable")


def _write(conn: pymysql.connections.Connection, pair: TablePair, keys: Sequence[Key], in_transaction: bool,
           constraint_check: ConstraintCheck | None, lock: str) -> tuple[int, int]:
    """One transaction of recopy_keys; with a ConstraintCheck, the stale rows colliding with the keys' are
    removed (or the keys' rows refused) before the insert."""
    if in_transaction:
        conn.begin()
    else:
        conn.autocommit(False)
    pk = pair.pk
    try:
        present = [tuple(r) for r in query(conn, f"SELECT {pk.column_list()} FROM {pair.source_by_key} "
                                                 f"WHERE {pk.in_list(len(keys))}{lock}", pk.flat(keys))]
        if pair.upsert and constraint_check is None:
            deleted = _write_upserting(conn, pair, keys, present)
            conn.commit()
            return len(present), deleted
        deleted = query_count(conn, f"DELETE FROM {pair.target_name} WHERE {pk.in_list(len(keys))}", pk.flat(keys))
        if present and constraint_check is not None:
            constraint_check.remove_stale_collisions(present)
            constraint_check.write_checked()
        elif present:
            query(conn, f"INSERT INTO {pair.target_name} ({pair.target_column_list}) SELECT {pair.source_column_list} "
                        f"FROM {pair.source_name} WHERE {pk.in_list(len(present))}", pk.flat(present))
        conn.commit()
        return len(present), deleted
    except BaseException:
        conn.rollback()
        raise
    finally:
        if not in_transaction:
            conn.autocommit(True)


def _write_upserting(conn: pymysql.connections.Connection, pair: TablePair, keys: Sequence[Key],
                     present: Sequence[Key]) -> int:
    """_write's statements where the primary key is the new table's only unique key, unchanged by the ALTER
    (TablePair.upsert): the rows of the keys the locking read found are written in place, one INSERT … SELECT … ON
    DUPLICATE KEY UPDATE assigning every copied column, the key's own included (a key changed only in case ends with
    the source's bytes); a row already equal is compared, not written. Only the new table's rows of keys the locking
    read did not find are deleted, matched by the server against the rows it found (the statement reads the new table
    alone: a DELETE reading the source would take share locks there and wait for an application's row while holding
    the found ones). When every key found a row (each key matches at most one), no DELETE runs. Returns the rows
    deleted. A duplicate can only be the same key, so nothing is merged that the ALTER would refuse."""
    pk, deleted = pair.pk, 0
    if len(present) < len(keys):
        found = f" AND NOT ({pk.in_list(len(present))})" if present else ""
        deleted = query_count(conn, f"DELETE FROM {pair.target_name} WHERE {pk.in_list(len(keys))}{found}",
                              pk.flat(keys) + pk.flat(present))
    if present:
        assign = ", ".join(f"{quote_ident(t)} = {pair.source_name}.{quote_ident(s)}"
                           for t, s in zip(pair.target_columns, pair.source_columns))
        source_columns = ", ".join(f"{pair.source_name}.{quote_ident(s)}" for s in pair.source_columns)
        query(conn, f"INSERT INTO {pair.target_name} ({pair.target_column_list}) SELECT {source_columns} "
                    f"FROM {pair.source_name} WHERE {pk.in_list(len(present))} ON DUPLICATE KEY UPDATE {assign}",
              pk.flat(present))
    return deleted


def _write_remote(conn: pymysql.connections.Connection, target: pymysql.connections.Connection, pair: TablePair,
                  keys: Sequence[Key], in_transaction: bool, nowait: bool,
                  recopy_others: Callable[[list[Key]], object]) -> tuple[int, int]:
    """recopy_keys for a new table on another server. Rows of the new table that the batch collides with under a
    UNIQUE key are re-copied with it: the re-copy starts again with their keys added, so that the source is still
    read by one locking read, in key order (a second locking read would lock keys below those already held). Not
    so for a held key's waiting read, which must lock that key alone (applier/giving_way.py): the rows it collides
    with are re-copied first, on their own, by `recopy_others`, and the key is read again alone."""
    lock = share_lock(conn, nowait)
    refusal: pymysql.err.MySQLError | None = None
    for _ in range(ROUNDS):
        try:
            return _write_remote_keys(conn, target, pair, keys, in_transaction, lock)
        except CollidingKeys as more:
            refusal = more.refusal
            if nowait:
                keys = list(dict.fromkeys([*keys, *more.keys]))
            else:
                recopy_others(list(more.keys))
    assert refusal is not None
    raise kept_colliding(pair, refusal, True)


def _write_remote_keys(conn: pymysql.connections.Connection, target: pymysql.connections.Connection,
                       pair: TablePair, keys: Sequence[Key], in_transaction: bool, lock: str) -> tuple[int, int]:
    """_write_remote for a given key list: the source transaction's locking read, the target's write.

    The locking read orders two re-copies of a key only when it finds the row: a key without a row locks nothing
    (READ COMMITTED), so the row can be inserted, and another re-copy read and write it, before this one's delete
    reaches the target. So when a key found no row, the keys are read again once the target has committed, and the
    rows that differ from the last read (come, gone or changed) are written again, until a read finds what was
    written. A row read the same both times was locked from the first read to its write; a key without a row both
    times had nothing to write, and a row written for it meanwhile by another re-copy went with a change of its own."""
    width = len(pair.pk.names)
    written, deleted, previous = 0, 0, None
    for _ in range(CONFIRM_ROUNDS):
        if in_transaction:
            conn.begin()
        else:
            conn.autocommit(False)
        try:
            present = read_keys(conn, pair, keys, lock)
            if previous is not None:
                present_now, before = Counter(present), Counter(previous)
                differing = list(dict.fromkeys(r[:width] for r in (present_now - before) + (before - present_now)))
                if not differing:
                    conn.commit()
                    return written, deleted
                keys, again = differing, set(differing)
                present = [r for r in present if r[:width] in again]
            deleted += write_rows(target, pair, pair.pk.in_list(len(keys)), pair.pk.flat(keys), present,
                                  during_apply=True)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            if not in_transaction:
                conn.autocommit(True)
        written, previous = written + len(present), present
        if len(present) >= len(keys):
            return written, deleted   # every key's row was locked from its read to the target's commit
    log_event(log, "keys whose last two reads still differed after their re-copies; left to their changes and "
                   "to validation", logging.WARNING, keys=len(keys), rounds=CONFIRM_ROUNDS,
              first=show_key(pair.pk, keys[0]))
    return written, deleted


def with_retry(action: Callable[[], T], attempts: int = 20, stop: threading.Event | None = None) -> T:
    """Run a DB action, retrying on deadlock / lock wait timeout with a short backoff.

    With `stop`, a worker asked to stop gives up at its next retry (StopRequested) instead of trying on: a row
    lock an application holds for minutes would otherwise hold the worker's stop, and the coordinator joining
    it (at a `set`, a cutover attempt), for every attempt's wait.
    """
    for attempt in range(attempts):
        try:
            return action()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in RETRYABLE or attempt == attempts - 1:
                raise
            backoff = min(0.05 * 2 ** attempt, 2.0)
            if stop is None:
                time.sleep(backoff)
            elif stop.wait(backoff):
                raise StopRequested(f"asked to stop while retrying after error {exc.args[0]}") from exc
    raise AssertionError("unreachable")
