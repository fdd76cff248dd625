"""Which table a statement's text names: the one rule of the cutover's checks (the sessions it waits for, the
statements queued beside its RENAME).

Read from the text a session shows, not parsed: a false match only costs a wait or an attempt, a missed one a
write queued where it must not be, so the rule errs towards naming.
"""
from __future__ import annotations

import re

from core.db import untagged


def names_table(statement: str | None, database: str, table: str, session_database: str | None) -> bool:
    """Does the statement name database.table: quoted or not, in any case, qualified, or unqualified in a session
    whose database is `database` or unknown? The tool's tag in front (`/* stream-osc */`) is not part of it."""
    if not statement:
        return False
    plain = re.escape(table)
    quoted = "`" + re.escape(table.replace("`", "``")) + "`"
    pattern = re.compile(r"(?<![\w$`.])(?:(?P<db>`(?:[^`]|``)+`|[\w$]+)\s*\.\s*)?(?:" + quoted + "|" + plain +
                         r")(?![\w$`])", re.IGNORECASE)
    for found in pattern.finditer(untagged(statement)):
        qualifier = found.group("db")
        schema = qualifier.strip("`").replace("``", "`") if qualifier else session_database
        if schema is None or schema.lower() == database.lower():
            return True
    return False
