"""A move writes only to the target server init wrote its token on (core/target_identity.py, docs/move.md).

Each process finds the target in its own environment. Pointed at another server holding a table of the same name,
every command that would write there (the cutover, a joined worker, abort's DROP) must stop with exit 7 before it
writes, and the migration must go on once the environment names the target again. A server holding the token under
another server id (a replica, the target after a failover) is refused the same way until `accept-target`, which
sends the migration back to validation.
"""
from __future__ import annotations

import json

import pytest

from cli.exit_codes import ExitCode
from core.db import connect, qualified, query, scalar
from core.state import StateStore
from core.target_identity import (TARGET_IDENTITY_OPTION, TargetIdentity, TargetMismatch, check_target,
                                  mark_target, read_server)
from tests.integration.helpers import abort_leftover, cli, migration_row, waiting_without_coordinator

pytestmark = pytest.mark.integration

DB = "osc_target_id"
MOVED_DB = "osc_target_id_moved"
SCHEMA = "stream_osc"
OPTIONS = ["--copy-workers", "2", "--apply-workers", "2", "--partitions", "2", "--chunk-size", "5000",
           "--cutover-window", "3"]


@pytest.fixture
def target(endpoints, monkeypatch):
    """A session on the target server with its schema made fresh; the CLI finds that server in the environment."""
    monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
    conn = connect(endpoints.target())
    query(conn, f"DROP DATABASE IF EXISTS {MOVED_DB}")
    query(conn, f"CREATE DATABASE {MOVED_DB}")
    yield conn
    conn.close()


def waiting_move(conn, table: str, rows: int) -> None:
    """A move of DB.table to the target server, in sync and waiting for its cutover, no coordinator running."""
    abort_leftover(conn, DB, table)
    name = qualified(DB, table)
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table + '_osc_old')}")
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {name} SELECT seq, seq FROM {DB}.seq_1_to_{rows}")
    waiting_without_coordinator(conn, DB, table, "--target-dsn", "--target-table", f"{MOVED_DB}.{table}", *OPTIONS)


def impostor(conn, table: str) -> str:
    """Another server holding a table of the same name: the source server itself, with the target's schema and
    table made there (as a writable replica or a proxy routed elsewhere would show them)."""
    query(conn, f"DROP DATABASE IF EXISTS {MOVED_DB}")
    query(conn, f"CREATE DATABASE {MOVED_DB}")
    query(conn, f"CREATE TABLE {qualified(MOVED_DB, table)} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {qualified(MOVED_DB, table)} VALUES (1, -1), (2, -2)")
    return qualified(MOVED_DB, table)


def no_secret(output: str, endpoints) -> None:
    assert endpoints.mysql.password not in output and endpoints.target().password not in output, output


def test_a_target_dsn_naming_another_server_with_the_same_table_is_refused_before_any_write(endpoints, conn, target,
                                                                                                monkeypatch):
    table = "elsewhere"
    waiting_move(conn, table, 1000)
    migration = migration_row(conn, DB, table)
    token = migration.options[TARGET_IDENTITY_OPTION]["token"]
    query(conn, f"UPDATE {qualified(DB, table)} SET v = 0 WHERE id = 5")   # a change the cutover would drain
    other = impostor(conn, table)
    monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.mysql_dsn)

    for command in (["cutover", "--table", f"{DB}.{table}"], ["--log-level", "INFO", "worker", "--table",
                                                             f"{DB}.{table}", "--quiet"],
                    ["abort", "--table", f"{DB}.{table}"]):
        result = cli(*command, timeout=300)
        output = result.stdout + result.stderr
        assert sorted(query(conn, f"SELECT id, v FROM {other}")) == [(1, -1), (2, -2)], \
            f"{command[0]} wrote to (or dropped) another server's table: {output}"
        assert result.returncode == ExitCode.WRONG_TARGET, output
        assert token in output and "is not the one this migration writes to" in output, output
        assert "server_id 1" in output and "server_id 2" in output, output   # found, expected
        no_secret(output, endpoints)
        assert scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                      (DB, table)), "the source table was renamed away for a target that never got its rows"

    query(conn, f"DROP DATABASE {MOVED_DB}")
    monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)   # the environment fixed: the move goes on
    result = cli("cutover", "--table", f"{DB}.{table}", "--quiet", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert scalar(target, f"SELECT v FROM {qualified(MOVED_DB, table)} WHERE id = 5") == 0
    assert scalar(target, f"SELECT COUNT(*) FROM {SCHEMA}.target_tokens WHERE token = %s", (token,)) == 1


def test_a_target_holding_the_token_under_another_server_id_is_refused_until_accepted(endpoints, conn, target):
    """A failover of the target, simulated: the token is there (it is data), the recorded server id is not the
    server's. Refused like any other server; `accept-target` records it and validation runs again."""
    table = "failed_over"
    waiting_move(conn, table, 1000)
    migration = migration_row(conn, DB, table)
    store = StateStore(conn, SCHEMA)
    store.change_options(migration.id, lambda current: {**current.options, TARGET_IDENTITY_OPTION: {
        **current.options[TARGET_IDENTITY_OPTION], "server_id": 99}})
    query(target, f"DELETE FROM {qualified(MOVED_DB, table)} WHERE id = 7")   # a row the failover lost

    result = cli("cutover", "--table", f"{DB}.{table}", timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == ExitCode.WRONG_TARGET, output
    assert "holds this migration's token but is another server" in output and "server_id 99" in output, output
    assert "accept-target" in output
    no_secret(output, endpoints)
    assert migration_row(conn, DB, table).stage == "cutover"

    accepted = cli("accept-target", "--table", f"{DB}.{table}")
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "goes back to validation" in accepted.stdout
    after = migration_row(conn, DB, table)
    assert after.stage == "validate" and after.options[TARGET_IDENTITY_OPTION]["server_id"] == 2

    result = cli("cutover", "--table", f"{DB}.{table}", "--quiet", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert scalar(target, f"SELECT COUNT(*) FROM {qualified(MOVED_DB, table)}") == 1000, \
        "validation on the accepted server did not bring back the row the failover lost"


def test_the_check_refuses_a_session_on_another_server_and_takes_an_identity_recorded_since(endpoints, conn,
                                                                                             target):
    """What every target session and the cutover under its lock call (RunContext.check_target)."""
    identity = mark_target(target, SCHEMA, 0, "test")
    where = endpoints.target().where()
    options = {TARGET_IDENTITY_OPTION: identity.option()}
    check_target(target, SCHEMA, options, where)
    check_target(conn, SCHEMA, {}, where)   # nothing recorded (a migration from before): no check
    with pytest.raises(TargetMismatch, match="without that token"):
        check_target(conn, SCHEMA, options, where)

    stale = TargetIdentity(identity.token, read_server(conn))   # read before an accepted failover
    with pytest.raises(TargetMismatch, match="holds this migration's token but is another server"):
        check_target(target, SCHEMA, {TARGET_IDENTITY_OPTION: stale.option()}, where)
    check_target(target, SCHEMA, {TARGET_IDENTITY_OPTION: stale.option()}, where, options_now=lambda: options)
    assert json.loads(json.dumps(options)) == options   # as the options are stored
    query(target, f"DELETE FROM {SCHEMA}.target_tokens WHERE token = %s", (identity.token,))
