"""Changes during the copy: which changed keys the copy has yet to read, so that an applier leaves them to it.

Appliers run from the start of the copy: a change to a key whose range is copied is re-copied at once, so
no backlog piles up for the copy's end. A key the copy has yet to read is left to the copy, which reads the
row as it is by then. Leaving it is safe only if that later read sees the change, and two things could stop
it from doing so:

- the change is in the binlog, and so in the topic, before a plain read can see it: the sort's first read of
  the keys that may be left to it is a locking read, which waits for the writers' commits, so every copy
  read that starts later sees the change;
- a copy batch may have taken its snapshot before the change and still be running: it would then commit the
  old row and move its chunk past the key. Every batch first commits its range in its chunk's row
  (`batch_open`, `batch_end`), then holds that row `FOR UPDATE` from before its read until its commit,
  which closes the range; under the lock it checks that the published range is still its own, so a worker
  whose range another published over gives up (applier/copy.py). The sort reads the chunks after its
  locking read: a batch whose range it does not see yet starts reading after the change. A row inside an
  open range `[next, batch_end)` may be in a running batch: it is settled once the chunk's row can be
  share-locked, when that batch has committed (settle_behind_batches); a batch that starts later cannot
  start before that lock is released.

So a row waits for a batch only inside that batch's open range; a row outside every open range is re-copied
or left at once. A row the copy has read already is re-copied at once: the batch that read it has committed
(its chunk moved past it), and a later batch of the chunk starts past it. A range stays open after a batch
that did not commit (rolled back, or its process killed) until the chunk's next batch publishes: its rows
then wait for a lock nobody holds.

A key found without a row is not left to the copy: re-copying it deletes the new table's row (if any) and
writes nothing. The server places rows in ranges, not bare keys, so such a key (and a change key that
matches its row only under the collation) waits for every open batch first: a batch whose snapshot still
held the row would write it back after the re-copy's delete. Should the row come back before that re-copy
reads, the re-copy writes it into a range the copy has yet to read: the batch that reads the range deletes
what the new table holds there first. A row changed after the sort's locking read has a change of its own,
sorted when it arrives.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pymysql

from applier.giving_way import giving_way, share_lock
from core.context import RunContext
from core.db import query
from core.keys import Key, dump_key, load_key, show_key


@dataclass(frozen=True)
class SortedKeys:
    """Changed keys sorted against the copy's progress. The server places rows in ranges; a change key equal
    to no row the sort's read returned, value for value (a key without a row, or one its row matches only
    under the collation), counts as without a row, which only makes it wait longer."""

    now: set[Key]      # rows the copy read already or never will, keys without a row while no batch is open
    left: set[Key]     # rows a later batch reads, after the change: left to the copy
    behind: set[Key]   # rows perhaps inside a running batch's range, and keys without a row while a batch runs
    chunks: tuple[int, ...]   # the chunks whose batches `behind` waits for (settle_behind_batches)


@dataclass(frozen=True)
class _Pending:
    """A chunk not done: the rest of its range `[next, end)`, and `[next, batch_end)` while a batch is open."""

    number: int
    next: Key | None
    end: Key | None
    batch_open: bool         # a batch published its range and has not committed
    batch_end: Key | None    # None: the chunk's end


class KeySorter:
    """Sorts one applier's changed keys against the copy's progress, remembering the chunks as it last read
    them: the copy only moves forward, so a key outside every range pending then has been copied."""

    def __init__(self) -> None:
        self.pending: list[_Pending] | None = None   # not read yet: every key may be in a pending range
        self.copy_complete = False                   # every chunk copied: nothing is left to the copy any more

    def sort(self, conn: pymysql.connections.Connection, ctx: RunContext, keys: Collection[Key]) -> SortedKeys | None:
        """Sort `keys` without waiting for any copy batch (the first read waits for the keys' writers); None
        once every chunk is copied (nothing is left to the copy from then on).

        The first read is a locking read of the keys in the ranges pending at the last sort: the only ones
        that may be left to the copy; every other key is re-copied, by a locking read of its own. A key
        without a row cannot be placed in a range (only rows are compared by the server): while any batch is
        open it waits for all of them, since a batch whose snapshot still holds the row would write it back
        after the re-copy's delete."""
        pair = ctx.pair
        maybe_pending, maybe_params = ("TRUE", []) if self.pending is None else _ranges(ctx, self.pending)

        def wait_for_writers(part: list[Key], nowait: bool) -> None:   # one statement: its locks end with it
            query(conn, f"SELECT {pair.pk.column_list()} FROM {pair.source_by_key} "
                        f"WHERE {pair.pk.in_list(len(part))} AND ({maybe_pending}){share_lock(conn, nowait)}",
                  [*pair.pk.flat(part), *maybe_params])

        giving_way(wait_for_writers, list(keys), show=lambda key: show_key(pair.pk, key))
        self.pending = pending = _pending_chunks(conn, ctx)
        if not pending:
            self.copy_complete = True
            return None
        open_batches = [c for c in pending if c.batch_open]
        cases = [(str(c.number), *_range(ctx, c.next, c.batch_end if c.batch_end is not None else c.end))
                 for c in open_batches]
        cases.append(("-1", *_ranges(ctx, pending)))
        tag = "CASE " + " ".join(f"WHEN {where} THEN {number}" for number, where, _ in cases) + " END"
        found = query(conn, f"SELECT {pair.pk.column_list()}, {tag} FROM {pair.source_by_key} "
                            f"WHERE {pair.pk.in_list(len(keys))}",
                      [*(v for _, _, values in cases for v in values), *pair.pk.flat(keys)])
        rows: set[Key] = set()
        left: set[Key] = set()
        behind: set[Key] = set()
        chunks: set[int] = set()
        for *key, chunk_no in found:
            rows.add(tuple(key))
            if chunk_no == -1:
                left.add(tuple(key))
            elif chunk_no is not None:
                behind.add(tuple(key))
                chunks.add(int(chunk_no))
        without_row = set(keys) - rows
        if without_row and open_batches:
            behind |= without_row
            chunks |= {c.number for c in open_batches}
        return SortedKeys(set(keys) - left - behind, left, behind, tuple(sorted(chunks)))


def settle_behind_batches(conn: pymysql.connections.Connection, ctx: RunContext, sorted_keys: SortedKeys) -> set[Key]:
    """The `behind` keys left to the copy, read once the batches open in their chunks have committed: a row
    the copy has yet to read is left to it; the rest are re-copied."""
    pair = ctx.pair
    conn.begin()
    try:
        pending = _pending_chunks(conn, ctx, sorted_keys.chunks)
        if not pending:
            conn.commit()
            return set()
        ranges, params = _ranges(ctx, pending)
        found = query(conn, f"SELECT {pair.pk.column_list()} FROM {pair.source_by_key} "
                            f"WHERE {pair.pk.in_list(len(sorted_keys.behind))} AND ({ranges})",
                      [*pair.pk.flat(sorted_keys.behind), *params])
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return {tuple(row) for row in found}


def _pending_chunks(conn: pymysql.connections.Connection, ctx: RunContext,
                    locked: tuple[int, ...] | None = None) -> list[_Pending]:
    """The chunks not done; with `locked`, those of them share-locked, in chunk order (after their batches)."""
    store = ctx.store(conn)
    sql = (f"SELECT chunk_no, next_key, end_key, batch_open, batch_end FROM {store.t('chunks')} "
           "WHERE migration_id=%s AND NOT done")
    params: list = [ctx.migration.id]
    if locked is not None:
        sql += f" AND chunk_no IN ({', '.join(['%s'] * len(locked))})"
        params += locked
    sql += " ORDER BY chunk_no" + (" LOCK IN SHARE MODE" if locked is not None else "")
    return [_Pending(int(number), load_key(next_key), load_key(end), bool(is_open), load_key(batch_end))
            for number, next_key, end, is_open, batch_end in query(conn, sql, params)]


def _range(ctx: RunContext, start: Key | None, end: Key | None) -> tuple[str, list]:
    where, values = ctx.pair.pk.in_range(start, end, ctx.migration.copy_until)
    return f"({where})", values


def _ranges(ctx: RunContext, pending: list[_Pending]) -> tuple[str, list]:
    """The rest of every pending chunk, OR-ed, adjacent ones joined: chunks not started yet follow one
    another, so the rest of the copy is a few ranges however many chunks it has (a long OR can make the
    server give up on range analysis, and a locking read by the primary key would then scan the table)."""
    joined: list[tuple[Key | None, Key | None]] = []
    for chunk in pending:   # in key order
        if joined and joined[-1][1] is not None and dump_key(joined[-1][1]) == dump_key(chunk.next):
            joined[-1] = (joined[-1][0], chunk.end)
        else:
            joined.append((chunk.next, chunk.end))
    parts, params = [], []
    for start, end in joined:
        where, values = _range(ctx, start, end)
        parts.append(where)
        params += values
    return " OR ".join(parts), params
