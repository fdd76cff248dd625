"""Pre-flight checks of `init`: each failure is one clear sentence and nothing has been changed yet."""
from __future__ import annotations

import logging
import re

import pymysql
import redis

from connectors.config import CONNECTOR_CLASSES
from connectors.rest import connect_client
from core.alter_columns import renames_table
from core.db import ServerInfo, qualified, query, quote_ident, scalar
from core.keys import SUPPORTED_TYPES, UNSUPPORTED_TYPES, PrimaryKey, primary_key
from core.endpoints import Endpoints, redis_where
from core.logs import log_event
from core.source_check import CAPTURED_BINLOG
from core.spec import MigrationSpec
from core.swap_preconditions import UnsafeServerSetting, check_swap_settings
from throttle.load import over, read_status
from migration.predicate import changing_parts
from streams.topics import check_reachable

log = logging.getLogger("stream_osc.checks")

class PreflightError(Exception):
    """A check failed; the message says what and how to fix it."""

    user_facing = True


def check_services(endpoints: Endpoints, flavor: str) -> None:
    """Kafka, Connect (with the right Debezium plugin) and Redis answer."""
    check_reachable(endpoints.kafka)
    connect = connect_client(endpoints)
    connect.check_reachable()
    if not connect.has_plugin(CONNECTOR_CLASSES[flavor]):
        raise PreflightError(f"Kafka Connect at {endpoints.connect_url} has no {CONNECTOR_CLASSES[flavor]} plugin")
    try:
        redis.Redis.from_url(endpoints.redis_url, socket_connect_timeout=5, socket_timeout=5).ping()
    except redis.exceptions.RedisError:
        raise PreflightError(f"Redis at {redis_where(endpoints.redis_url)} is unreachable") from None


def check_server(info: ServerInfo) -> None:
    """Binary log on, ROW format, FULL row image."""
    if not info.log_bin:
        raise PreflightError("the binary log is off (log_bin): change data capture needs it")
    if info.binlog_format.upper() != CAPTURED_BINLOG["binlog_format"]:
        raise PreflightError(f"binlog_format is {info.binlog_format}; it must be ROW "
                             "(SET GLOBAL binlog_format='ROW' and persist it in the server config)")
    if info.binlog_row_image.upper() != CAPTURED_BINLOG["binlog_row_image"]:
        raise PreflightError(f"binlog_row_image is {info.binlog_row_image}; it must be FULL")
    if info.autoinc_lock_mode != 2:
        log_event(log, "innodb_autoinc_lock_mode is not 2: parallel copy into a table with AUTO_INCREMENT "
                       "serializes and can stall application writes", logging.WARNING,
                  innodb_autoinc_lock_mode=info.autoinc_lock_mode)


def check_swap_settings_now(conn: pymysql.connections.Connection, info: ServerInfo) -> None:
    """The server settings the swap's proof rests on (core/swap_preconditions.py), before anything is made: a
    migration the cutover would refuse is not started."""
    try:
        check_swap_settings(conn, info.is_mariadb)
    except UnsafeServerSetting as exc:
        raise PreflightError(str(exc)) from None


def check_session_binlog_formats(conn: pymysql.connections.Connection, info: ServerInfo) -> None:
    """No other session still writes statement-based binlog (their writes would never reach the topic).

    A session's binlog_format is fixed when it connects (or by its own SET SESSION), so sessions older
    than a SET GLOBAL binlog_format='ROW' keep the old format. MySQL 8 shows every session's value in
    performance_schema.variables_by_thread: such sessions are refused by name. MariaDB shows only its
    own session's value; it tells whether the global value was set at run time, which is noted.
    """
    if info.is_mariadb:
        origin = scalar(conn, "SELECT GLOBAL_VALUE_ORIGIN FROM information_schema.SYSTEM_VARIABLES "
                              "WHERE VARIABLE_NAME='BINLOG_FORMAT'")
        if origin == "SQL":
            log_event(log, "binlog_format was set with SET GLOBAL since the server started: sessions connected "
                           "before that keep their own format and their writes would not be captured; MariaDB "
                           "cannot show them, so reconnect application sessions if unsure", logging.INFO)
        return
    try:
        sessions = query(conn, """SELECT t.PROCESSLIST_ID, t.PROCESSLIST_USER, t.PROCESSLIST_HOST, v.VARIABLE_VALUE
            FROM performance_schema.variables_by_thread v JOIN performance_schema.threads t USING (THREAD_ID)
            WHERE v.VARIABLE_NAME='binlog_format' AND v.VARIABLE_VALUE<>'ROW' AND t.PROCESSLIST_ID IS NOT NULL
            ORDER BY t.PROCESSLIST_ID""")
    except pymysql.err.MySQLError as exc:
        log_event(log, "could not read other sessions' binlog_format from performance_schema; sessions connected "
                       "before binlog_format became ROW would not be captured", logging.WARNING, reason=exc.args[-1])
        return
    if sessions:
        shown = ", ".join(f"{sid} {user}@{host} {fmt}" for sid, user, host, fmt in sessions[:5])
        more = f" and {len(sessions) - 5} more" if len(sessions) > 5 else ""
        raise PreflightError(f"{len(sessions)} sessions still use a binlog_format other than ROW ({shown}{more}): "
                             "their writes would not be captured; reconnect them (a session keeps the format it "
                             "connected with) and run again")


