"""Where the benchmark's processes run: `shared` (every process on every CPU, as the embedded stack starts them) or
`split`, production's topology on one machine.

In production the database host runs the database alone; Kafka, Connect, Redis and stream-osc's workers run on
machines of their own, and only what the database host pays is felt by the application. `split` gives the
database server its own CPU and everything else the others: the broker, Connect, Redis, the target server, this
process and every process it starts (stream-osc, pt-osc, gh-ost, sysbench inherit its affinity). The JVMs run at a
lower priority (nice 5) than the load generator, so that the load's latency measures the database, not a
scheduler queue behind the broker. Pinned at the thread level (every thread of a running server: a server's new
threads inherit the affinity of the thread that makes them). Undone at the end.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from bench.sysbench import BenchError
from stack import services
from stack.config import StackConfig

TOPOLOGIES = ("shared", "split")
JVM_NICE = 5
DATABASE = "mariadb"
BESIDE = ("mariadb-target", "redis", "kafka", "connect")


def threads_of(pid: int) -> list[int]:
    """Every thread of a process (its task ids)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def pin(pid: int, cpus: set[int], nice: int | None = None) -> None:
    """Every thread of `pid` onto `cpus` (and to `nice`, a per-thread setting on Linux)."""
    for tid in threads_of(pid):
        try:
            os.sched_setaffinity(tid, cpus)
            if nice is not None:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (ProcessLookupError, FileNotFoundError):   # a thread that ended meanwhile
            continue


def split_cpus(available: Iterable[int]) -> tuple[set[int], set[int]]:
    """(the database's CPU, everything else's): the first CPU for the database, the rest for the others."""
    cpus = sorted(available)
    if len(cpus) < 2:
        raise BenchError(f"--topology split needs two CPUs; this process may use {len(cpus)}")
    return {cpus[0]}, set(cpus[1:])


def place(topology: str, config: StackConfig, say: Callable[[str], None]) -> Callable[[], None]:
    """Put the stack's processes and this one where `topology` says; returns what undoes it."""
    if topology == "shared":
        return lambda: None
    everything = set(os.sched_getaffinity(0))
    database_cpus, other_cpus = split_cpus(everything)
    database = services.service_pid(config, DATABASE)
    if database is None:
        raise BenchError("--topology split pins the embedded stack's database server, and it is not running here "
                         "(with endpoints of your own, pin their processes yourself)")
    others = {name: pid for name in BESIDE if (pid := services.service_pid(config, name)) is not None}
    pin(database, database_cpus)
    for name, pid in others.items():
        pin(pid, other_cpus, JVM_NICE if name in services.JAVA_SERVICES else None)
    os.sched_setaffinity(0, other_cpus)
    say(f"topology split: the database server on CPU {sorted(database_cpus)}, the broker, Connect, Redis, the tools "
        f"and the load on CPU {sorted(other_cpus)} (JVMs at nice {JVM_NICE})")

    def undo() -> None:
        for pid in (database, *others.values()):
            pin(pid, everything, 0)
        os.sched_setaffinity(0, everything)
    return undo
