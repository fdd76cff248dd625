"""Who holds a lease: a name per process start that says where it ran, and whether it is known to be gone.

A lease held by a process that died on this host need not be waited out: the coordinator lease (migration/lease.py)
and the copy's chunk leases (applier/chunks.py) are taken over at once. A holder on another host is waited for.
"""
from __future__ import annotations

import os
import socket
import uuid


def owner_name() -> str:
    """host:pid:random, unique per process start, readable in `status`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def is_dead_here(owner: str) -> bool:
    """True when `owner` (an owner_name, possibly with more after it) ran on this host and its process is gone.
    A pid reused since by another process reads as alive: the lease is then waited out, as for a live holder."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
