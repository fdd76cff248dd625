"""The application's lock conflicts during a run: its deadlocks, attributed from the server's own report, and its
lock-wait timeouts, counted by the load.

With `innodb_print_all_deadlocks = ON` the server writes every deadlock it resolves to its error log, naming each
transaction of the cycle by its session's id, with its statement, and the transaction rolled back
(monitor/deadlocks.py reads them). The benchmark notes the log's size when the tool starts and reads the reports
written from there to the load's end, on the benchmark's schema only (other work may share the server). Each is
counted once, as one of:

- `deadlocks_tool_app_victim`: a tool's transaction took part and the application's was rolled back;
- `deadlocks_app_alone`: every transaction of the cycle was the application's, and every lock the report shows is
  on the application's table (a cycle of application transactions through another table of the schema, the one
  pt-osc's triggers write from inside them, is the tool's);
- `deadlocks_other`: the rest (the tool's transaction gave way, a report cut short, a session of neither).

Who is who (RULE): a transaction is the application's when its session is one the load opened (its sysbench script
prints each session's id as it connects, bench/oltp_write_only_attributed.lua) or the blocked scenario's open
transaction; the tool's, for stream-osc, when its statement carries the tool's `/* stream-osc */` tag, and for every
other tool, any transaction that is not the application's (pt-osc's copy and its triggers' statements run in
sessions of their own or inside the application's transaction, whose session names it).

Lock-wait timeouts (1205) are in no report: the load's script prints the code of every error sysbench ignores and
retries (sysbench's own `err/s` lumps 1213 and 1205 together), and a run's count is set beside what the same load
alone had in its baseline, scaled to the run's length.

The embedded stack's server writes every deadlock to `.run/mariadb.log`. Against other endpoints the file named by
STREAM_OSC_ERROR_LOG is read; without one, or with the setting off (the benchmark never changes a server it did not
start), runs are marked not attributed, with the reason.
"""
from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pymysql

from core.db import connect, scalar
from core.endpoints import ENV_KEYS, MySQLAddress
from monitor.deadlocks import Deadlock, DeadlockTransaction, ErrorLog, parse_deadlocks
from stack.config import StackConfig

ERROR_LOG_ENV = "STREAM_OSC_ERROR_LOG"
RULE = ("a transaction is the application's when its session is one the load opened (its sysbench script prints "
        "each session's id) or the blocked scenario's transaction; the tool's, for stream-osc, when its statement "
        "carries `/* stream-osc */`, for the other tools, any transaction not the application's; a cycle of "
        "application transactions alone through a table other than the application's (pt-osc's triggers write "
        "one) is the tool's")
COUNTS = ("deadlocks_tool_app_victim", "deadlocks_app_alone", "deadlocks_other")
EXAMPLES = 3   # reports kept in a run's record per kind (tool's with the application rolled back, other)


def error_log_of(addr: MySQLAddress) -> ErrorLog:
    """STREAM_OSC_ERROR_LOG if set, else the embedded stack's (without endpoints of one's own); checked to be
    readable and to receive every deadlock."""
    named = os.environ.get(ERROR_LOG_ENV)
    if named:
        path = Path(named)
    elif any(os.environ.get(var) for var in ENV_KEYS.values()):
        return ErrorLog(None, f"the server's error log is not readable here (set {ERROR_LOG_ENV} to its path)")
    else:
        path = StackConfig().log_file("mariadb")
    if not os.access(path, os.R_OK):
        return ErrorLog(None, f"cannot read the server's error log at {path}")
    try:
        conn = connect(addr)
        try:
            on = int(scalar(conn, "SELECT @@GLOBAL.innodb_print_all_deadlocks"))
        finally:
            conn.close()
    except pymysql.err.MySQLError as exc:
        return ErrorLog(None, f"cannot read innodb_print_all_deadlocks ({exc.args[-1]})")
    if not on:
        return ErrorLog(None, "innodb_print_all_deadlocks is off on the server (the benchmark does not change it)")
    return ErrorLog(path)


def _is_tool(t: DeadlockTransaction, tool: str, application: Collection[int]) -> bool:
    if tool.startswith("stream-osc"):
        return t.by_tool
    return t.by_tool or t.thread_id not in application


def kind(deadlock: Deadlock, tool: str, application: Collection[int], table: tuple[str, str]) -> str:
    """Which of COUNTS `deadlock` is, by RULE; `table` (schema, name) is the application's."""
    victim = deadlock.rolled_back
    if deadlock.transactions and all(t.thread_id in application for t in deadlock.transactions):
        if not deadlock.tables - {table}:
            return "deadlocks_app_alone"
        return "deadlocks_tool_app_victim" if victim is not None else "deadlocks_other"   # through the tool's triggers
    tool_took_part = any(_is_tool(t, tool, application) for t in deadlock.transactions)
    if tool_took_part and victim is not None and victim.thread_id in application:
        return "deadlocks_tool_app_victim"
    return "deadlocks_other"


def describe(deadlock: Deadlock, tool: str, application: Collection[int]) -> str:
    """Several lines: each transaction of the cycle (the application's, the tool's or neither's) with its statement,
    and the one rolled back."""
    tables = ", ".join(sorted(f"{db}.{name}" for db, name in deadlock.tables)) or "?"
    lines = [f"deadlock at {deadlock.at} on {tables}"]
    for t in deadlock.transactions:
        who = ("application" if t.thread_id in application else tool if _is_tool(t, tool, application)
               else "neither's")
        mark = "ROLLED BACK " if t.number == deadlock.victim else ""
        lines.append(f"  ({t.number}) {mark}{who} session {t.thread_id}: {t.short(200)}")
    if deadlock.victim is None:
        lines.append("  (the report ends before naming the transaction rolled back)")
    return "\n".join(lines)


def attribute(log_text: str, tool: str, application: Collection[int], table: tuple[str, str]) -> dict[str, Any]:
    """A run's deadlock figures from the part of the error log written during it, on the schema of `table`
    (schema, name; the application's): COUNTS, and the first few reports of the tool's and of the other kind, as
    text (`deadlocks_tool_app_victim_examples`, `deadlocks_other_examples`)."""
    figures: dict[str, Any] = dict.fromkeys(COUNTS, 0)
    examples: dict[str, list[str]] = {"deadlocks_tool_app_victim": [], "deadlocks_other": []}
    for deadlock in parse_deadlocks(log_text):
        if not deadlock.touches({table[0]}):
            continue
        which = kind(deadlock, tool, application, table)
        figures[which] += 1
        if which in examples and len(examples[which]) < EXAMPLES:
            examples[which].append(describe(deadlock, tool, application))
    figures.update({f"{which}_examples": texts for which, texts in examples.items() if texts})
    return figures


def not_attributed(why: str) -> dict[str, Any]:
    """A run's deadlock figures when the error log cannot be read: unknown, and why."""
    return {**dict.fromkeys(COUNTS), "deadlocks_not_attributed": why}


def expected_alone(count_alone: int, seconds_alone: float, seconds: float) -> float | None:
    """How many of an error the load alone would have had in `seconds`, at its rate in the baseline."""
    if seconds_alone <= 0:
        return None
    return round(count_alone * seconds / seconds_alone, 2)
