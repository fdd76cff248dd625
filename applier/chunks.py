"""Chunk plan and the Redis work queue with leases (Redis is a cache; the metadata schema is the truth)."""
from __future__ import annotations

import uuid

import pymysql
import redis

from core.db import query
from core import redis_keys


def next_boundary(conn: pymysql.connections.Connection, table: str, pk: str, start: int, end: int,
                  rows: int) -> int | None:
    """The PK `rows` rows after `start` within [start, end] (walking the PK index), or None if fewer remain."""
    found = query(conn, f"SELECT {pk} FROM {table} WHERE {pk} >= %s AND {pk} <= %s ORDER BY {pk} "
                        "LIMIT 1 OFFSET %s", (start, end, rows))
    return int(found[0][0]) if found else None


def key_ranges(conn: pymysql.connections.Connection, table: str, pk: str, lo: int, hi: int,
               rows: int) -> list[tuple[int, int]]:
    """Contiguous inclusive PK ranges covering [lo, hi], each holding at most `rows` rows (sparse keys welcome)."""
    ranges: list[tuple[int, int]] = []
    start = lo
    while start <= hi:
        boundary = next_boundary(conn, table, pk, start, hi, rows)
        if boundary is None:
            ranges.append((start, hi))
            break
        ranges.append((start, boundary - 1))
        start = boundary
    return ranges


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

