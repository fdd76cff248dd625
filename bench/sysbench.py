"""Command lines of Debian's sysbench (oltp_write_only) against the benchmark table."""
from __future__ import annotations

import shutil

from core.endpoints import MySQLAddress


class BenchError(RuntimeError):
    """The benchmark cannot run (missing program, unreachable server, failed preparation)."""


def sysbench_command(addr: MySQLAddress, database: str, rows: int, *extra: str) -> list[str]:
    """`sysbench oltp_write_only` with connection options for one table of `rows` rows."""
    binary = shutil.which("sysbench")
    if binary is None:
        raise BenchError("sysbench is not installed (Debian package `sysbench`; `make setup` installs it)")
    return [binary, "oltp_write_only", "--db-driver=mysql", f"--mysql-host={addr.host}",
            f"--mysql-port={addr.port}", f"--mysql-user={addr.user}", f"--mysql-password={addr.password}",
            f"--mysql-db={database}", "--tables=1", f"--table-size={rows}", *extra]