def check_table(conn: pymysql.connections.Connection, spec: MigrationSpec) -> PrimaryKey:
    """The table exists and has a primary key of types that can be matched exactly; returns the primary key. Its
    triggers (migration/trigger_checks.py) and foreign keys (migration/foreign_keys.py) are checked apart."""
    db, table = spec.database, spec.table
    if renames_table(spec.alter):   # it would rename the table the ALTER is tried on, wherever the ALTER says
        raise PreflightError(f"the ALTER renames the table {db}.{table} (RENAME TO …): a migration changes a table "
                             "under its own name; rename it with RENAME TABLE before or after the migration")
    found = query(conn, "SELECT TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                        "AND TABLE_NAME=%s", (db, table))
    if not found:
        raise PreflightError(f"table {db}.{table} does not exist")
    kind, engine = found[0]
    if kind != "BASE TABLE":
        raise PreflightError(f"{db}.{table} is a {kind.lower()}, not a table")
    if (engine or "").lower() != "innodb":
        raise PreflightError(f"{db}.{table} is {engine}: stream-osc migrates InnoDB tables into InnoDB tables only "
                             "(its copy, re-copies and swap rest on InnoDB's row locks and consistent snapshots)")
    pk = primary_key(conn, db, table)
    if not pk.columns:
        raise PreflightError(f"table {db}.{table} has no primary key; stream-osc needs one to copy and apply by key")
    for column in pk.columns:
        if column.data_type not in SUPPORTED_TYPES:
            reason = UNSUPPORTED_TYPES.get(column.data_type, "no exact way to match a change's key to the row is "
                                                              "known for this type")
            raise PreflightError(f"table {db}.{table} has primary-key column {column.name} of type "
                                 f"{column.column_type}, which cannot be a key here: {reason}")
    check_capturable_columns(conn, db, table)
    for leftover in ([spec.old_table] if spec.target_server else [spec.new_table, spec.old_table]):
        if scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                  (db, leftover)):
            raise PreflightError(f"table {db}.{leftover} already exists (left from an earlier run?): drop or rename "
                                 f"it, or run `stream-osc abort --table {db}.{table}` if a migration is unfinished")
    return pk


# Column types the pinned Debezium (debezium-connector-mariadb 3.5.0.Final) cannot read, each found by capturing
# a table holding one and changing a row on the embedded stack (docs/log/2026-12-07-connector-types.md). Its DDL
# parser does not know INET4 and INET6: the table's definition is skipped as unparseable, and the table's first
# change stops the task ("change event for table … whose schema isn't known"). MariaDB's compressed columns
# (`… COMPRESSED`) have binlog column types its binlog reader does not know: the first write fails to decode, in
# whichever table of the server it is, captured or not. UUID, and every other type tried, came through.
UNREADABLE_TYPES = {"inet4": "its DDL parser does not know the type", "inet6": "its DDL parser does not know the type"}
COMPRESSED_MARK = "COMPRESSED*/"   # how MariaDB shows the attribute in COLUMN_TYPE: /*M!100301 COMPRESSED*/


