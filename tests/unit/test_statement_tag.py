"""Every statement text the tool sends opens with its tag (core/db.py: STATEMENT_TAG), those PyMySQL sends of its
own included, so that no statement of the tool is taken for the application's (throttle/app_activity.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from pymysql.constants import COMMAND

from core import db


class Recording:
    """A connection class sending into a list instead of a socket (no server: the packets are the point)."""

    def __init__(self) -> None:
        super().__init__(defer_connect=True, charset="utf8mb4", autocommit=True)
        self._sock = object()
        self.server_status = 0   # (read at the handshake: no NO_BACKSLASH_ESCAPES)
        self.sent: list[bytes] = []

    def _write_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    def _read_query_result(self, unbuffered: bool = False) -> int:
        self._result = SimpleNamespace(affected_rows=0, insert_id=0, description=None, rows=None, warning_count=0,
                                       has_next=False, unbuffered_active=False)
        return 0

    def _read_ok_packet(self) -> None:
        return None

    def texts(self) -> list[bytes]:
        """The statement texts of the COM_QUERY packets sent (4 bytes of length and sequence, then the command)."""
        return [packet[5:] for packet in self.sent if packet[4] == COMMAND.COM_QUERY]


class Recorded(Recording, db._TaggedConnection):
    """The tool's sessions."""


class RecordedApplication(Recording, db._Connection):
    """The session connect(tagged=False) opens for an application's writes."""


@pytest.mark.parametrize("send", [
    lambda conn: conn.query("SELECT 1"),
    lambda conn: conn.query("SELECT 'é'".encode()),
    lambda conn: conn.cursor().execute("UPDATE t SET c = %s WHERE id = %s", ("x", 1)),
    lambda conn: conn.cursor().executemany("INSERT INTO t (a) VALUES (%s)", [(1,), (2,)]),
    lambda conn: conn.begin(),
    lambda conn: conn.commit(),
    lambda conn: conn.rollback(),
], ids=["query", "query as bytes", "execute", "executemany", "begin", "commit", "rollback"])
def test_every_statement_the_tool_sends_opens_with_its_tag(send):
    conn = Recorded()
    send(conn)
    texts = conn.texts()
    assert texts, "nothing was sent"
    assert all(text.startswith(db.STATEMENT_TAG.encode()) for text in texts), texts
    assert all(text.count(db.STATEMENT_TAG.encode()) == 1 for text in texts), texts


def test_commands_without_a_statement_text_are_sent_as_they_are():
    conn = Recorded()
    conn._execute_command(COMMAND.COM_INIT_DB, "sbtest")
    assert conn.sent[0][5:] == b"sbtest"


def test_an_application_s_session_sends_its_statements_untagged():
    conn = RecordedApplication()
    conn.query("UPDATE t SET c = 1")
    conn.commit()
    assert conn.texts() == [b"UPDATE t SET c = 1", b"COMMIT"]


def test_untagged_takes_off_the_tag_in_front_only():
    assert db.untagged(db.STATEMENT_TAG + "SELECT 1") == "SELECT 1"
    assert db.untagged("SELECT 1 " + db.STATEMENT_TAG) == "SELECT 1 " + db.STATEMENT_TAG
