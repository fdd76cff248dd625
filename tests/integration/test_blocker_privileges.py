"""Seeing and killing the sessions that hold the table needs privileges: checked before anything is made."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from cli.main import main
from core.db import query
from demo.traffic import create_sample_table
from tests.integration.helpers import leftovers

pytestmark = pytest.mark.integration

DB = "grants"
USER, PASSWORD = "osc_limited", "L1mited-pw"
# what docs/production.md lists for the tool's user, without PROCESS and without a privilege to kill sessions
BASE_GRANTS = ("SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, LOCK TABLES, CREATE TEMPORARY TABLES, RELOAD, "
               "REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, REPLICA MONITOR")


@pytest.fixture
def limited_user(endpoints, conn, monkeypatch):
    """Run the tool as a user holding BASE_GRANTS plus the privileges the test grants (call it with them)."""
    def make(extra: str = "") -> None:
        query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")
        query(conn, f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
        query(conn, f"GRANT {BASE_GRANTS}{extra} ON *.* TO '{USER}'@'%'")
        mysql = endpoints.mysql
        monkeypatch.setenv("STREAM_OSC_MYSQL_DSN", f"mysql://{USER}:{quote(PASSWORD, safe='')}@{mysql.host}:"
                                                   f"{mysql.port}/")
    yield make
    query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")


def migrate(capsys, *extra: str) -> tuple[int, str]:
    code = main(["migrate", "--table", f"{DB}.t", "--alter", "ADD COLUMN granted_flag INT", "--quiet", *extra])
    return code, capsys.readouterr().err


def assert_refused(endpoints, code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert err.startswith("stream-osc: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert leftovers(endpoints, DB, "t") == []


def test_without_process_the_migration_is_refused_before_anything_is_made(endpoints, conn, capsys, limited_user):
    create_sample_table(conn, DB, "t", rows=100)
    limited_user()
    code, err = migrate(capsys)
    assert_refused(endpoints, code, err, "lacks PROCESS")


def test_force_kill_without_a_privilege_to_kill_is_refused_before_anything_is_made(endpoints, conn, capsys,
                                                                                   limited_user):
    create_sample_table(conn, DB, "t", rows=100)
    limited_user(", PROCESS")
    code, err = migrate(capsys, "--force-kill-blockers-after", "5s")
    assert_refused(endpoints, code, err, "--force-kill-blockers-after needs the database user to hold CONNECTION ADMIN")
    code, err = migrate(capsys, "--dry-run")   # with PROCESS and no kill option, every check passes
    assert code == 0, err
    limited_user(", PROCESS, CONNECTION ADMIN")
    code, err = migrate(capsys, "--dry-run", "--force-kill-blockers-after", "5s")
    assert code == 0, err
    assert leftovers(endpoints, DB, "t") == []
