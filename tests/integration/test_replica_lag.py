"""--throttle-replicas against a real replica: a second MariaDB server replicating from the stack's, made to
fall behind with MASTER_DELAY. While it lags the copy holds back (nothing copied, `status` says why); once it
catches up the migration finishes. A replica that is not one, or cannot be reached, is refused up front."""
from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace

import pytest

from core.db import connect, query
from throttle.replica_lag import replica_lag
from stack.mariadb import render_bootstrap_sql
from stack.process import free_ports
from tests.integration.helpers import (chunk_progress, cli, fresh_table, latest_migration_id, leftovers,
                                       migration_row, new_migration_row, start_cli, status_doc, wait_for)

pytestmark = pytest.mark.integration

DB = "replicalag"
ALTER = "ADD COLUMN flag INT NULL"


class Replica:
    """A MariaDB server of its own (data dir under tmp) replicating from the stack's server from now on.

    It applies nothing (a replication filter matches no table), so the tests' writes never break it;
    its SQL thread still waits out MASTER_DELAY on every event, which is what makes it lag.
    """

    def __init__(self, stack_config, endpoints, folder) -> None:
        self.source = endpoints.mysql
        self.port = free_ports(1)[0]
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "bootstrap.sql").write_text(render_bootstrap_sql(stack_config))
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={folder / 'data'}", "--user=root",
                        "--skip-test-db", f"--extra-file={folder / 'bootstrap.sql'}"], check=True,
                       capture_output=True, stdin=subprocess.DEVNULL)
        self.process = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={folder / 'data'}", f"--socket={folder / 'mariadb.sock'}",
             f"--pid-file={folder / 'mariadbd.pid'}", f"--port={self.port}", "--bind-address=127.0.0.1",
             "--server-id=77", "--user=root", "--innodb-buffer-pool-size=32M", "--skip-log-bin",
             "--replicate-wild-do-table=no_such_schema.%"],
            stdin=subprocess.DEVNULL, stdout=open(folder / "mariadbd.log", "wb"), stderr=subprocess.STDOUT)
        self.conn = wait_for(self._connect, 60, "the replica server to start")
        primary = connect(self.source)
        position = query(primary, "SELECT @@gtid_binlog_pos")[0][0]
        primary.close()
        query(self.conn, "SET GLOBAL gtid_slave_pos = %s", (position,))
        query(self.conn, "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                         "MASTER_USE_GTID=slave_pos",
              (self.source.host, self.source.port, self.source.user, self.source.password))
        query(self.conn, "START SLAVE")
        wait_for(lambda: replica_lag(self.conn) == (True, 0), 30, "replication to run")

    def _connect(self):
        try:
            return connect(replace(self.source, host="127.0.0.1", port=self.port))
        except Exception:  # noqa: BLE001 - not accepting connections yet
            return None

    def delay(self, seconds: int) -> None:
        query(self.conn, "STOP SLAVE")
        query(self.conn, f"CHANGE MASTER TO MASTER_DELAY={int(seconds)}")
        query(self.conn, "START SLAVE")

    def lag(self) -> int | None:
        return replica_lag(self.conn)[1]

    def stop(self) -> None:
        query(self.conn, "STOP SLAVE")
        self.conn.close()
        self.process.terminate()
        self.process.wait(60)


@pytest.fixture(scope="module")
def replica(stack_config, endpoints, tmp_path_factory):
    if stack_config is None:
        pytest.skip("needs the embedded stack's MariaDB to replicate from")
    server = Replica(stack_config, endpoints, tmp_path_factory.mktemp("replica"))
    yield server
    server.stop()


def test_lagging_replica_holds_the_copy_back_until_it_catches_up(endpoints, conn, replica, tmp_path):
    table = "lagged"
    fresh_table(conn, DB, table, rows=20_000, seed=47)
    earlier = latest_migration_id(conn, DB, table)
    replica.delay(3600)
    query(conn, f"UPDATE {DB}.{table} SET k = k + 1 WHERE id = 1")   # an event the replica now waits on
    wait_for(lambda: (replica.lag() or 0) >= 2, 30, "the replica to fall 2 s behind")
    proc = start_cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", ALTER,
                     "--throttle-replicas",
                     f"127.0.0.1:{replica.port}", "--max-replica-lag", "2", "--copy-workers", "2", "--chunk-size",
                     "5000", log=tmp_path / "cli.log")
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        reason = wait_for(lambda: status_doc(DB, table)["throttle_reason"], 60, "status to show the throttle")
        assert reason.startswith(f"replica 127.0.0.1:{replica.port} is ") and "(--max-replica-lag)" in reason
        time.sleep(2.0)   # an observation window: nothing may be copied while the replica lags
        assert chunk_progress(conn, migration.id)[0] == 0 and migration_row(conn, DB, table).stage == "copy"
        replica.delay(0)
        assert proc.wait(180) == 0, (tmp_path / "cli.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        replica.delay(0)
    assert migration_row(conn, DB, table).status == "done"
    assert "throttled: replica 127.0.0.1:" in (tmp_path / "cli.log").read_text()


@pytest.mark.parametrize("target, message", [
    ("source", "is not a replica (SHOW REPLICA STATUS is empty)"),
    ("closed port", "--throttle-replicas: cannot connect to MySQL at 127.0.0.1:"),
])
def test_a_replica_that_is_not_one_or_is_unreachable_is_refused(endpoints, conn, target, message):
    table = "refused"
    fresh_table(conn, DB, table, rows=100, seed=48)
    source = endpoints.mysql
    address = f"{source.host}:{source.port}" if target == "source" else f"127.0.0.1:{free_ports(1)[0]}"
    result = cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", ALTER, "--throttle-replicas",
                 address, "--quiet")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not source.password or source.password not in result.stderr
    assert leftovers(endpoints, DB, table) == []
