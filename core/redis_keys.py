"""Every Redis key of a migration, named in one place.

Redis only mirrors durable state (the metadata schema) or holds what may be lost (leases, counters
for display), so clearing a migration's keys never loses progress.
"""
from __future__ import annotations

import redis

PREFIX = "stream-osc"


def _base(migration_id: int) -> str:
    return f"{PREFIX}:{migration_id}"


def pending_chunks(migration_id: int) -> str:
    """Sorted set of unfinished chunk numbers (rebuilt from the chunk table when missing)."""
    return f"{_base(migration_id)}:pending"


def queue_seeded(migration_id: int) -> str:
    """Set once the pending set was built from the chunk table."""
    return f"{_base(migration_id)}:seeded"


def chunk_lease(migration_id: int, chunk_no: int) -> str:
    """A copy worker's lease on one chunk (expires when the worker dies)."""
    return f"{_base(migration_id)}:lease:{chunk_no}"


def apply_stats(migration_id: int) -> str:
    """Hash of the appliers' counters, for the progress display."""
    return f"{_base(migration_id)}:apply"


def lock_waits(migration_id: int) -> str:
    """Hash of the keys whose re-read waits for an application's row lock now (applier/giving_way.py)."""
    return f"{_base(migration_id)}:lock-waits"


def throttle_note(migration_id: int) -> str:
    """Why the workers hold back (--max-load, --cloudwatch-max-load), for `status`; expires unless renewed."""
    return f"{_base(migration_id)}:throttled"


def blockers_note(migration_id: int) -> str:
    """The sessions a cutover waits for (JSON list), for `status`; expires unless renewed."""
    return f"{_base(migration_id)}:blockers"


def capture_note(migration_id: int) -> str:
    """The coordinator's capture lag and connector heartbeat age (JSON), for `status`; expires unless renewed."""
    return f"{_base(migration_id)}:capture"


def clear_migration(client: redis.Redis, migration_id: int) -> int:
    """Delete every key of the migration (all of them live under its prefix); returns how many."""
    keys = list(client.scan_iter(f"{_base(migration_id)}:*"))
    if keys:
        client.delete(*keys)
    return len(keys)