def check_capturable_columns(conn: pymysql.connections.Connection, db: str, table: str) -> None:
    """No column the connector cannot read, in the table or (compressed, which no table filter keeps from the binlog
    reader) anywhere on the server: the migration would pass init and its capture stop at the first such change;
    refused before anything is made, naming the columns."""
    unreadable = []
    for name, data_type, column_type in query(conn, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM "
                                                    "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                                                    "TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (db, table)):
        compressed = COMPRESSED_MARK in str(column_type).upper()
        reason = ("its binlog reader cannot decode a compressed column" if compressed
                  else UNREADABLE_TYPES.get(str(data_type).lower()))
        if reason:
            shown = re.sub(r"\s*/\*M?!\d*\s*(.*?)\s*\*/", r" \1", str(column_type))
            unreadable.append(f"{name} of type {shown} ({reason})")
    if unreadable:
        raise PreflightError(f"table {db}.{table} has column{'s' if len(unreadable) > 1 else ''} "
                             f"{', '.join(unreadable)}, which the Debezium connector cannot read: its capture would "
                             "stop at the table's first change; not supported (change the column's type, or drop its "
                             "COMPRESSED attribute, first)")
    elsewhere = query(conn, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                            "COLUMN_TYPE LIKE %s AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', "
                            "'performance_schema', 'sys') ORDER BY 1, 2, 3 LIMIT 6", (f"%{COMPRESSED_MARK}%",))
    if elsewhere:
        shown = ", ".join(f"{s}.{t}.{c}" for s, t, c in elsewhere[:5]) + (" and more" if len(elsewhere) > 5 else "")
        raise PreflightError(f"the server has compressed columns ({shown}): the Debezium connector cannot decode a "
                             "write to them, and one to any table holding them, captured or not, would stop this "
                             "migration's capture; not supported (drop their COMPRESSED attribute first)")


