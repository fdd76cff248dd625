"""Plain-process plumbing shared by the stack services: PID files, ports, detached start, stop, logs."""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class StackError(Exception):
    """A stack problem the user can act on; the CLI prints it as one `stream-osc: error: ...` line."""

    user_facing = True


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a (possibly missing) log file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


# --- PID files -------------------------------------------------------------------------------------
# A PID file holds the PID on its first line and the process start time (clock ticks since boot, from
# /proc/<pid>/stat) on the second, so that a recycled PID is never taken for our service.

def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat (field n at index n - 1), or None once the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces
    return [raw[: raw.index(" ")]] + [raw[raw.index("(") + 1: raw.rindex(")")]] + raw[raw.rindex(")") + 2:].split()


def start_time(pid: int) -> str | None:
    """Start time of a live process, or None once it has fully exited.

    A multi-threaded process (a JVM) whose main thread is already a zombie still counts as alive
    while any other thread runs: until the last one exits it keeps its files, and so its ports.
    """
    stat = proc_stat(pid)
    if stat is None or (stat[2] in ("Z", "X") and not _other_threads_running(pid)):
        return None
    return stat[21]


def _other_threads_running(pid: int) -> bool:
    try:
        tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return False
    for tid in tasks:
        try:
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def write_pid_file(path: Path, pid: int) -> None:
    """Record `pid` (and its start time) atomically."""
    tmp = path.with_suffix(".pid.tmp")
    tmp.write_text(f"{pid}\n{start_time(pid) or ''}\n")
    tmp.replace(path)


def running_pid(path: Path) -> int | None:
    """The PID recorded in `path` if that very process is still alive, else None."""
    try:
        lines = path.read_text().split()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    started = start_time(pid)
    if started is None or (len(lines) > 1 and lines[1] != started):
        return None
    return pid


def remove(path: Path) -> None:
    """Delete a file if present."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


# --- ports -----------------------------------------------------------------------------------------

def port_in_use(host: str, port: int) -> bool:
    """True when something listens on or holds host:port (a plain bind test plus a connect test)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports nobody holds right now (all held together while picking)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


# --- processes -------------------------------------------------------------------------------------

def spawn(cmd: list[str], log: Path, pid_file: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start `cmd` detached in its own session, stdout and stderr appended to `log`; write the PID file."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n==> {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True, close_fds=True)
    write_pid_file(pid_file, proc.pid)
    _detached[proc.pid] = proc
    return proc.pid


# Popen objects of the children this process started, kept so that they can be reaped (no zombies)
_detached: dict[int, subprocess.Popen] = {}


def _reap(pid: int) -> None:
    proc = _detached.get(pid)
    if proc is not None and proc.poll() is not None:
        _detached.pop(pid, None)


def alive(pid: int) -> bool:
    """True while `pid` runs (zombies count as gone; our own children are reaped)."""
    _reap(pid)
    return start_time(pid) is not None


def wait_ready(name: str, pid: int, probe: Callable[[], bool], timeout: float, log: Path,
               interval: float = 0.2) -> float:
    """Poll `probe` until it returns True; return seconds waited.

    Raises StackError (naming the service and its log, with the log's last lines) when the process
    exits or `timeout` passes first. `probe` may itself raise StackError for a failure that waiting
    cannot cure.
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if not alive(pid):
            raise StackError(f"{name} exited during start-up; see {log}:\n{tail(log)}")
        if probe():
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            raise StackError(f"{name} was not ready after {timeout:.0f} s; see {log}:\n{tail(log)}")
        time.sleep(interval)


def stop_pid(pid: int, timeout: float = 30.0) -> bool:
    """SIGTERM the process group of `pid`, wait up to `timeout` s, then SIGKILL. True if it had to be killed."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return False
    group = pgid == pid  # spawn() made every service the leader of its own session and group
    _signal(pid, signal.SIGTERM, group)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            _wait_group_gone(pid, group)
            return False
        time.sleep(0.05)
    _signal(pid, signal.SIGKILL, group)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _wait_group_gone(pid, group)
    return True


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_group_gone(pgid: int, group: bool) -> None:
    """Make sure no other member of the service's process group outlives it."""
    if not group:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        if not _group_members(pgid):
            return
        time.sleep(0.05)
    _signal(pgid, signal.SIGKILL, True)


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat and stat[4] == str(pgid) and stat[2] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process, from /proc/<pid>/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
