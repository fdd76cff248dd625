"""Steady write load: sysbench oltp_write_only at a fixed rate, read back second by second.

It runs through bench/oltp_write_only_attributed.lua, the same script printing the id of each session it opens and
the code of each error it ignores and retries, as it happens: sysbench's own `err/s` lumps every error together."""
from __future__ import annotations

import re
import statistics
import subprocess
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.credentials import sysbench_config_file
from bench.sysbench import BenchError, sysbench_command
from core.db import connect, query
from core.endpoints import MySQLAddress

REPORT = re.compile(r"^\[ (\d+)s \] thds: \d+ tps: ([\d.]+) .*lat \(ms,99%\): ([\d.]+) err/s: ([\d.]+)")
ROW_COUNTERS = ("Handler_write", "Handler_update", "Handler_delete")   # rows written, as the binlog logs them
SCRIPT = Path(__file__).with_name("oltp_write_only_attributed.lua")
SESSION = re.compile(r"^bench-load: session (\d+)\s*$")
IGNORED = re.compile(r"^bench-load: ignored error (\d+)\s*$")
DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205


@dataclass(frozen=True)
class LoadWindow:
    """What the application saw during one time window."""

    seconds: float
    tps: float | None             # None: the window held no whole second of reports
    p99_ms_median: float | None   # median over the window's seconds of sysbench's per-second p99
    p99_ms_max: float | None      # the worst second
    errors: float
    stalled_seconds: int          # seconds in which no transaction completed
    deadlock_victims: int = 0     # transactions the server refused with 1213, as the load saw them
    lock_wait_timeouts: int = 0   # with 1205
    other_errors: dict[int, int] = field(default_factory=dict)   # any other code sysbench ignored: how many

    def as_dict(self) -> dict[str, float | int | None]:
        return {"app_tps": None if self.tps is None else round(self.tps, 1),
                "app_p99_ms": None if self.p99_ms_median is None else round(self.p99_ms_median, 2),
                "app_p99_ms_worst_second": None if self.p99_ms_max is None else round(self.p99_ms_max, 2),
                "app_errors": int(self.errors), "app_stalled_seconds": self.stalled_seconds,
                "app_deadlock_victims": self.deadlock_victims, "app_lock_wait_timeouts": self.lock_wait_timeouts,
                "app_other_errors": sum(self.other_errors.values()),
                "app_other_error_codes": {str(code): n for code, n in sorted(self.other_errors.items())}}


@dataclass
class SysbenchLoad:
    """A running `sysbench oltp_write_only --rate R` process and its per-second reports."""

    addr: MySQLAddress
    database: str
    rows: int
    rate: int
    threads: int
    lines: list[tuple[int, float, float, float]] = field(default_factory=list)  # (second, tps, p99, err/s)
    sessions: set[int] = field(default_factory=set)       # the server's ids of the sessions it opened
    refused: list[tuple[float, int]] = field(default_factory=list)   # (load clock, error code) of each ignored error
    output: list[str] = field(default_factory=list)       # its other lines

    def start(self) -> "SysbenchLoad":
        self.files = ExitStack()   # the config file lives as long as the process (sysbench reads it at start)
        config_file = self.files.enter_context(sysbench_config_file(self.addr))
        cmd = sysbench_command(config_file, self.database, self.rows, f"--rate={self.rate}",
                               f"--threads={self.threads}", "--time=0", "--report-interval=1", "--percentile=99",
                               "--rand-type=uniform", "--mysql-ignore-errors=all", "run", script=str(SCRIPT))
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except BaseException:
            self.files.close()
            raise
        self.started = time.monotonic()
        self.reader = threading.Thread(target=self._read, daemon=True, name="sysbench-reader")
        self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.take(line, self.now())

    def take(self, line: str, at: float) -> None:
        """One line of sysbench's output, read at `at` (load clock)."""
        if ignored := IGNORED.match(line):
            self.refused.append((at, int(ignored.group(1))))
            return
        if session := SESSION.match(line):
            self.sessions.add(int(session.group(1)))
            return
        self.output.append(line.rstrip())
        match = REPORT.match(line)
        if match:
            second, tps, p99, err = match.groups()
            self.lines.append((int(second), float(tps), float(p99), float(err)))

    def now(self) -> float:
        """Seconds since the load started (the clock of its reports)."""
        return time.monotonic() - self.started

    def stop(self) -> None:
        """Stop sysbench; raise if it died by itself before."""
        died = self.proc.poll()
        if died is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)
        self.files.close()
        self.reader.join(timeout=10)
        if died is not None:
            tail = "\n".join(self.output[-5:])
            raise BenchError(f"sysbench exited early (code {died}):\n{tail}")

    def _inside(self, start: float, end: float) -> list[tuple[int, float, float, float]]:
        return [line for line in self.lines if start < line[0] <= end + 0.999]

    def series(self, start: float, end: float) -> list[list[float]]:
        """[seconds since `start`, tx/s, p99 ms] for each reported second between `start` and `end`."""
        return [[round(second - start, 2), tps, p99] for second, tps, p99, _ in self._inside(start, end)]

    def window(self, start: float, end: float) -> LoadWindow:
        """Figures of the whole seconds between `start` and `end` (load clock); the errors refused between them."""
        inside = self._inside(start, end)
        busy = [p99 for _, tps, p99, _ in inside if tps > 0]
        codes = [code for at, code in self.refused if start <= at <= end]
        return LoadWindow(
            seconds=end - start,
            tps=statistics.fmean(tps for _, tps, _, _ in inside) if inside else None,
            p99_ms_median=statistics.median(busy) if busy else None,
            p99_ms_max=max(busy) if busy else None,
            errors=sum(err for *_, err in inside),
            stalled_seconds=sum(1 for _, tps, _, _ in inside if tps == 0),
            deadlock_victims=codes.count(DEADLOCK),
            lock_wait_timeouts=codes.count(LOCK_WAIT_TIMEOUT),
            other_errors=dict(Counter(code for code in codes if code not in (DEADLOCK, LOCK_WAIT_TIMEOUT))),
        )


def row_changes(addr: MySQLAddress) -> int:
    """Rows inserted, updated and deleted by the server so far (each is one binlog row event)."""
    conn = connect(addr)
    try:
        values = dict(query(conn, "SHOW GLOBAL STATUS WHERE Variable_name IN (%s, %s, %s)", ROW_COUNTERS))
    finally:
        conn.close()
    return sum(int(v) for v in values.values())


@dataclass(frozen=True)
class Baseline:
    """The load alone: what the application gets and how many binlog row events/s it makes."""

    window: LoadWindow
    row_events_per_s: float


def measure_baseline(load: SysbenchLoad, seconds: float, warmup: float = 3.0) -> Baseline:
    """Let a started load run `seconds` (after `warmup`) with nothing else going on."""
    time.sleep(warmup)
    start, before = load.now(), row_changes(load.addr)
    time.sleep(seconds)
    end, after = load.now(), row_changes(load.addr)
    return Baseline(load.window(start, end), (after - before) / (end - start))