def check_target(conn: pymysql.connections.Connection, target: pymysql.connections.Connection,
                 spec: MigrationSpec) -> None:
    """A move to another server: the --where predicate reads the source, the target's schema exists and its
    table name is free (which also refuses the source table itself as the target)."""
    db, table = spec.database, spec.table
    if spec.where:
        try:
            query(conn, f"SELECT 1 FROM {qualified(db, table)} WHERE ({spec.where}) LIMIT 0")
        except pymysql.err.MySQLError as exc:
            raise PreflightError(f"--where is not a predicate on {db}.{table}: {exc.args[-1]} "
                                 f"(server error {exc.args[0]})") from None
        # A predicate reading other rows (a subquery, of this table or another) changes its answer for a row
        # without a change event of that row, and cannot be evaluated under the cutover's lock of the table alone.
        plan = query(conn, f"EXPLAIN SELECT 1 FROM {qualified(db, table)} WHERE ({spec.where})")
        if any(str(step[1]).upper() != "SIMPLE" or step[2] not in (None, table) for step in plan):
            raise PreflightError(f"--where must be decided by the row alone: {spec.where!r} reads other rows "
                                 "(a subquery); rows would enter or leave it without a change to them")
        check_where_deterministic(conn, spec)
    tdb, ttable = spec.target_names
    if not scalar(target, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=%s", (tdb,)):
        raise PreflightError(f"the target server has no database {tdb}: create it there first")
    if scalar(target, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
              (tdb, ttable)):
        raise PreflightError(f"table {tdb}.{ttable} already exists on the target server: drop or rename it, or "
                             f"run `stream-osc abort --table {db}.{table}` if a migration is unfinished")


# The server's refusal of an expression in a stored generated column: MariaDB; MySQL 8 (unnamed, named).
NOT_IN_STORED_COLUMN = (1901, 3102, 3763)
_REFUSED_PART = re.compile(r"'(.+)' cannot be used|disallowed function: (.+?)\.?$")


def check_where_deterministic(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """--where gives the same answer for a row until the row is written: the clock, randomness, variables and
    stored functions let a row come to match unwritten, and no change event ever makes it copied.

    The parts nameable from the text are refused by name (migration/predicate.py). The rest is the server's to
    judge, since only it knows which names are stored or loadable functions and which built-ins read the session:
    it refuses exactly such expressions in a stored generated column, so the predicate is tried as one, on an empty
    temporary copy of the table's columns (this session's alone, dropped at once, never in the binlog)."""
    db, table = spec.database, spec.table
    parts = changing_parts(spec.where)
    if parts:
        raise PreflightError(f"--where must give the same answer for a row until the row is written: {spec.where!r} "
                             f"uses {', '.join(parts)}; a row that comes to match without a write would never be "
                             "copied (write the moment or value as a literal)")
    probe = qualified(db, "stream_osc_where_check")
    try:
        columns = [quote_ident(r[0]) for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                          "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table))]
        # named, so that invisible columns come too; the columns alone (no keys, partitions or generation)
        query(conn, f"CREATE TEMPORARY TABLE {probe} SELECT {', '.join(columns)} FROM {qualified(db, table)} LIMIT 0")
        query(conn, f"ALTER TABLE {probe} ADD COLUMN stream_osc_where_answer TINYINT "
                    f"AS (({spec.where}) IS NOT NULL) STORED")
    except pymysql.err.MySQLError as exc:
        if exc.args[0] not in NOT_IN_STORED_COLUMN:
            raise PreflightError(f"--where could not be checked on {db}.{table}: {exc.args[-1]} "
                                 f"(server error {exc.args[0]})") from None
        named = _REFUSED_PART.search(str(exc.args[-1]))
        part = next((g for g in named.groups() if g), None) if named else None
        kind = "a stored function" if part and "`" in part else "its answer depends on more than the row"
        raise PreflightError(f"--where must give the same answer for a row until the row is written: "
                             f"{spec.where!r} uses {part or 'an expression'} ({kind}: the server refuses it in a "
                             "stored generated column); a row that comes to match without a write would never be "
                             "copied") from None
    finally:
        query(conn, f"DROP TEMPORARY TABLE IF EXISTS {probe}")


def check_load_thresholds(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """Every variable named in --max-load / --critical-load is a numeric global status variable here,
    and no critical limit is reached already."""
    max_load, critical_load = spec.load_limits()
    names = sorted({*max_load, *critical_load})
    if not names:
        return
    values = read_status(conn, names)
    for option, limits in (("--max-load", max_load), ("--critical-load", critical_load)):
        unknown = [name for name in limits if name.lower() not in values]
        if unknown:
            raise PreflightError(f"{option}: the server has no numeric global status variable "
                                 f"{', '.join(unknown)} (see SHOW GLOBAL STATUS)")
    reached = over(values, critical_load)
    if reached is not None:
        raise PreflightError(f"--critical-load is already reached ({reached}): not starting")


def check_privileges(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """The user can create, lock, rename and read the binlog (checked from SHOW GRANTS)."""
    grants = " ".join(r[0] for r in query(conn, "SHOW GRANTS")).upper()
    if "ALL PRIVILEGES ON *.*" in grants:
        return
    needed = ["SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "LOCK TABLES",
              "CREATE TEMPORARY TABLES", "REPLICATION"]
    missing = [p for p in needed if p not in grants]
    if missing:
        raise PreflightError(f"the database user lacks privileges: {', '.join(missing)} "
                             f"(needs them on {spec.database}.* and {spec.metadata_schema}.*, replication on *.*)")


KILL_PRIVILEGES = ("CONNECTION ADMIN", "CONNECTION_ADMIN", "SUPER")   # MariaDB 10.5+, MySQL 8, either
_GLOBAL_GRANT = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.IGNORECASE)


def global_privileges(conn: pymysql.connections.Connection) -> set[str]:
    """The user's privileges on *.*, upper case, from SHOW GRANTS ("ALL PRIVILEGES" stands for all)."""
    found: set[str] = set()
    for (line,) in query(conn, "SHOW GRANTS"):
        grant = _GLOBAL_GRANT.match(line)
        if grant:
            found.update(p.strip().upper() for p in grant.group(1).split(","))
    return found


def check_blocker_privileges(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """PROCESS, to see other sessions holding the table before any lock is asked for (without it their
    transactions and metadata locks are hidden, so a lock request could queue behind them and stall the
    application); and, with --force-kill-blockers-after, a privilege that may kill other users' sessions."""
    granted = global_privileges(conn)
    if "ALL PRIVILEGES" in granted:
        return
    if "PROCESS" not in granted:
        raise PreflightError("the database user lacks PROCESS (on *.*): without it the sessions holding the table "
                             "cannot be seen before the validation snapshot and the cutover lock it, and a lock "
                             "request queued behind them would stall the application; GRANT PROCESS ON *.* to it")
    if spec.force_kill_blockers_after_s is not None and not granted.intersection(KILL_PRIVILEGES):
        raise PreflightError("--force-kill-blockers-after needs the database user to hold CONNECTION ADMIN "
                             "(MariaDB), CONNECTION_ADMIN (MySQL) or SUPER on *.* to kill other users' sessions; "
                             "grant one, or leave the option out (the cutover then waits for them)")
