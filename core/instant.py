"""Instant when the server can: which path a migration may take, and the statement that tries the server's own
instant change (the pure parts of migration/instant_stage.py; docs/options.md, "--algorithm").

With `--algorithm auto` the ALTER is first tried on the table itself with ALGORITHM=INSTANT. The server decides:
it refuses at once, before it waits for any lock, when it cannot make the change by touching only the table's
definition (then the copy runs), and when it can, that statement is the change. No list of rules kept here decides
what is instant; only whether the try may be made at all (below) and what the server's answer means.
"""
from __future__ import annotations

from datetime import datetime

from core.alter_columns import clauses
from core.db import qualified
from core.spec import MigrationSpec

ALGORITHMS = ("auto", "copy")   # --algorithm: try instant first, or always copy
INSTANT, COPY = "instant", "copy"   # the path a migration took (core/state_records.py: PATH_OPTION)

# The server's "it cannot be done instantly", given at once, before any lock is waited for: ALGORITHM=INSTANT is
# not supported for this operation (1845), or not supported with a reason (1846: a column type change, an old row
# format, …); MySQL 8.0.29+: the table's instant row versions are used up (4092).
NOT_INSTANT_ERRORS = {1845: "not supported for this operation", 1846: "not supported", 4092: "row versions used up"}
# The try waited its bound for the table's metadata lock: lock_wait_timeout (1205), or MariaDB's
# max_statement_time (1969). Nothing changed; the try is made again as a cutover's lock try is.
TIMED_OUT_ERRORS = (1205, 1969)

# ALGORITHM and LOCK values of an ALTER clause (`ALGORITHM [=] INPLACE`, `LOCK [=] NONE`)
_ALGORITHM_VALUES = ("DEFAULT", "INSTANT", "INPLACE", "NOCOPY", "COPY")
_LOCK_VALUES = ("DEFAULT", "NONE", "SHARED", "EXCLUSIVE")


def option_clause(alter: str, option: str, values: tuple[str, ...]) -> str | None:
    """The value of the ALTER's own `option [=] value` clause (upper case), None when it has none. A clause is a
    whole comma-separated part of the ALTER (so a column named `algorithm` is no clause); comments are skipped and
    executable comments (`/*! … */`) read, as the server reads them."""
    for tokens in clauses(alter):
        if len(tokens) not in (2, 3):
            continue
        texts = [text.upper() if kind == "word" else text if (kind, text) == ("sym", "=") else None
                 for kind, text in tokens]
        if texts[0] == option and texts[-1] in values and (len(texts) == 2 or texts[1] == "="):
            return texts[-1]
    return None


def algorithm_clause(alter: str) -> str | None:
    """The ALTER's own ALGORITHM (INSTANT, INPLACE, COPY, NOCOPY, DEFAULT), or None."""
    return option_clause(alter, "ALGORITHM", _ALGORITHM_VALUES)


def renames_table(alter: str) -> bool:
    """Whether the ALTER renames the table itself (`RENAME [TO|AS] name`): done instantly on the table, the
    application would lose its table's name."""
    for tokens in clauses(alter):
        first = [text.upper() for kind, text in tokens[:2] if kind == "word"]
        if first[:1] == ["RENAME"] and (len(first) < 2 or first[1] not in ("COLUMN", "INDEX", "KEY", "CONSTRAINT")):
            return True
    return False


def instant_statement(database: str, table: str, alter: str) -> str:
    """The ALTER of the table itself with ALGORITHM=INSTANT: put first, so that a comment ending the user's ALTER
    (`-- …`, `#`) cannot swallow it; the ALTER's own ALGORITHM=INSTANT is kept instead of a second one. Its LOCK
    clause, if any, is kept: the server takes an instant change with any LOCK (it locks nothing but the brief
    metadata lock the try bounds)."""
    target = qualified(database, table)
    if algorithm_clause(alter) == "INSTANT":
        return f"ALTER TABLE {target} {alter}"
    return f"ALTER TABLE {target} ALGORITHM=INSTANT, {alter}"


def why_not_instant(spec: MigrationSpec, now: datetime) -> str | None:
    """Why the instant try is not made for this migration (the copy runs; said on the log line), None when it is.
    `now`: the wall clock in UTC, for --cutover-window-schedule."""
    if spec.algorithm == COPY:
        return "--algorithm copy"
    if spec.where:
        return "--where keeps only some rows: that is a copy"
    if spec.target_server:
        return "a move to another server (--target-dsn) is a copy"
    if spec.defer_indexes:
        return "--defer-indexes builds indexes after a copy"
    if spec.cutover == "manual":
        return "--cutover manual: the change waits for `stream-osc cutover`, which the copy keeps in sync until then"
    schedule = spec.schedule()
    if schedule is not None and not schedule.is_open(now):
        return f"outside the cutover window {schedule.describe()}: the copy waits for it in sync"
    if "/*!" in spec.alter or "/*M!" in spec.alter:
        return "the ALTER holds an executable comment (/*! … */), whose clauses are not read here"
    try:
        own = algorithm_clause(spec.alter)
        if own not in (None, "INSTANT"):
            return f"the ALTER asks for ALGORITHM={own} itself"
        if renames_table(spec.alter):
            return "the ALTER renames the table"
    except ValueError as exc:   # an unterminated quote: the server's own error comes with the copy's ALTER
        return f"the ALTER could not be read ({exc})"
    return None


def not_instant_reason(code: int, message: str) -> str | None:
    """The server's "cannot be done instantly" in words (its own message), or None when `code` says something else."""
    if code not in NOT_INSTANT_ERRORS:
        return None
    return f"the server cannot make this change instantly: {message} (server error {code})"
