"""Where the machine's CPU went during one run, by process role.

On the benchmark's machine the database, Kafka, Kafka Connect, the load generator and the tool share the
same cores, so the cores a tool's pipeline takes are cores the application waits for. The figures are
cores used on average over the run (CPU seconds ÷ wall seconds) per role, read from /proc at the run's
start and end for processes that live through it (the tool's own process is measured by its rusage in
bench/tools.py), and the share of the machine that was busy (neither idle nor waiting for I/O).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("database", ("mariadbd", "mysqld")),
    ("kafka_connect", ("ConnectDistributed", "connect-distributed")),
    ("kafka", ("kafka.Kafka",)),
    ("load", ("sysbench",)),
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def role_of(cmdline: str) -> str | None:
    """The role of a process from its command line; None for processes the benchmark does not report."""
    for role, marks in ROLES:
        if any(mark in cmdline for mark in marks):
            return role
    return None


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds per (pid, role) and the machine's busy and total ticks, at one moment."""

    at: float
    by_process: dict[tuple[int, str], float]
    busy_ticks: int
    total_ticks: int


def _process_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS    # utime + stime


def snapshot() -> CpuSnapshot:
    """Read every reported process's CPU seconds and the machine's ticks now."""
    by_process: dict[tuple[int, str], float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            role = role_of(cmdline)
            if role is not None:
                by_process[(int(entry), role)] = _process_cpu(int(entry))
        except OSError:    # ended meanwhile
            continue
    ticks = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    idle = ticks[3] + ticks[4]                                 # idle + iowait
    return CpuSnapshot(time.monotonic(), by_process, sum(ticks) - idle, sum(ticks))


def cores_by_role(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """`cpu_cores_<role>`: average cores per role between two snapshots (processes present in both);
    `cpu_machine_busy`: the share of all cores that was busy."""
    seconds = after.at - before.at
    if seconds <= 0:
        return {}
    cores = {role: 0.0 for role, _ in ROLES}
    for key, cpu in after.by_process.items():
        if key in before.by_process:
            cores[key[1]] += (cpu - before.by_process[key]) / seconds
    figures = {f"cpu_cores_{role}": round(value, 2) for role, value in cores.items()}
    total = after.total_ticks - before.total_ticks
    figures["cpu_machine_busy"] = round((after.busy_ticks - before.busy_ticks) / total, 2) if total else 0.0
    return figures
