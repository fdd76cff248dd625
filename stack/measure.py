"""Measure the stack: start-up time and resident memory of each process, on a throw-away side stack.

    .venv/bin/python -m stack.measure [--settle 20]

Starts a stack in a temporary run dir on free ports (the stack in .run/ is not touched): first start
(data directory initialised, Kafka storage formatted), then stop, then a second (warm) start.
Resident memory (VmRSS, and the peak VmHWM) is read from /proc after the stack has been idle for
`--settle` seconds. Prints a Markdown table, then stops everything and removes the run dir.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from stack import services
from stack.config import PORT_ENV, StackConfig
from stack.process import free_ports


def _mib(pid: int, key: str) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return f"{int(line.split()[1]) / 1024:.0f}"
    except OSError:
        pass
    return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.measure", description=__doc__.split("\n")[0])
    parser.add_argument("--settle", type=float, default=20.0, help="idle seconds before reading memory")
    args = parser.parse_args(argv)

    run_dir = Path(tempfile.mkdtemp(prefix="stream-osc-measure-"))
    os.environ["STREAM_OSC_RUN_DIR"] = str(run_dir / "run")
    for var, port in zip(PORT_ENV.values(), free_ports(len(PORT_ENV))):
        os.environ[var] = str(port)
    config = StackConfig()
    try:
        t0 = time.monotonic()
        cold = {r.name: r.seconds for r in services.up(config)}
        cold_total = time.monotonic() - t0
        services.stop_all(config)
        t0 = time.monotonic()
        warm = {r.name: r.seconds for r in services.up(config)}
        warm_total = time.monotonic() - t0
        time.sleep(args.settle)  # memory of an idle stack: nothing to wait for but time
        rows = services.status(config, probe=False)
        print(f"| service | first start (s) | warm start (s) | RSS after {args.settle:.0f} s idle (MiB) "
              "| peak RSS (MiB) |")
        print("| --- | ---: | ---: | ---: | ---: |")
        total_rss = 0.0
        for row in rows:
            rss = _mib(row.pid, "VmRSS") if row.pid else "?"
            total_rss += float(rss) if rss != "?" else 0
            print(f"| {row.name} | {cold[row.name]:.1f} | {warm[row.name]:.1f} | {rss} | "
                  f"{_mib(row.pid, 'VmHWM') if row.pid else '?'} |")
        print(f"| **all four** | {cold_total:.1f} | {warm_total:.1f} | {total_rss:.0f} | |")
    finally:
        services.stop_all(config)
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
