"""The server's deadlock reports are read for who took part and who was rolled back (monitor/deadlocks.py).

The fixtures are the embedded MariaDB 10.11's own error log, captured while two sessions deadlocked on purpose:
two application transactions locking two rows in opposite orders (one statement over three lines), and a window of
the log holding other messages and two deadlocks of a tagged locking read with an application's write (in one,
the read held 1,001 row locks and the application's transaction was rolled back).
"""
from __future__ import annotations

from pathlib import Path

from monitor.deadlocks import parse_deadlocks
from stack import mariadb
from stack.config import StackConfig

DATA = Path(__file__).parent / "data" / "deadlocks"
ALONE = (DATA / "application_transactions_alone.log").read_text()
BESIDE_TOOL = (DATA / "tool_read_beside_applications.log").read_text()


def test_a_deadlock_between_application_transactions_is_not_the_tools():
    [deadlock] = parse_deadlocks(ALONE)
    assert not deadlock.tool_took_part
    assert [(t.number, t.thread_id) for t in deadlock.transactions] == [(1, 468), (2, 467)]
    assert deadlock.transactions[0].statement == "UPDATE dlcap.orders SET\n  v = v + 1\nWHERE id = 10"
    assert deadlock.transactions[1].statement == "UPDATE dlcap.orders SET v = v + 1 WHERE id = 20"
    assert deadlock.victim == 1 and deadlock.rolled_back is deadlock.transactions[0]
    assert deadlock.application_rolled_back
    assert deadlock.tables == {("dlcap", "orders")}
    assert deadlock.at == "2026-12-07 18:43:08"


def test_a_tagged_statement_in_the_cycle_makes_it_the_tools_whoever_was_rolled_back():
    first, second = parse_deadlocks(BESIDE_TOOL)
    assert first.tool_took_part and second.tool_took_part
    tool, application = first.transactions
    assert tool.by_tool and tool.statement.startswith("/* stream-osc */ SELECT id FROM dlcap.orders")
    assert not application.by_tool and application.statement == "DELETE FROM dlcap.orders WHERE id = 100"
    assert first.victim == 2 and first.application_rolled_back   # the read held 1,001 row locks: the heavier
    assert [t.by_tool for t in second.transactions] == [False, True] and second.victim == 1
    assert second.tables == {("osc_gives_way", "hot")}


def test_messages_between_reports_and_the_row_dumps_are_not_statements():
    for deadlock in parse_deadlocks(BESIDE_TOOL) + parse_deadlocks(ALONE):
        for t in deadlock.transactions:
            assert "\n" not in t.statement or t.statement.startswith("UPDATE dlcap.orders SET\n")
            assert "Aborted connection" not in t.statement and "RECORD LOCKS" not in t.statement


def test_a_window_that_opens_inside_a_report_skips_it_and_one_that_closes_inside_keeps_it_without_a_victim():
    middle = BESIDE_TOOL.index("*** (2) TRANSACTION:")
    later = parse_deadlocks(BESIDE_TOOL[middle:])
    assert len(later) == 1 and later[0].tables == {("osc_gives_way", "hot")}
    cut = ALONE[:ALONE.index("WE ROLL BACK")]
    [unfinished] = parse_deadlocks(cut)
    assert unfinished.victim is None and unfinished.rolled_back is None and not unfinished.application_rolled_back
    assert "ends before naming" in unfinished.describe()


def test_deadlocks_on_other_schemas_are_told_apart():
    first, second = parse_deadlocks(BESIDE_TOOL)
    assert first.touches({"dlcap"}) and not second.touches({"dlcap"})


def test_the_description_names_every_statement_and_the_transaction_rolled_back():
    first, _ = parse_deadlocks(BESIDE_TOOL)
    text = first.describe()
    assert "a stream-osc statement took part" in text
    assert "(2) ROLLED BACK application thread 429: DELETE FROM dlcap.orders WHERE id = 100" in text
    assert "(1) stream-osc thread 431: /* stream-osc */ SELECT id FROM dlcap.orders" in text
    long_list = parse_deadlocks(BESIDE_TOOL)[1].transactions[1]
    assert len(long_list.short()) < 400 and "characters)" in long_list.short()


def test_a_log_without_deadlocks_has_none():
    assert parse_deadlocks(BESIDE_TOOL.split("Transactions deadlock detected")[0]) == []
    assert parse_deadlocks("") == []


def test_the_embedded_servers_write_every_deadlock_to_their_error_log():
    for server in (mariadb.SOURCE, mariadb.TARGET):
        assert "innodb_print_all_deadlocks = ON" in mariadb.render_config(StackConfig(), server).splitlines()


def test_a_transaction_shown_without_a_statement_on_the_tools_own_table_is_the_tools():
    """Captured in a fault run: two appliers on the new table, the report showing no statement for one of them
    (between two statements). No application writes the tool's helper tables, so neither is the application's."""
    (deadlock,) = parse_deadlocks((DATA / "tool_sessions_one_between_statements.log").read_text())
    assert [t.statement == "" for t in deadlock.transactions] == [False, True]
    assert deadlock.tool_took_part and not deadlock.application_took_part and not deadlock.application_rolled_back
