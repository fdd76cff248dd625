"""Command lines of Debian's sysbench (oltp_write_only) against the benchmark table."""
from __future__ import annotations

import shutil
from pathlib import Path


class BenchError(RuntimeError):
    """The benchmark cannot run (missing program, unreachable server, failed preparation)."""


def sysbench_command(config_file: Path, database: str, rows: int, *extra: str,
                     script: str = "oltp_write_only") -> list[str]:
    """`sysbench oltp_write_only` (or `script`, a Lua file that wraps it) for one table of `rows` rows; the
    connection options (password included) come from `config_file` (bench/credentials.py), never from the command
    line."""
    binary = shutil.which("sysbench")
    if binary is None:
        raise BenchError("sysbench is not installed (Debian package `sysbench`; `make setup` installs it)")
    return [binary, script, "--db-driver=mysql", f"--config-file={config_file}",
            f"--mysql-db={database}", "--tables=1", f"--table-size={rows}", *extra]
