"""Chunk plan and the Redis work queue with leases (Redis is a cache; the metadata schema is the truth)."""
from __future__ import annotations

import uuid
from collections.abc import Callable

import pymysql
import redis

from core.context import WorkStopped
from core.db import query
from core.keys import Key, PrimaryKey
from core.process_owner import is_dead_here, owner_name
from core import redis_keys

LEASE_MS = 15_000   # a dead worker's chunk is free again after this; a living one renews it while it waits


def next_boundary(conn: pymysql.connections.Connection, table: str, pk: PrimaryKey, start: Key | None,
                  end: Key | None, rows: int, last: Key | None = None) -> Key | None:
    """The key `rows` rows after `start` within [start, end) (and up to `last`), walking the primary key's
    index; None if fewer remain. The server orders and compares the keys (its collations), never Python."""
    where, params = pk.in_range(start, end, last)
    found = query(conn, f"SELECT {pk.column_list()} FROM {table} WHERE {where} ORDER BY {pk.column_list()} "
                        "LIMIT 1 OFFSET %s", (*params, rows))
    return tuple(found[0]) if found else None


def key_ranges(conn: pymysql.connections.Connection, table: str, pk: PrimaryKey, start: Key | None,
               end: Key | None, rows: int,
               stopped: Callable[[], bool] = lambda: False) -> list[tuple[Key | None, Key | None]]:
    """Contiguous half-open key ranges covering [start, end), each holding at most `rows` rows now; their
    bounds are keys read from the index (None: open). Each bound walks `rows` rows of the index, so a large table
    takes a while (about 25 ms per 100,000 rows here): `stopped()` is asked between bounds (WorkStopped)."""
    ranges: list[tuple[Key | None, Key | None]] = []
    lo = start
    while True:
        if stopped():
            raise WorkStopped("the key ranges were no longer wanted")
        boundary = next_boundary(conn, table, pk, lo, end, rows)
        if boundary is None:
            ranges.append((lo, end))
            return ranges
        ranges.append((lo, boundary))
        lo = boundary


class ChunkQueue:
    """Pending chunks of one migration in a Redis sorted set; a worker owns a chunk while its lease lives.

    The lease names its worker's process (core/process_owner.py): one held by a process that died in this pid space
    is taken over at once rather than waited out, so a migration resumed after a crash copies on without a
    pause. The lease only spares work: a batch publishes its range in the chunk's row and holds that row locked
    until it commits its rows and progress together, guarded on the position (applier/README.md), so two workers
    on one chunk, as after any expired lease, neither skip nor double a range; a statement of the dead process
    still running holds that row, and the new holder waits for it.
    """

    def __init__(self, client: redis.Redis, migration_id: int, lease_ms: int = LEASE_MS) -> None:
        self.r = client
        self.migration_id = migration_id
        self.lease_ms = lease_ms
        self.owner = f"{owner_name()}:{uuid.uuid4().hex[:8]}"   # one per worker, several per process

    def seed(self, pending: list[int]) -> None:
        """(Re)build the queue from the durable list of unfinished chunks."""
        pipe = self.r.pipeline()
        pipe.delete(redis_keys.pending_chunks(self.migration_id))
        if pending:
            pipe.zadd(redis_keys.pending_chunks(self.migration_id), {str(n): n for n in pending})
        pipe.set(redis_keys.queue_seeded(self.migration_id), "1")
        pipe.execute()

    def is_seeded(self) -> bool:
        return bool(self.r.exists(redis_keys.queue_seeded(self.migration_id)))

    def claim(self) -> int | None:
        """Lease the first pending chunk nobody living holds; None when none is free."""
        for member in self.r.zrange(redis_keys.pending_chunks(self.migration_id), 0, -1):
            lease = redis_keys.chunk_lease(self.migration_id, int(member))
            if self.r.set(lease, self.owner, nx=True, px=self.lease_ms) or self._take_from_the_dead(lease):
                return int(member)
        return None

    def _take_from_the_dead(self, lease: str) -> bool:
        """Take `lease` over if its holder died in this pid space; False if it lives, is elsewhere, or another worker
        took the lease first."""
        with self.r.pipeline() as pipe:
            try:
                pipe.watch(lease)
                holder = pipe.get(lease)
                if holder is None or not is_dead_here(holder.decode()):
                    return False
                pipe.multi()
                pipe.set(lease, self.owner, px=self.lease_ms)
                pipe.execute()
                return True
            except redis.WatchError:
                return False

    def renew(self, chunk_no: int) -> bool:
        """Extend our lease; False if we lost it (then stop working on the chunk)."""
        lease = redis_keys.chunk_lease(self.migration_id, chunk_no)
        if self.r.get(lease) != self.owner.encode():
            return False
        return bool(self.r.pexpire(lease, self.lease_ms))

    def finish(self, chunk_no: int) -> None:
        pipe = self.r.pipeline()
        pipe.zrem(redis_keys.pending_chunks(self.migration_id), str(chunk_no))
        pipe.delete(redis_keys.chunk_lease(self.migration_id, chunk_no))
        pipe.execute()

    def release(self, chunk_no: int) -> None:
        """Give a chunk back without finishing it (on error or stop)."""
        if self.r.get(redis_keys.chunk_lease(self.migration_id, chunk_no)) == self.owner.encode():
            self.r.delete(redis_keys.chunk_lease(self.migration_id, chunk_no))

    def pending_count(self) -> int:
        return int(self.r.zcard(redis_keys.pending_chunks(self.migration_id)))

