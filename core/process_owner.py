"""Who holds a lease: a name per process start that says where it ran, and whether it is known to be gone.

A lease held by a process that died in this pid space need not be waited out: the coordinator lease
(migration/lease.py) and the copy's chunk leases (applier/chunks.py) are taken over at once. Any other holder is
waited for.

A hostname does not say where a pid means something: two machines, or two containers sharing the host's network
(and so its hostname) with pid namespaces of their own, can each run a live process under the same pid. So a
name also carries its pid space, the kernel's boot and the pid namespace, and a pid is only looked up here when
that space is this process's own.
"""
from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid
from pathlib import Path

UNKNOWN_PLACE = "-"   # no pid space readable here (not Linux): no holder is ever judged dead, all are waited out


@functools.lru_cache(maxsize=1)
def pid_space() -> str:
    """A short digest of this process's boot id and pid namespace, or UNKNOWN_PLACE when either is unreadable."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return UNKNOWN_PLACE
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12]


def owner_name() -> str:
    """host:pid:random:pid-space, unique per process start, readable in `status`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}:{pid_space()}"


def is_dead_here(owner: str) -> bool:
    """True when `owner` (an owner_name, possibly with more after it) ran in this pid space and its process is gone.
    A pid reused since by another process reads as alive: the lease is then waited out, as for a live holder; so
    is a name from another host or container, from before a reboot, or without a pid space (an earlier version)."""
    host, pid, _, space = (owner.split(":") + ["", "", "", ""])[:4]
    if host != socket.gethostname() or not pid.isdigit() or space == UNKNOWN_PLACE or space != pid_space():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
