"""Changes during the copy: which changed keys the copy has yet to read, so that an applier leaves them to it.

Appliers run from the start of the copy: a change to a key whose range is copied is re-copied at once, so
no backlog piles up for the copy's end. A key the copy has yet to read is left to the copy, which reads the
row as it is by then. Leaving it is safe only if that later read sees the change, and two things could stop
it from doing so:

- the change is in the binlog, and so in the topic, before a plain read can see it: the check's own read of
  the key is a locking read, which waits for the writer's commit, so every copy read that starts later sees
  the change;
- a copy batch of the key's range may have taken its snapshot before the change and still be running: it
  would then commit the old row and move its chunk past the key. Every batch holds its chunk's row
  `FOR UPDATE` from before its read until its commit (applier/copy.py), and the check locks the rows of the
  unfinished chunks first (`LOCK IN SHARE MODE`), so it waits for running batches and then reads how far
  each got. A batch that starts after the check cannot start before the check's locks are released, after
  its locking read.

A key found without a row is not left to the copy: re-copying it deletes the new table's row (if any) and
writes nothing. Should the row come back before that re-copy reads, the re-copy writes it into a range the
copy has yet to read; the batch that reads the range deletes what the new table holds there first.
"""
from __future__ import annotations

from collections.abc import Collection

import pymysql

from core.context import RunContext
from core.db import query
from core.keys import Key


def keys_left_to_copy(conn: pymysql.connections.Connection, ctx: RunContext,
                      keys: Collection[Key]) -> set[Key] | None:
    """The keys among `keys` whose rows a later copy batch reads, to be left to it; None once every chunk is
    copied (nothing is left to the copy from then on)."""
    store, pair = ctx.store(conn), ctx.pair
    conn.begin()
    try:
        pending = [store.chunk(row) for row in query(
            conn, f"SELECT {store.chunk_columns} FROM {store.t('chunks')} WHERE migration_id=%s AND NOT done "
                  "ORDER BY chunk_no LOCK IN SHARE MODE", (ctx.migration.id,))]
        if not pending:
            conn.commit()
            return None
        ranges, params = [], []
        for chunk in pending:
            where, values = pair.pk.in_range(chunk.next, chunk.end, ctx.migration.copy_until)
            ranges.append(f"({where})")
            params += values
        found = query(conn, f"SELECT {pair.pk.column_list()} FROM {pair.source_by_key} "
                            f"WHERE {pair.pk.in_list(len(keys))} AND ({' OR '.join(ranges)}) LOCK IN SHARE MODE",
                      [*pair.pk.flat(keys), *params])
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return {tuple(row) for row in found}
