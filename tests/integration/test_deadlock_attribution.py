"""Every deadlock during a data test is attributed from the server's own report: one between application
transactions alone is the application's (reported, the test goes on), one in which a stream-osc statement took
part is the tool's (the test fails, naming the statements). A writer's refused transaction is counted and
explained by a report, never retried.

The application's own deadlock is a workload that deadlocks with no tool involved: two application transactions
lock two rows in opposite orders. The tool's is staged with a session whose statements carry the tool's tag.
"""
from __future__ import annotations

import threading

import pymysql
import pytest

from core.db import connect, qualified, query
from tests.integration.deadlocks import DEADLOCK, ConflictWatch, Refusal, refusal
from tests.integration.helpers import wait_for, waiting_on
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "deadlock_attribution"


def opposite_orders(conn, name: str, first: pymysql.connections.Connection, second: pymysql.connections.Connection,
                    locks: tuple[str, str] = ("UPDATE {name} SET v = v + 1 WHERE id = {row}",) * 2) -> list[Refusal]:
    """`first` locks row 1 then row 2 of table `name`, `second` row 2 then row 1 (each statement of `locks`
    formatted with the table and the row): a deadlock. Returns the refusal of the transaction rolled back."""
    refused: list[Refusal] = []

    def then(session: pymysql.connections.Connection, row: int) -> None:
        try:
            query(session, locks[1].format(name=name, row=row))
            session.commit()
        except pymysql.err.MySQLError as exc:
            session.rollback()
            noted = refusal(exc, session, f"row {row}")
            assert noted is not None, exc
            refused.append(noted)

    first.begin()
    second.begin()
    query(first, locks[0].format(name=name, row=1))
    query(second, locks[0].format(name=name, row=2))
    waiter = threading.Thread(target=then, args=(first, 2))
    waiter.start()
    wait_for(lambda: waiting_on(conn, first, second), 30, "the first transaction to wait for the second's row")
    then(second, 1)
    waiter.join(30)
    return refused


def two_rows(conn, schema: str) -> str:
    """schema.rows holding rows 1 and 2; its qualified name."""
    query(conn, f"CREATE DATABASE IF NOT EXISTS {schema}")
    query(conn, f"CREATE TABLE IF NOT EXISTS {schema}.rows (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"REPLACE INTO {schema}.rows VALUES (1, 0), (2, 0)")
    return qualified(schema, "rows")


@pytest.fixture
def rows(conn) -> str:
    return two_rows(conn, DB)


UPDATE = ("UPDATE {name} SET v = v + 1 WHERE id = {row}",) * 2


def test_a_deadlock_between_application_transactions_is_attributed_to_the_application(endpoints, conn, rows):
    watch = ConflictWatch(endpoints.mysql, [DB], "two application transactions")
    first, second = connect(endpoints.mysql, tagged=False), connect(endpoints.mysql, tagged=False)
    try:
        refused = opposite_orders(conn, rows, first, second)
    finally:
        first.close()
        second.close()
    assert [r.code for r in refused] == [DEADLOCK]
    attribution = watch.attribute(refused)
    assert attribution.unavailable is None
    assert attribution.tool == [] and len(attribution.application) == 1
    [deadlock] = attribution.application
    assert {t.statement for t in deadlock.transactions} == {f"UPDATE {rows} SET v = v + 1 WHERE id = 2",
                                                            f"UPDATE {rows} SET v = v + 1 WHERE id = 1"}
    assert deadlock.rolled_back.thread_id == refused[0].thread_id   # the refusal is explained by the report
    assert attribution.unexplained == [] and attribution.problems() == []
    with pytest.warns(UserWarning, match="application transactions alone"):
        attribution.report()


def test_a_deadlock_a_stream_osc_statement_took_part_in_fails_the_check(endpoints, conn, rows):
    """The tagged session stands for the tool: a locking read of row 2 then row 1, against an application's
    updates in the other order; whoever the server rolls back, the deadlock is the tool's."""
    watch = ConflictWatch(endpoints.mysql, [DB], "a tagged locking read")
    application, tool = connect(endpoints.mysql, tagged=False), connect(endpoints.mysql, tagged=True)
    reads = ("SELECT id FROM {name} WHERE id = {row} LOCK IN SHARE MODE",
             "SELECT id FROM {name} WHERE id = {row} LOCK IN SHARE MODE")
    try:
        application.begin()
        query(application, UPDATE[0].format(name=rows, row=1))
        tool.begin()
        query(tool, reads[0].format(name=rows, row=2))
        refused: list[Refusal] = []

        def then(session: pymysql.connections.Connection, sql: str) -> None:
            try:
                query(session, sql)
                session.commit()
            except pymysql.err.MySQLError as exc:
                session.rollback()
                refused.append(refusal(exc, session, sql))

        waiter = threading.Thread(target=then, args=(application, UPDATE[1].format(name=rows, row=2)))
        waiter.start()
        wait_for(lambda: waiting_on(conn, application, tool), 30, "the application to wait for the read's row")
        then(tool, reads[1].format(name=rows, row=1))
        waiter.join(30)
    finally:
        application.close()
        tool.close()
    assert [r.code for r in refused] == [DEADLOCK]
    attribution = watch.attribute([r for r in refused if r.thread_id == application.thread_id()])
    assert attribution.application == [] and len(attribution.tool) == 1
    [problem] = attribution.problems()
    assert "a stream-osc statement took part" in problem
    assert f"/* stream-osc */ SELECT id FROM {rows} WHERE id = 1 LOCK IN SHARE MODE" in problem
    assert f"application thread {application.thread_id()}: UPDATE {rows} SET v = v + 1 WHERE id = 2" \
        in problem


def test_a_ledger_fails_on_a_tool_deadlock_on_its_schema_and_not_on_another_schemas(endpoints, conn, rows):
    """A ledger's errors name a deadlock a stream-osc statement took part in on its own schema; one on another
    schema (another test sharing the server) is not its business."""
    create_ledger_table(conn, DB, "ledger", rows=100, writers=2)
    elsewhere = two_rows(conn, "deadlock_attribution_other")
    with Ledger(endpoints.mysql, DB, "ledger", writers=2, seed=3) as ledger:
        ledger.wait_for_writes(50)
        for name in (rows, elsewhere):
            tool, application = connect(endpoints.mysql, tagged=True), connect(endpoints.mysql, tagged=False)
            try:
                assert [r.code for r in opposite_orders(conn, name, tool, application)] == [DEADLOCK]
            finally:
                tool.close()
                application.close()
        ledger.wait_for_writes(50)
    problems = ledger.errors()
    assert len(problems) == 1, problems
    assert "a stream-osc statement took part" in problems[0] and f"on {DB}.rows" in problems[0]
    assert ledger.missing(conn) == problems   # every acknowledged write is there: the tool's deadlock alone
