"""Database connections and server facts (MariaDB vs MySQL)."""
from __future__ import annotations

import errno
import os
import socket
import ssl
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

import pymysql
import pymysql.cursors
from pymysql.constants import COMMAND

from core.endpoints import MySQLAddress


class DatabaseUnreachable(Exception):
    """The server cannot be reached or refused the login."""

    user_facing = True


CR_SSL_CONNECTION_ERROR = 2026
CONNECT_TIMEOUT_S = 10   # the longest a new session waits for the server to answer


# Opens the text of every statement the tool sends, so that the tool's statements are told from the application's
# in the process list by any session: this process's, a `stream-osc worker` on another machine, another migration,
# through a proxy whose session ids are not the server's (throttle/app_activity.py); and by an operator reading it.
STATEMENT_TAG = "/* stream-osc */ "


class _Connection(pymysql.connections.Connection):
    """PyMySQL's connection, with ssl-mode=preferred's TLS context made once per process.

    PyMySQL makes a new context for every connection of that mode, loading the system's CA store each time
    for a context that verifies nothing: 26 ms of CPU per session here, a second over a 1M-row migration's
    38 sessions, on the cores the database and the copy share."""

    preferred_context: ssl.SSLContext | None = None   # two threads may both make it at first: either serves

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        if _Connection.preferred_context is None:
            _Connection.preferred_context = super()._create_ssl_ctx(sslp)
        return _Connection.preferred_context

    def connect(self, sock: Any = None) -> None:
        """PyMySQL's connect, with the handshake bounded by the connect timeout too: PyMySQL bounds only the
        TCP connect with it and reads the server's greeting with the read timeout, none by default, so a
        server (or a proxy) that accepts the connection and never answers would hold the tool forever."""
        wanted = self._read_timeout
        self._read_timeout = wanted or self.connect_timeout
        try:
            super().connect(sock)
        finally:
            self._read_timeout = wanted   # the next read sets the socket's timeout back to it

    def escape(self, obj: Any, mapping: dict | None = None) -> str:
        """An integer as PyMySQL writes it (its `escape_int`: the decimal digits), without its dispatch by
        type: appliers send every changed key two to four times per batch, and escaping took a seventh of the
        process's Python time under a load of 4,000 row changes a second (docs/benchmarks.md)."""
        if type(obj) is int and mapping is None:
            return str(obj)
        return super().escape(obj, mapping)


class _TaggedConnection(_Connection):
    """The tool's connection: every statement opened by STATEMENT_TAG."""

    def _execute_command(self, command: int, sql: str | bytes) -> None:
        """Every statement's text passes here (queries, and the COMMIT, ROLLBACK and SET that PyMySQL sends of
        its own); the tag goes in front of each."""
        if command == COMMAND.COM_QUERY:
            sql = _TAG_BYTES + (sql.encode(self.encoding) if isinstance(sql, str) else sql)
        super()._execute_command(command, sql)


_TAG_BYTES = STATEMENT_TAG.encode("ascii")


def untagged(statement: str) -> str:
    """A statement's text without the tool's tag in front: its words (`stream`, `osc`) are not a table's name."""
    return statement[len(STATEMENT_TAG):] if statement.startswith(STATEMENT_TAG) else statement


def close_quietly(conn: pymysql.connections.Connection | None) -> None:
    """Close `conn` if there is one, ignoring a session already cut; returns None for the caller's variable."""
    if conn is not None:
        try:
            conn.close()
        except pymysql.err.Error:
            pass
    return None


def connect(addr: MySQLAddress, database: str | None = None, autocommit: bool = True,
            read_timeout: float | None = None, tagged: bool = True) -> pymysql.connections.Connection:
    """Open a connection (over TLS as the DSN asks); errors name host:port, never the password. `tagged` False
    only for a session that stands for an application (the demo's traffic, the tests' writers): its statements
    are then counted as an application's (throttle/app_activity.py)."""
    try:
        conn = (_TaggedConnection if tagged else _Connection)(
            host=addr.host, port=addr.port, user=addr.user, password=addr.password,
            database=database, autocommit=autocommit, charset="utf8mb4",
            connect_timeout=CONNECT_TIMEOUT_S, read_timeout=read_timeout, ssl=tls_context(addr),
            ssl_disabled=addr.ssl_mode == "disabled",
        )
    except pymysql.err.OperationalError as exc:
        raise DatabaseUnreachable(f"cannot connect to MySQL at {addr.where()} as {addr.user!r} "
                                  f"({connect_failure(exc, addr)})") from None
    for statement in SESSION_SETUP:
        query(conn, statement)
    return conn


