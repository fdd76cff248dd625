"""What init checks of a table's triggers before anything is made: that they can be moved at all (not to another
server), that the user may create them as their definers, and, on the empty new table, that the ALTER leaves each
body valid."""
from __future__ import annotations

import re
import uuid

import pymysql

from core.db import qualified, query, quote_ident
from core.spec import MigrationSpec
from core.triggers import Trigger, create_trigger, encoding_of, read_triggers
from migration.checks import PreflightError

# Who may create a trigger for another definer: MariaDB 10.5.2+, MySQL 8 (SET_ANY_DEFINER from 8.2), either.
SET_DEFINER_PRIVILEGES = ("SET USER", "SET_USER_ID", "SET_ANY_DEFINER", "SUPER")
UNKNOWN_COLUMN = 1054   # ER_BAD_FIELD_ERROR: CREATE TRIGGER checks NEW.c / OLD.c against the table
_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO ", re.IGNORECASE)


def check_triggers_movable(conn: pymysql.connections.Connection, spec: MigrationSpec) -> list[Trigger]:
    """The table's triggers, once it is known they can be moved at the swap; PreflightError naming why not."""
    triggers = read_triggers(conn, spec.database, spec.table)
    if not triggers:
        return triggers
    names = ", ".join(t.name for t in triggers)
    if spec.target_server:
        raise PreflightError(f"table {spec.qualified_name} has triggers ({names}): a move to another server does not "
                             "carry triggers (they would have to be created on the target inside the cutover's "
                             "window, on a server the lock does not hold); not supported")
    unencodable = [t.name for t in triggers if encoding_of(t) is None]
    if unencodable:
        raise PreflightError(f"table {spec.qualified_name} has triggers made with a character set this tool cannot "
                             f"send their body in ({', '.join(unencodable)}); not supported")
    check_trigger_privileges(conn, spec, triggers)
    return triggers


def grants_by_scope(conn: pymysql.connections.Connection) -> dict[str, set[str]]:
    """The user's privileges from SHOW GRANTS, by what they are on (`*.*`, `` `db`.* ``, `` `db`.`t` ``), upper case."""
    found: dict[str, set[str]] = {}
    for (line,) in query(conn, "SHOW GRANTS"):
        grant = _GRANT.match(str(line))
        if grant:
            scope = grant.group(2).replace("\\_", "_").replace("\\%", "%")
            found.setdefault(scope, set()).update(p.strip().upper() for p in grant.group(1).split(","))
    return found


def check_trigger_privileges(conn: pymysql.connections.Connection, spec: MigrationSpec,
                             triggers: list[Trigger]) -> None:
    """TRIGGER on the table; SUPER when binary logging is on and log_bin_trust_function_creators is off (the server
    then refuses CREATE and DROP TRIGGER without it: error 1419, measured on MariaDB 10.11); a privilege to set another
    definer, for each trigger another user defines. Each missing one is named, before anything is made."""
    grants = grants_by_scope(conn)
    everywhere = grants.get("*.*", set())
    if "ALL PRIVILEGES" in everywhere:
        return
    on_table = everywhere | grants.get(f"`{spec.database}`.*", set()) | grants.get(
        f"`{spec.database}`.`{spec.table}`", set())
    lead = f"table {spec.qualified_name} has triggers, which move to the new table at the swap"
    if not on_table & {"TRIGGER", "ALL PRIVILEGES"}:
        raise PreflightError(f"{lead}: that needs the TRIGGER privilege on {spec.qualified_name}, which the database "
                             f"user lacks; GRANT TRIGGER ON {quote_ident(spec.database)}.* to it")
    log_bin, trusted = query(conn, "SELECT @@log_bin, @@log_bin_trust_function_creators")[0]
    if int(log_bin) and not int(trusted) and "SUPER" not in everywhere:
        raise PreflightError(f"{lead}: with binary logging on and log_bin_trust_function_creators OFF the server "
                             "allows CREATE and DROP TRIGGER only to a user with SUPER, which the database user lacks; "
                             "grant SUPER or SET GLOBAL log_bin_trust_function_creators=ON")
    me = str(query(conn, "SELECT CURRENT_USER()")[0][0])
    others = sorted({t.definer for t in triggers if t.definer != me})
    if others and not everywhere & set(SET_DEFINER_PRIVILEGES):
        raise PreflightError(f"{lead} as their definers ({', '.join(others)}): creating a trigger for another definer "
                             "needs SET USER (MariaDB), SET_USER_ID or SET_ANY_DEFINER (MySQL) or SUPER on *.*, "
                             "which the database user lacks")


def check_trigger_bodies(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """Each trigger created, under a name of its own, on the empty new table, and dropped at once: the server checks
    a body's NEW.c and OLD.c against the table when the trigger is created (measured on MariaDB 10.11: a column the
    ALTER drops or renames is refused then, error 1054), so a body the ALTER breaks is refused here, by name, rather
    than failing every write after the swap. Nothing fires: the new table is empty and nobody writes it yet."""
    for trigger in read_triggers(conn, spec.database, spec.table):
        probe = f"stream_osc_check_{uuid.uuid4().hex[:16]}"
        try:
            create_trigger(conn, trigger, spec.database, spec.new_table, probe)
        except pymysql.err.MySQLError as exc:
            why = (": its body reads a column the ALTER drops or renames" if exc.args[0] == UNKNOWN_COLUMN else "")
            raise PreflightError(f"trigger {trigger.name} of {spec.qualified_name} cannot be created on the altered "
                                 f"table{why} ({exc.args[-1]}, server error {exc.args[0]}); change or drop the "
                                 "trigger first") from None
        query(conn, f"DROP TRIGGER {qualified(spec.database, probe)}")
