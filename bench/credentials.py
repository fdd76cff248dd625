"""Credentials for the external programs the benchmark runs, in owner-only files: never on a command line,
where every user of the machine sees them in `ps`."""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.sysbench import BenchError
from core.endpoints import MySQLAddress


@contextmanager
def private_file(name: str, text: str) -> Iterator[Path]:
    """`text` in a file readable by its owner only, inside a fresh 0700 folder; both removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="stream-osc-bench-"))
    path = folder / name
    try:
        path.touch(mode=0o600)
        path.write_text(text)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def option_value(value: str) -> str:
    """A value for a MySQL option file ([client]), double-quoted so that '#' or ';' is not a comment."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


@contextmanager
def client_option_file(addr: MySQLAddress) -> Iterator[Path]:
    """A `[client]` option file (pt-online-schema-change's DSN `F=`, gh-ost's `--conf`)."""
    text = f"[client]\nuser={option_value(addr.user)}\npassword={option_value(addr.password)}\n"
    with private_file("client.cnf", text) as path:
        yield path


@contextmanager
def sysbench_config_file(addr: MySQLAddress) -> Iterator[Path]:
    """sysbench's `--config-file`: the connection options, one `name=value` a line (read verbatim, except
    that sysbench splits at whitespace: measured with sysbench 1.0 against MariaDB)."""
    if any(char.isspace() for char in addr.user + addr.password):
        raise BenchError("sysbench's --config-file cannot carry a user or password that contains whitespace, "
                         "and the command line would show it to every user: use another benchmark user")
    text = (f"mysql-host={addr.host}\nmysql-port={addr.port}\nmysql-user={addr.user}\n"
            f"mysql-password={addr.password}\n")
    with private_file("sysbench.cfg", text) as path:
        yield path