def tls_context(addr: MySQLAddress) -> ssl.SSLContext | None:
    """The TLS context of the DSN's ssl-mode: required encrypts only; verify-ca checks the server's
    certificate against ssl-ca (or the system's CAs); verify-identity also checks that it names the host.
    None for disabled and preferred (PyMySQL then encrypts when the server offers TLS, unchecked).

    Made once per mode, files and version of those files (a CA or client certificate replaced on disk is
    read again by the next session), not once per session."""
    if addr.ssl_mode in ("disabled", "preferred"):
        return None
    files = (addr.ssl_ca, addr.ssl_cert, addr.ssl_key)
    return _tls_context(addr.ssl_mode, *files, tuple(_version(path) for path in files))


def _version(path: str) -> tuple[int, int, int] | None:
    """What tells a file's versions apart: modification time, size and inode (a file replaced by a rename
    within one tick of the clock still differs); None without a path, or for a file that is not there."""
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino) if stat else None


@lru_cache(maxsize=16)
def _tls_context(ssl_mode: str, ssl_ca: str, ssl_cert: str, ssl_key: str,
                 versions: tuple[tuple[int, int, int] | None, ...]) -> ssl.SSLContext:
    """tls_context's context, per mode, files and their versions (no credentials in the cache's keys). The
    system's CA store, used without ssl-ca, is read once per process."""
    context = ssl.create_default_context(cafile=ssl_ca or None)
    context.check_hostname = ssl_mode == "verify-identity"
    if ssl_mode == "required":
        context.verify_mode = ssl.CERT_NONE
    if ssl_cert:
        context.load_cert_chain(ssl_cert, ssl_key)
    return context


# the server's refusals of a login, in words (its own text is left out: it echoes the user and host)
LOGIN_REFUSALS = {
    1040: "the server has too many connections",
    1044: "access denied to the database",
    1049: "unknown database",
    1129: "this host is blocked after too many connection errors (FLUSH HOSTS on the server)",
    1130: "this host is not allowed to connect to the server",
    1203: "the user has reached max_user_connections",
    1226: "the user has exceeded one of its resource limits",
    2013: "the server closed the connection during the handshake",
}


def connect_failure(exc: pymysql.err.OperationalError, addr: MySQLAddress) -> str:
    """Why a connection failed, in words, from the kind of the underlying error: a host name not found, a refused
    port, a timeout, a refused login, TLS. The server's and PyMySQL's texts are left out: one may echo input,
    the DSN's password among it."""
    code = exc.args[0] if exc.args else "?"
    cause = getattr(exc, "original_exception", None) or exc.__cause__ or exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY" in str(exc):
        return (f"error {code}: the server's TLS certificate was not accepted: not signed by ssl-ca"
                + (", or not issued for this host name" if addr.ssl_mode == "verify-identity" else ""))
    if isinstance(cause, ssl.SSLError):
        return f"error {code}: the TLS handshake failed"
    network = network_failure(cause)
    if network:
        return f"error {code}: {network}"
    if code == CR_SSL_CONNECTION_ERROR:   # given a TLS context, PyMySQL refuses a server that offers no TLS
        return f"error {code}: the server offered no TLS, and the DSN asks for ssl-mode={addr.ssl_mode}"
    if code == 1045:
        hint = "; if the user requires TLS, set ssl-mode (docs/connectivity.md)" if addr.ssl_mode == "disabled" else ""
        return f"error 1045: access denied: wrong user name or password{hint}"
    if code in LOGIN_REFUSALS:
        return f"error {code}: {LOGIN_REFUSALS[code]}"
    return f"error {code}"


