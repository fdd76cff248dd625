"""What in a `--where` predicate can change its answer for a row that nobody writes.

Only the rows matching `--where` are copied and kept in sync, and a row is looked at again only when a change
event names it. A predicate whose answer moves without a write to the row (the clock, a random number, a
variable, a stored function reading other data) lets rows enter or leave it unseen: one that comes to match is
never copied, one that stops matching stays in the target. This module finds the parts it can name from the text
alone; the server is asked about the rest (migration/checks.py, check_where_deterministic).
"""
from __future__ import annotations

import re

# Built-ins whose answer is not a function of the row: the clock, randomness, sequences, the session.
CLOCK = ("now", "current_timestamp", "localtime", "localtimestamp", "sysdate", "curdate", "current_date",
         "curtime", "current_time", "utc_date", "utc_time", "utc_timestamp", "unix_timestamp")
RANDOM = ("rand", "uuid", "uuid_short", "sys_guid", "random_bytes", "nextval", "lastval", "setval")
SESSION = ("connection_id", "last_insert_id", "found_rows", "row_count", "user", "current_user", "session_user",
           "system_user", "current_role", "database", "schema", "sleep", "benchmark", "get_lock", "release_lock",
           "is_free_lock", "is_used_lock", "master_pos_wait", "master_gtid_wait", "load_file")
# Of those, the ones SQL also accepts without parentheses (a bare keyword).
KEYWORDS = ("current_timestamp", "localtime", "localtimestamp", "current_date", "current_time", "utc_date",
            "utc_time", "utc_timestamp", "current_user", "current_role")
# UNIX_TIMESTAMP(col) is the row's own value; UNIX_TIMESTAMP() is the clock.
CLOCK_ONLY_WITHOUT_ARGUMENTS = ("unix_timestamp",)

_TOKEN = re.compile(r"""
      (?P<skip>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*"|`(?:[^`]|``)*`    # literals and quoted names
               |/\*(?![!M])[\s\S]*?\*/|(?:--\s|\#)[^\n]*)                   # comments (not executable ones)
    | (?P<code_comment>/\*M?!\d*|\*/)                                        # /*!50000 … */ runs as code
    | (?P<variable>@@?(?:[A-Za-z0-9_$.]+|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`))
    | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*(?:\s*\.\s*(?:[A-Za-z_$][A-Za-z0-9_$]*|`(?:[^`]|``)*`))?)
    | (?P<other>[\s\S])
    """, re.VERBOSE)
_NEXT_CALL = re.compile(r"\s*\(\s*(\))?")
_SEQUENCE = re.compile(r"\s+value\s+for\b", re.IGNORECASE)   # NEXT VALUE FOR s, PREVIOUS VALUE FOR s


def changing_parts(predicate: str) -> list[str]:
    """The parts of `predicate` that make its answer change without a write to the row, each as written and with
    why: user and system variables, and the built-ins of the clock, randomness, sequences and the session (called,
    or as a bare keyword such as CURRENT_TIMESTAMP). Text inside string literals, quoted names and comments is not
    code and is skipped; executable comments (`/*!…*/`) are read as the server reads them."""
    found: list[str] = []
    for token in _TOKEN.finditer(predicate):
        kind, text = token.lastgroup, token.group()
        if kind == "variable":
            found.append(f"{text} ({'a system' if text.startswith('@@') else 'a user'} variable)")
        elif kind == "name":
            reason = _builtin_reason(predicate, token.end(), text)
            if reason == "a sequence":
                found.append(f"{text} VALUE FOR ({reason})")
            elif reason:
                found.append(f"{text}{'()' if _NEXT_CALL.match(predicate, token.end()) else ''} ({reason})")
    return list(dict.fromkeys(found))


def _builtin_reason(predicate: str, end: int, name: str) -> str | None:
    """Why the built-in `name` (ending at `end`) changes its answer, or None if it is not one of those."""
    if "." in name:
        return None   # qualified: a stored function, for the server to judge
    lower = name.lower()
    call = _NEXT_CALL.match(predicate, end)
    if lower in ("next", "previous") and _SEQUENCE.match(predicate, end):
        return "a sequence"
    if call is None and lower not in KEYWORDS:
        return None   # a column or a keyword, not a call
    if lower in CLOCK_ONLY_WITHOUT_ARGUMENTS and (call is None or call.group(1) is None):
        return None
    if lower in CLOCK:
        return "the clock"
    if lower in RANDOM:
        return "random or a sequence"
    if lower in SESSION:
        return "the session, not the row"
    return None
