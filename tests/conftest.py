"""Shared fixtures: the endpoints of the services, with the embedded stack brought up when none are given."""
from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.endpoints import ENV_KEYS, Endpoints
from stack import services
from stack.config import PORT_ENV, StackConfig
from stack.process import free_ports, port_in_use
from tests.locks import one_at_a_time

def _stack_config() -> StackConfig:
    """The stack of this checkout; moved to free ports if its ports are held by something else.

    That happens when another checkout's stack runs on this machine (e.g. CI in a fresh clone next to
    a developer's stack): this checkout's run dir then gets its own ports for the session. The port
    variables go into os.environ, so StackConfig(), its endpoints, CLI subprocesses and the session's test
    workers (started after this, they inherit the environment) agree.
    """
    config = StackConfig()
    if any(services.service_pid(config, s) for s in services.ALL):
        return config
    ports = [port for s in services.ALL for port, _ in s.ports(config)]
    if not any(port_in_use(config.host, port) for port in ports):
        return config
    for var, port in zip(PORT_ENV.values(), free_ports(len(PORT_ENV))):
        os.environ[var] = str(port)
    moved = StackConfig()
    print(f"conftest: the default stack ports are taken; this session's stack uses "
          f"{', '.join(f'{k}={getattr(moved, k)}' for k in PORT_ENV)}", file=sys.stderr)
    return moved


def _endpoints_given() -> bool:
    """Whether STREAM_OSC_* endpoints name other servers (the stack's own variables, `eval "$(stream-osc stack env)"`,
    do not)."""
    return any(os.environ.get(var) not in (None, "", StackConfig().env()[var]) for var in ENV_KEYS.values())


def _started_record(config: StackConfig) -> Path:
    """Where the session's test workers note the services one of them started, for the session's end to stop."""
    return config.run_dir / "tests-started"


def pytest_configure(config: pytest.Config) -> None:
    """Once per session, before any worker starts: the stack's ports."""
    if not hasattr(config, "workerinput") and not _endpoints_given():
        _stack_config()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end of a session run by workers: stop what one of them started (a run without workers stops it in
    the fixture, as the one user)."""
    if hasattr(session.config, "workerinput") or _endpoints_given():
        return
    record = _started_record(StackConfig())
    if record.exists():
        services.stop_all(StackConfig(), record.read_text().split())
        record.unlink()


@pytest.fixture(scope="session")
def stack_config() -> StackConfig | None:
    """The embedded stack the session runs against, with its target server for migrations to another server, or
    None when STREAM_OSC_* endpoints are given. Workers of one session take turns to bring it up: the first starts
    it, the others find it running."""
    if _endpoints_given():
        yield None
        return
    config = StackConfig()
    config.run_dir.mkdir(parents=True, exist_ok=True)
    with one_at_a_time(config.run_dir / "tests-starting.lock", exclusive=True):
        results = services.up(config, target_server=True)   # on a failure it stops again what it started
    started = [r.name for r in results if r.started]
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if started and worker:   # stopped at the session's end, when every worker is done
        _started_record(config).write_text(" ".join(started))
    # The commands use no endpoint they are not given: the stack's are handed in as an operator on it would,
    # `eval "$(stream-osc stack env)"`, so the CLI in this process and in subprocesses finds them.
    exported = {var: value for var, value in config.env().items() if not os.environ.get(var)}
    os.environ.update(exported)
    try:
        yield config
    finally:
        for var in exported:
            os.environ.pop(var, None)
        if started and not worker:  # leave alone what was already running before the session
            services.stop_all(config, started)


@pytest.fixture(autouse=True)
def exclusive_when_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under test workers, a test marked `exclusive` (it changes what every test sees: a global server setting, the
    server's load, the stack's processes) runs alone; the others run side by side."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None or request.node.get_closest_marker("integration") is None:   # unit tests touch no service
        yield
        return
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with one_at_a_time(Path(tempfile.gettempdir()) / f"stream-osc-tests-{run}.lock", exclusive):
        yield


@pytest.fixture(scope="session")
def endpoints(stack_config: StackConfig | None) -> Endpoints:
    """The STREAM_OSC_* variables if set (STREAM_OSC_TARGET_DSN among them), else the embedded stack (brought up
    first; its target server's DSN included, its variables exported)."""
    return StackConfig().endpoints()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the tails of the logs a failed test's CLI processes wrote (`*.log` in its tmp_path) to its report."""
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when == "call" and report.failed and tmp_path is not None:
        for path in sorted(Path(tmp_path).glob("*.log")):
            report.sections.append((f"stream-osc log {path.name}", path.read_text(errors="replace")[-20_000:]))


@pytest.fixture
def cli_log(tmp_path: Path) -> Path:
    """A log file for a CLI process started by the test; its tail is shown if the test fails."""
    return tmp_path / "stream-osc.log"
