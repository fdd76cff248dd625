"""Chunk plan and the Redis work queue with leases (Redis is a cache; the metadata schema is the truth)."""
from __future__ import annotations

import uuid

import pymysql
import redis

from core.db import query


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
        self.key = f"stream-osc:{migration_id}"
        self.lease_ms = lease_ms
        self.owner = uuid.uuid4().hex

    def seed(self, pending: list[int]) -> None:
        """(Re)build the queue from the durable list of unfinished chunks."""
        pipe = self.r.pipeline()
        pipe.delete(f"{self.key}:pending")
        if pending:
            pipe.zadd(f"{self.key}:pending", {str(n): n for n in pending})
        pipe.set(f"{self.key}:seeded", "1")
        pipe.execute()

    def is_seeded(self) -> bool:
        return bool(self.r.exists(f"{self.key}:seeded"))

    def claim(self) -> int | None:
        """Lease the first pending chunk nobody holds; None when none is free."""
        for member in self.r.zrange(f"{self.key}:pending", 0, -1):
            if self.r.set(f"{self.key}:lease:{int(member)}", self.owner, nx=True, px=self.lease_ms):
                return int(member)
        return None

    def renew(self, chunk_no: int) -> bool:
        """Extend our lease; False if we lost it (then stop working on the chunk)."""
        lease = f"{self.key}:lease:{chunk_no}"
        if self.r.get(lease) != self.owner.encode():
            return False
        return bool(self.r.pexpire(lease, self.lease_ms))

    def finish(self, chunk_no: int) -> None:
        pipe = self.r.pipeline()
        pipe.zrem(f"{self.key}:pending", str(chunk_no))
        pipe.delete(f"{self.key}:lease:{chunk_no}")
        pipe.execute()

    def release(self, chunk_no: int) -> None:
        """Give a chunk back without finishing it (on error or stop)."""
        if self.r.get(f"{self.key}:lease:{chunk_no}") == self.owner.encode():
            self.r.delete(f"{self.key}:lease:{chunk_no}")

    def pending_count(self) -> int:
        return int(self.r.zcard(f"{self.key}:pending"))

    def clear(self) -> None:
        """Remove every key of this migration."""
        keys = list(self.r.scan_iter(f"{self.key}:*"))
        if keys:
            self.r.delete(*keys)
