"""Chunk plan and the Redis work queue with leases (Redis is a cache; the metadata schema is the truth)."""
from __future__ import annotations

import uuid

import pymysql
import redis

from core.db import query
from core.keys import Key, PrimaryKey
from core import redis_keys


def next_boundary(conn: pymysql.connections.Connection, table: str, pk: PrimaryKey, start: Key | None,
                  end: Key | None, rows: int, last: Key | None = None) -> Key | None:
    """The key `rows` rows after `start` within [start, end) (and up to `last`), walking the primary key's
    index; None if fewer remain. The server orders and compares the keys (its collations), never Python."""
    where, params = pk.in_range(start, end, last)
    found = query(conn, f"SELECT {pk.column_list()} FROM {table} WHERE {where} ORDER BY {pk.column_list()} "
                        "LIMIT 1 OFFSET %s", (*params, rows))
    return tuple(found[0]) if found else None


def key_ranges(conn: pymysql.connections.Connection, table: str, pk: PrimaryKey, start: Key | None,
               end: Key | None, rows: int) -> list[tuple[Key | None, Key | None]]:
    """Contiguous half-open key ranges covering [start, end), each holding at most `rows` rows now; their
    bounds are keys read from the index (None: open)."""
    ranges: list[tuple[Key | None, Key | None]] = []
    lo = start
    while True:
        boundary = next_boundary(conn, table, pk, lo, end, rows)
        if boundary is None:
            ranges.append((lo, end))
            return ranges
        ranges.append((lo, boundary))
        lo = boundary


class ChunkQueue:
    """Pending chunks of one migration in a Redis sorted set; a worker owns a chunk while its lease lives."""

    def __init__(self, client: redis.Redis, migration_id: int, lease_ms: int = 15_000) -> None:
        self.r = client
        self.migration_id = migration_id
        self.lease_ms = lease_ms
        self.owner = uuid.uuid4().hex

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
        """Lease the first pending chunk nobody holds; None when none is free."""
        for member in self.r.zrange(redis_keys.pending_chunks(self.migration_id), 0, -1):
            if self.r.set(redis_keys.chunk_lease(self.migration_id, int(member)), self.owner,
                          nx=True, px=self.lease_ms):
                return int(member)
        return None

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

