"""A chunk leased by a copy worker whose process died on this host is taken over at once, so a migration
resumed after a crash copies on without waiting out the lease; a living holder's lease, or one held on
another host, or in another pid space under the same hostname (a container sharing the host's network), is
waited out (real Redis)."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest
import redis

from applier.chunks import ChunkQueue
from core import redis_keys
from core.process_owner import owner_name
from tests.integration.helpers import owner_of

pytestmark = pytest.mark.integration

# a host or container sharing this hostname, with a pid namespace (or boot) of its own
OTHER_PID_SPACE = "0123456789ab"

MIGRATION_ID = 990_001   # no migration of the metadata schema has it: the keys are this test's own


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def client(endpoints):
    client = redis.Redis.from_url(endpoints.redis_url)
    keys = [redis_keys.pending_chunks(MIGRATION_ID), redis_keys.queue_seeded(MIGRATION_ID),
            redis_keys.chunk_lease(MIGRATION_ID, 0)]
    client.delete(*keys)
    yield client
    client.delete(*keys)
    client.close()


@pytest.mark.parametrize("holder, taken", [
    (lambda: f"{owner_of(dead_pid())}:0011aabb", True),
    (lambda: f"{owner_name()}:0011aabb", False),
    (lambda: f"another-host-{owner_of(dead_pid())}:0011aabb", False),
    (lambda: f"{socket.gethostname()}:{dead_pid()}:a1b2c3:{OTHER_PID_SPACE}:0011aabb", False),
    (lambda: f"{socket.gethostname()}:{dead_pid()}:a1b2c3:0011aabb", False),
], ids=["dead_on_this_host", "alive_on_this_host", "on_another_host",
        "same_hostname_other_pid_space", "named_by_an_earlier_version"])
def test_a_chunk_is_taken_from_a_dead_holder_at_once_and_never_from_a_living_or_remote_one(client, holder, taken):
    queue = ChunkQueue(client, MIGRATION_ID)
    queue.seed([0])
    lease = redis_keys.chunk_lease(MIGRATION_ID, 0)
    held_by = holder()
    client.set(lease, held_by, px=15_000)
    assert queue.claim() == (0 if taken else None)
    assert client.get(lease).decode() == (queue.owner if taken else held_by)
    assert client.pttl(lease) > 10_000   # a lease taken over is a full lease; one not taken is left as it was
