"""Start, check and stop the embedded stack: MariaDB, Redis, Kafka (KRaft) and Kafka Connect, in that order (and,
when asked, a second MariaDB server after the first: the target of migrations to another server)."""
from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stack import connect, kafka, mariadb, redis_server
from stack.base import Service
from stack.config import StackConfig
from stack.install import install, installed
from stack.process import StackError, port_in_use, remove, rss_bytes, running_pid, spawn, stop_pid, wait_ready

SERVICES: tuple[Service, ...] = (mariadb.SERVICE, redis_server.SERVICE, kafka.SERVICE, connect.SERVICE)
TARGET = mariadb.TARGET_SERVICE   # started only when asked for (`stack up --target-server`, or by name)
ALL: tuple[Service, ...] = (mariadb.SERVICE, TARGET, redis_server.SERVICE, kafka.SERVICE, connect.SERVICE)
NAMES: tuple[str, ...] = tuple(s.name for s in ALL)
JAVA_SERVICES = {kafka.NAME, connect.NAME}


@dataclass(frozen=True)
class StartResult:
    """What `up` did for one service."""

    name: str
    pid: int
    started: bool  # False: it was already running
    seconds: float  # time from start (or from the check) to ready


@dataclass(frozen=True)
class ServiceStatus:
    """One line of `stack status`."""

    name: str
    pid: int | None
    ports: list[tuple[int, str]]
    log: Path
    rss: int | None = None
    ready: bool | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None


def select(names: Iterable[str] | None = None, target_server: bool = False) -> list[Service]:
    """Services by name, in start order (for None: the usual four, plus the target server if `target_server`)."""
    wanted = {s.name for s in SERVICES} if names is None else set(names)
    if target_server:
        wanted.add(TARGET.name)
    unknown = wanted - set(NAMES)
    if unknown:
        raise StackError(f"unknown stack service(s): {', '.join(sorted(unknown))} (known: {', '.join(NAMES)})")
    return [s for s in ALL if s.name in wanted]


@contextmanager
def _locked(config: StackConfig) -> Iterator[None]:
    """Serialise `up` and `down` on one run directory."""
    config.run_dir.mkdir(parents=True, exist_ok=True)
    with open(config.run_dir / "stack.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def service_pid(config: StackConfig, service: Service | str) -> int | None:
    """PID of the service if our PID file names a live process."""
    name = service if isinstance(service, str) else service.name
    return running_pid(config.pid_file(name))


def up(config: StackConfig, names: Iterable[str] | None = None,
       on_ready: Callable[[StartResult], None] | None = None, target_server: bool = False) -> list[StartResult]:
    """Start every selected service that is down, in order, and wait until each is ready (`target_server`: the
    second MariaDB server too).

    Services already running are left alone (only checked for readiness). Everything that can be
    checked up front (executables, free ports, jars) is, before anything starts. On a failure the
    service that failed and those this call started before it are stopped again, and StackError
    names the failed service's log.
    """
    services = select(names, target_server)
    results: list[StartResult] = []
    try:
        with _locked(config):
            to_start = [s for s in services if service_pid(config, s) is None]
            for service in to_start:
                remove(config.pid_file(service.name))
                service.preflight(config)
            for service in to_start:
                for port, label in service.ports(config):
                    if port_in_use(config.host, port):
                        raise StackError(f"port {port} ({label}) is already in use by another process")
            if any(s.name in JAVA_SERVICES for s in to_start) and not installed(config):
                install(config)
            for service in services:
                result = _start_one(config, service) if service in to_start else _check_one(config, service)
                results.append(result)
                if on_ready:
                    on_ready(result)
    except BaseException:
        # nothing is left half up: the services this call started go down again
        stop_all(config, [r.name for r in results if r.started])
        raise
    return results


def _check_one(config: StackConfig, service: Service) -> StartResult:
    pid = service_pid(config, service)
    if pid is None:  # died between the plan and now
        return _start_one(config, service)
    seconds = wait_ready(service.name, pid, lambda: service.probe(config), config.ready_timeout,
                         config.log_file(service.name))
    return StartResult(service.name, pid, started=False, seconds=seconds)


def _start_one(config: StackConfig, service: Service) -> StartResult:
    started = time.monotonic()
    service.prepare(config)
    pid = spawn(service.command(config), config.log_file(service.name), config.pid_file(service.name),
                cwd=config.run_dir)
    try:
        wait_ready(service.name, pid, lambda: service.probe(config), config.ready_timeout,
                   config.log_file(service.name))
    except BaseException:
        stop_pid(pid, timeout=service.stop_timeout)
        remove(config.pid_file(service.name))
        raise
    return StartResult(service.name, pid, started=True, seconds=time.monotonic() - started)


def stop_all(config: StackConfig, names: Iterable[str] | None = None,
             on_stopped: Callable[[str, int | None], None] | None = None) -> list[str]:
    """Stop the selected services (None: all, the target server too) in reverse start order; return the names of
    those that were running.

    Each gets SIGTERM (its whole process group), then SIGKILL after its stop timeout; PID files go.
    """
    stopped = []
    with _locked(config):
        for service in reversed(select(names, target_server=names is None)):
            pid = service_pid(config, service)
            if pid is not None:
                stop_pid(pid, timeout=service.stop_timeout)
                stopped.append(service.name)
            remove(config.pid_file(service.name))
            if on_stopped:
                on_stopped(service.name, pid)
    return stopped


def status(config: StackConfig, probe: bool = True) -> list[ServiceStatus]:
    """State of every service (the target server only while it runs): PID, ports, resident memory and (if `probe`)
    whether it answers."""
    rows = []
    for service in ALL:
        pid = service_pid(config, service)
        if service is TARGET and pid is None:
            continue
        ready = None
        if pid is not None and probe:
            try:
                ready = service.probe(config)
            except StackError:
                ready = False
        rows.append(ServiceStatus(service.name, pid, service.ports(config), config.log_file(service.name),
                                  rss_bytes(pid) if pid else None, ready))
    return rows