def network_failure(cause: BaseException | None) -> str | None:
    """What a socket error means, in words; None when `cause` is none the network gives."""
    if isinstance(cause, socket.gaierror):
        if cause.errno in (socket.EAI_AGAIN, getattr(socket, "EAI_SYSTEM", None)):
            return "the host name could not be resolved now (DNS did not answer)"
        return "host name not found (DNS)"
    if isinstance(cause, (TimeoutError, socket.timeout)):
        return f"timed out after {CONNECT_TIMEOUT_S:g} s (no answer: a firewall, or a host that is down)"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if isinstance(cause, ConnectionResetError):
        return "connection reset by the other side"
    if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return "no route to the host (network unreachable)"
    if isinstance(cause, OSError):
        return f"network error: {os.strerror(cause.errno) if cause.errno else type(cause).__name__}"
    return None


# Every session of the tool:
# - READ COMMITTED: a locking read locks only the rows it returns (no gap or next-key locks that
#   application writes would queue behind, or deadlock with), and INSERT/REPLACE … SELECT reads the
#   source without locks (the copy is made right by the appliers; the appliers lock first, see
#   applier/README.md). Sessions that need a snapshot set REPEATABLE READ themselves.
# - strict mode: a value the new table cannot hold is an error, as in the server's own ALTER, never a
#   silent truncation; NO_AUTO_VALUE_ON_ZERO: a row whose AUTO_INCREMENT key is 0 is copied as 0.
# - UTC: a TIMESTAMP key read back or taken from a change event (Debezium sends UTC) names one instant;
#   in a zone with daylight saving an hour of local times is ambiguous. (Like gh-ost's sessions, so an
#   ALTER turning TIMESTAMP into DATETIME writes the UTC time.)
SESSION_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@GLOBAL.sql_mode, ''), 'STRICT_ALL_TABLES', "
    "'NO_AUTO_VALUE_ON_ZERO')",
    # MariaDB only (an executable comment MySQL skips, whatever version a proxy announces): an IN list of
    # in_predicate_conversion_threshold (1,000) values or more would be read as a derived table, row by row in the
    # list's order, and a locking read by key list would take its row locks out of key order, closing lock cycles
    # with the application's writes (applier/README.md, "Locks in key order"). 0 keeps every list an index range.
    "SET SESSION time_zone = '+00:00' /*M!100318 , SESSION in_predicate_conversion_threshold = 0 */",
)


def quote_ident(name: str) -> str:
    """Backtick-quote an identifier."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """`db`.`table`."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def query(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> list[tuple]:
    """Run a statement and return all rows."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def query_count(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> int:
    """Run a statement and return the number of rows it changed."""
    with conn.cursor() as cur:
        return cur.execute(sql, args)


def scalar(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> Any:
    """First column of the first row, or None."""
    rows = query(conn, sql, args)
    return rows[0][0] if rows else None


NO_SUCH_THREAD = 1094   # ER_NO_SUCH_THREAD


def kill_connection(conn: pymysql.connections.Connection, connection_id: int) -> bool:
    """KILL CONNECTION (its transaction rolls back): the session, not only its statement, since a KILL QUERY
    that arrives before a statement is dispatched is cleared when it is. False if it had ended already."""
    try:
        query(conn, "KILL CONNECTION %s", (int(connection_id),))
    except pymysql.err.MySQLError as exc:
        if exc.args[0] == NO_SUCH_THREAD:
            return False
        raise
    return True


@dataclass(frozen=True)
class ServerInfo:
    """What kind of server this is and the settings that matter to a migration."""

    version: str
    is_mariadb: bool
    binlog_format: str
    binlog_row_image: str
    log_bin: bool
    autoinc_lock_mode: int

    @property
    def flavor(self) -> str:
        return "mariadb" if self.is_mariadb else "mysql"

    @classmethod
    def read(cls, conn: pymysql.connections.Connection) -> "ServerInfo":
        version = scalar(conn, "SELECT VERSION()")
        variables = dict(query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                                     "('binlog_format','binlog_row_image','log_bin','innodb_autoinc_lock_mode')"))
        return cls(
            version=version,
            is_mariadb="mariadb" in version.lower(),
            binlog_format=variables.get("binlog_format", ""),
            binlog_row_image=variables.get("binlog_row_image", ""),
            log_bin=variables.get("log_bin", "OFF") == "ON",
            autoinc_lock_mode=int(variables.get("innodb_autoinc_lock_mode", 1)),
        )
