"""Processes of one migration run one version of how they work together (core/state.py: PROTOCOL): a `worker`
of another version refuses to join, and a joined one stops as soon as a coordinator of another version claims
the migration. A copy worker and an applier that disagree on it could lose a change.

The tests share one migration waiting for its manual cutover (its coordinator running and applying); each
stamps the protocol a coordinator of another version would, and puts its own back."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest

from core.db import query
from core.state import PROTOCOL
from tests.integration.helpers import (cli, db_conn, fresh_table, migration_row, start_cli, wait_for,
                                       waiting_for_cutover)

pytestmark = pytest.mark.integration

DB = "mixed_versions"
TABLE = "orders"


@dataclass
class Waiting:
    conn: pymysql.connections.Connection
    coordinator: subprocess.Popen
    migration_id: int
    log: Path

    def stamp(self, protocol: int | None) -> None:
        """Record `protocol` as the coordinator's, as a coordinator of that version claiming it would."""
        query(self.conn, "UPDATE stream_osc.migrations SET protocol=%s WHERE id=%s", (protocol, self.migration_id))

    def unchanged(self) -> bool:
        """The migration still waits for its cutover under its running coordinator."""
        now = migration_row(self.conn, DB, TABLE)
        return (now.id, now.stage, now.status) == (self.migration_id, "cutover", "waiting") and \
            self.coordinator.poll() is None


@pytest.fixture(scope="module")
def waiting(endpoints, tmp_path_factory) -> Iterator[Waiting]:
    """A migration in sync and waiting for its manual cutover; cut over at the end, which must succeed."""
    conn = db_conn(endpoints)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    fresh_table(conn, DB, TABLE, rows=2_000, seed=31)
    log = tmp_path_factory.mktemp("mixed_versions") / "coordinator.log"
    coordinator = waiting_for_cutover(conn, DB, TABLE, "--alter", "ADD COLUMN mark INT NULL", log=log)
    try:
        migration = migration_row(conn, DB, TABLE)
        assert migration.protocol == PROTOCOL, "the coordinator stamps its own protocol"
        yield Waiting(conn, coordinator, migration.id, log)
        result = cli("cutover", "--table", f"{DB}.{TABLE}")
        assert result.returncode == 0, result.stdout + result.stderr[-3000:]
        assert coordinator.wait(120) == 0, log.read_text()[-3000:]
        assert migration_row(conn, DB, TABLE).status == "done"
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(30)
        conn.close()


@pytest.mark.parametrize("theirs, said", [(PROTOCOL - 1, f"coordinated by protocol {PROTOCOL - 1}"),
                                          (None, "coordinated by a version from before protocol stamps")],
                         ids=["older_protocol", "before_stamps"])
def test_a_worker_of_another_protocol_refuses_to_join_and_changes_nothing(waiting, theirs, said):
    waiting.stamp(theirs)
    try:
        joined = cli("worker", "--table", f"{DB}.{TABLE}", "--quiet", timeout=60)
    finally:
        waiting.stamp(PROTOCOL)
    assert joined.returncode == 2, joined.stderr
    error = joined.stderr.strip()
    assert error.startswith("stream-osc: error: ") and len(error.splitlines()) == 1, error
    assert said in error and f"this worker speaks protocol {PROTOCOL}" in error and "`resume` it" in error
    assert waiting.unchanged()


def test_a_joined_worker_stops_when_a_coordinator_of_another_protocol_claims_the_migration(waiting, tmp_path):
    worker_log = tmp_path / "worker.log"
    worker = start_cli("--log-level", "INFO", "worker", "--table", f"{DB}.{TABLE}", log=worker_log)
    try:
        wait_for(lambda: "workers joined" in worker_log.read_text() or worker.poll() is not None, 60,
                 "the worker's appliers to join")
        assert worker.poll() is None, worker_log.read_text()[-3000:]
        waiting.stamp(PROTOCOL + 1)
        try:
            assert worker.wait(30) == 2, worker_log.read_text()[-3000:]
        finally:
            waiting.stamp(PROTOCOL)
        assert f"coordinated by protocol {PROTOCOL + 1}" in worker_log.read_text()
        assert waiting.unchanged()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
