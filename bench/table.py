"""The sysbench table: prepared once per size as a template, restored before every tool run."""
from __future__ import annotations

import subprocess
from collections.abc import Callable

import pymysql

from bench.server import fit_buffer_pool, fit_redo_log
from bench.credentials import sysbench_config_file
from bench.sysbench import BenchError, sysbench_command
from core.db import connect, qualified, query, scalar
from core.endpoints import MySQLAddress
from core.spec import helper_table_name

LEFTOVERS = ("_{t}_new", "_{t}_old", "_{t}_gho", "_{t}_ghc", "_{t}_del")   # pt-osc's and gh-ost's
# Rows below sysbench's ids (1..rows), written only by the latency probe: the copy's first batch reads them, so
# from then on a probe measures the apply of rows the copy has passed (a row the copy has yet to read is written
# by the copy, whenever it gets there).
PROBE_ROWS = 8


class BenchTable:
    """`db.sbtest1` plus its pristine template `db.sbtest1_<rows>`."""

    def __init__(self, addr: MySQLAddress, database: str, table: str, rows: int) -> None:
        self.addr, self.database, self.table, self.rows = addr, database, table, rows
        self.template = f"{table}_tpl_{rows}"

    @property
    def name(self) -> str:
        return qualified(self.database, self.table)

    def probe_ids(self) -> list[int]:
        """Primary keys of the probe rows (sysbench only touches ids 1..rows)."""
        return [-i for i in range(PROBE_ROWS)]

    def _conn(self) -> pymysql.connections.Connection:
        conn = connect(self.addr)
        query(conn, "SET SESSION sql_log_bin = 0")   # restoring is set-up, not part of any measurement
        return conn

    def ensure_template(self) -> None:
        """Create the template with `sysbench prepare` unless one of this size already exists."""
        conn = self._conn()
        try:
            query(conn, f"CREATE DATABASE IF NOT EXISTS `{self.database}`")
            tpl = qualified(self.database, self.template)
            exists = scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                            (self.database, self.template))
            probes = ",".join(map(str, self.probe_ids()))
            if exists and scalar(conn, f"SELECT COUNT(*) FROM {tpl}") == self.rows + PROBE_ROWS \
                    and scalar(conn, f"SELECT COUNT(*) FROM {tpl} WHERE id IN ({probes})") == PROBE_ROWS:
                return
            self.drop_all(conn)
            with sysbench_config_file(self.addr) as config_file:
                result = subprocess.run(sysbench_command(config_file, self.database, self.rows, "prepare"),
                                        capture_output=True, text=True)
            if result.returncode != 0:
                raise BenchError(f"sysbench prepare failed: {result.stderr.strip() or result.stdout.strip()}")
            query(conn, f"INSERT INTO {self.name} (id, k, c, pad) VALUES "
                        + ", ".join(f"({pk}, 0, 'probe', 'probe')" for pk in self.probe_ids()))
            query(conn, f"DROP TABLE IF EXISTS {tpl}")
            query(conn, f"RENAME TABLE {self.name} TO {tpl}")
        finally:
            conn.close()

    def fit_buffer_pool(self) -> int:
        """Grow the server's buffer pool to hold this table's copies (see bench/server.py); returns bytes."""
        return self._fit(fit_buffer_pool)

    def fit_redo_log(self) -> int:
        """Grow the server's redo log so that a copy of this table does not fill it (bench/server.py); bytes."""
        return self._fit(fit_redo_log)

    def _fit(self, fit: Callable[[pymysql.connections.Connection, str, str], int]) -> int:
        conn = self._conn()
        try:
            return fit(conn, self.database, self.template)
        finally:
            conn.close()

    def drop_all(self, conn: pymysql.connections.Connection) -> None:
        """Drop the table and every shadow table a tool may leave (triggers go with the table)."""
        stream_osc = (helper_table_name(self.table, "new"), helper_table_name(self.table, "old"))
        for name in (self.table, *(p.format(t=self.table) for p in LEFTOVERS), *stream_osc):
            query(conn, f"DROP TABLE IF EXISTS {qualified(self.database, name)}")

    def restore(self) -> None:
        """Recreate the table from the template (same rows and index layout every run)."""
        conn = self._conn()
        try:
            self.drop_all(conn)
            query(conn, f"CREATE TABLE {self.name} LIKE {qualified(self.database, self.template)}")
            query(conn, f"INSERT INTO {self.name} SELECT * FROM {qualified(self.database, self.template)}")
        finally:
            conn.close()

    def altered(self) -> bool:
        """Whether the table now has the new schema (k BIGINT and the added column)."""
        conn = connect(self.addr)
        try:
            cols = dict(query(conn, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                                    "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (self.database, self.table)))
        finally:
            conn.close()
        return cols.get("k") == "bigint" and "status" in cols
