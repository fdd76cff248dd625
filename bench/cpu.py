"""Where the machine's CPU went during one run, by process role.

On the benchmark's machine the database, Kafka, Kafka Connect, Redis, the load generator and the tool share
the same cores, so the cores a tool's pipeline takes are cores the application waits for. The figures are
cores used on average over the run (CPU seconds ÷ wall seconds) per role, read from /proc at the run's start
and end (a process that started in between counts whole; the tool's own process is measured by its rusage
in bench/tools.py), and the share of the machine that was busy (neither idle nor waiting for I/O).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from stack.process import proc_stat

ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("database", ("mariadbd", "mysqld")),
    ("kafka_connect", ("ConnectDistributed", "connect-distributed")),
    ("kafka", ("kafka.Kafka",)),
    ("redis", ("redis-server",)),
    ("load", ("sysbench",)),
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
Process = tuple[int, int, str]     # pid, start time in ticks since boot (a reused pid is another process), role


def role_of(cmdline: str) -> str | None:
    """The role of a process from its command line; None for processes the benchmark does not report."""
    for role, marks in ROLES:
        if any(mark in cmdline for mark in marks):
            return role
    return None


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds per process of a role, the machine's busy and total ticks, and the time since boot in
    ticks, at one moment."""

    at: float
    by_process: dict[Process, float]
    busy_ticks: int
    total_ticks: int
    uptime_ticks: int = 0


def cpu_seconds(stat: list[str]) -> float:
    """A process's CPU seconds so far from its /proc/<pid>/stat fields (14, 15: utime, stime)."""
    return (int(stat[13]) + int(stat[14])) / CLOCK_TICKS


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of one process so far (0 once it is gone)."""
    stat = proc_stat(pid)
    return 0.0 if stat is None else cpu_seconds(stat)


def snapshot() -> CpuSnapshot:
    """Read every reported process's CPU seconds and the machine's ticks now."""
    by_process: dict[Process, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:    # ended meanwhile
            continue
        role = role_of(cmdline)
        stat = proc_stat(int(entry)) if role is not None else None
        if stat is not None:   # field 22: start time
            by_process[(int(entry), int(stat[21]), role)] = cpu_seconds(stat)
    ticks = [int(v) for v in open("/proc/stat").readline().split()[1:9]]   # user … steal (guest is in user)
    idle = ticks[3] + ticks[4]                                               # idle + iowait
    uptime = int(float(open("/proc/uptime").read().split()[0]) * CLOCK_TICKS)
    return CpuSnapshot(time.monotonic(), by_process, sum(ticks) - idle, sum(ticks), uptime)


def cores_by_role(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float | None]:
    """`cpu_cores_<role>`: average cores per role between two snapshots (None for a role with no process
    seen); `cpu_machine_busy`: the share of all cores that was busy."""
    seconds = after.at - before.at
    if seconds <= 0:
        return {}
    cores: dict[str, float | None] = {role: None for role, _ in ROLES}
    for (pid, started, role), cpu in after.by_process.items():
        if (pid, started, role) in before.by_process:
            spent = cpu - before.by_process[(pid, started, role)]
        elif started >= before.uptime_ticks:     # started during the run: all its CPU was spent in it
            spent = cpu
        else:
            continue                             # seen only at the end though older: not guessed at
        cores[role] = (cores[role] or 0.0) + spent / seconds
    figures: dict[str, float | None] = {
        f"cpu_cores_{role}": None if value is None else round(value, 2) for role, value in cores.items()}
    total = after.total_ticks - before.total_ticks
    figures["cpu_machine_busy"] = round((after.busy_ticks - before.busy_ticks) / total, 2) if total else 0.0
    return figures
