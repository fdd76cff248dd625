"""The target server of a move stays the one init wrote to.

Every process of a move finds the target server in its own environment (`STREAM_OSC_TARGET_DSN`, the config file,
a secret): a resumed coordinator, a `worker` on another host, `stream-osc cutover`. One pointed at another server
holding a table of the same name (a writable replica, a proxy routing elsewhere) would apply there, commit the
group's offsets, and the cutover would state that the target holds every acknowledged write.

So init writes a random token into a small table of the tool on the target server (`<metadata schema>.target_tokens`)
and records it in the migration's options, beside the server's identity: `server_id` and MySQL's `server_uuid`
(MariaDB has none; its `server_uid`, derived from a MAC address and the port, is recorded to be shown only). Every
target session opened through the run context, and the move's cutover again under its lock, compares both before
writing:
- no token: another server (or another schema of tokens) — refused;
- the token, on a server of another id: a copy of the target's data (a replica, or the target after a failover).
  Refused too: a writable replica holds the token as well, and an asynchronous failover may have lost rows the
  appliers wrote and whose offsets they committed. The operator who knows it is the new primary accepts it
  (`stream-osc accept-target`), which validates the whole table again before any cutover (docs/move.md).
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pymysql

from core.db import qualified, query, quote_ident
from core.logs import log_event
from core.state import StateStore

log = logging.getLogger("stream_osc.target_identity")

TARGET_IDENTITY_OPTION = "target_identity"   # in the migration's options (absent before it was recorded: no check)
TOKENS_TABLE = "target_tokens"
NO_SUCH_TABLE, NO_SUCH_DATABASE = 1146, 1049
ACCESS_DENIED = (1044, 1142)   # to a database, to a table


class TargetMismatch(Exception):
    """A target session reached another server than the one init wrote to: the process stops before it writes."""

    user_facing = True


class TargetNotMarked(Exception):
    """Init could not write its token on the target server (the account lacks privileges there)."""

    user_facing = True


@dataclass(frozen=True)
class ServerIdentity:
    """Who a server says it is. `server_id` and `server_uuid` (MySQL) are compared: replication needs them to differ
    between the servers of one topology. The rest is shown only (a container's host name or MAC changes with it)."""

    server_id: int
    server_uuid: str | None = None
    server_uid: str | None = None     # MariaDB
    hostname: str = ""
    port: int = 0

    def same_server(self, other: "ServerIdentity") -> bool:
        return self.server_id == other.server_id and self.server_uuid == other.server_uuid

    def describe(self) -> str:
        named = f"server_uuid {self.server_uuid}" if self.server_uuid else f"server_uid {self.server_uid or '?'}"
        return f"server_id {self.server_id} ({named}, {self.hostname}:{self.port})"


@dataclass(frozen=True)
class TargetIdentity:
    """The token init wrote on the target and the server it wrote it on."""

    token: str
    server: ServerIdentity

    def option(self) -> dict[str, Any]:
        return {"token": self.token, **asdict(self.server)}

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "TargetIdentity | None":
        recorded = options.get(TARGET_IDENTITY_OPTION)
        if not recorded:
            return None
        server = {k: v for k, v in recorded.items() if k != "token"}
        return cls(str(recorded["token"]), ServerIdentity(**server))


def read_server(conn: pymysql.connections.Connection) -> ServerIdentity:
    """The server's identity as the session sees it (a proxy answers with the backend's)."""
    server_id, hostname, port = query(conn, "SELECT @@server_id, @@hostname, @@port")[0]
    return ServerIdentity(int(server_id), _variable(conn, "server_uuid"), _variable(conn, "server_uid"),
                          str(hostname), int(port))


def _variable(conn: pymysql.connections.Connection, name: str) -> str | None:
    rows = query(conn, "SHOW GLOBAL VARIABLES LIKE %s", (name,))
    return str(rows[0][1]) if rows and rows[0][1] else None


def mark_target(target: pymysql.connections.Connection, schema: str, migration_id: int,
                source: str) -> TargetIdentity:
    """Write a new token on the target server (init, before the table is made there); the caller records it. The
    row names the migration and its source, for whoever finds it there."""
    token = uuid.uuid4().hex
    table = qualified(schema, TOKENS_TABLE)
    query(target, f"CREATE DATABASE IF NOT EXISTS {quote_ident(schema)} CHARACTER SET utf8mb4")
    query(target, f"CREATE TABLE IF NOT EXISTS {table} (token CHAR(32) NOT NULL PRIMARY KEY, "
                  "migration_id BIGINT NOT NULL, source VARCHAR(300) NOT NULL, "
                  "created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB")
    query(target, f"INSERT INTO {table} (token, migration_id, source) VALUES (%s, %s, %s)",
          (token, migration_id, source[:300]))
    return TargetIdentity(token, read_server(target))


def record_target(target: pymysql.connections.Connection, store: StateStore, migration_id: int,
                  source: str) -> TargetIdentity:
    """Mark the target server and record its identity in the migration's options (init). The row comes first: a
    process killed between the two leaves a token nobody checks, never a recorded token the target lacks."""
    try:
        identity = mark_target(target, store.schema, migration_id, source)
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in ACCESS_DENIED:
            raise TargetNotMarked(f"the target server's account cannot write the tool's token table "
                                  f"{store.schema}.{TOKENS_TABLE} there (server error {exc.args[0]}): grant it CREATE, "
                                  f"SELECT, INSERT and DELETE on {store.schema}.* of the target server") from None
        raise
    store.change_options(migration_id, lambda current: {**current.options, TARGET_IDENTITY_OPTION: identity.option()})
    log_event(log, "target server recorded", migration=migration_id, token=identity.token,
              server=identity.server.describe())
    return identity


def has_token(conn: pymysql.connections.Connection, schema: str, token: str) -> bool:
    """Whether the server holds the token (no tokens table or schema: it does not)."""
    try:
        return bool(query(conn, f"SELECT 1 FROM {qualified(schema, TOKENS_TABLE)} WHERE token = %s", (token,)))
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in (NO_SUCH_TABLE, NO_SUCH_DATABASE):
            return False
        raise


def mismatch(recorded: TargetIdentity, token_found: bool, found: ServerIdentity, where: str) -> str | None:
    """Why a session on `found` (reached at `where`) is not the recorded target; None when it is."""
    if token_found and found.same_server(recorded.server):
        return None
    expected = f"expected the server holding token {recorded.token} ({recorded.server.describe()})"
    if not token_found:
        return (f"the target server at {where} is not the one this migration writes to: {expected}, found "
                f"{found.describe()} without that token (another server, perhaps with a table of the same name); "
                "nothing was written there. Point STREAM_OSC_TARGET_DSN (or target_dsn, or the secret) at the "
                "migration's target server and run the command again")
    return (f"the target server at {where} holds this migration's token but is another server: {expected}, found "
            f"{found.describe()} (a replica of the target, or the target after a failover); nothing was written "
            "there. If it is the target's new primary, accept it with `stream-osc accept-target` (the whole table is "
            "validated again before the cutover); otherwise point STREAM_OSC_TARGET_DSN at the target server")


def check_target(target: pymysql.connections.Connection, schema: str, options: Mapping[str, Any], where: str,
                 options_now: Callable[[], Mapping[str, Any]] | None = None) -> None:
    """Raise TargetMismatch unless the session is on the recorded target server (nothing recorded: no check).
    `options_now` reads the options again before refusing: an accepted failover may have been recorded since
    they were read."""
    recorded = TargetIdentity.from_options(options)
    if recorded is None:
        return
    found = read_server(target)
    token_found = has_token(target, schema, recorded.token)
    reason = mismatch(recorded, token_found, found, where)
    if reason is not None and options_now is not None:
        again = TargetIdentity.from_options(options_now())
        if again is not None and again != recorded:
            reason = mismatch(again, has_token(target, schema, again.token), found, where)
    if reason is not None:
        log_event(log, "target server refused", logging.ERROR, where=where, expected_token=recorded.token,
                  expected=recorded.server.describe(), found=found.describe(), token_found=token_found)
        raise TargetMismatch(reason)


def forget_token(target: pymysql.connections.Connection, schema: str, options: Mapping[str, Any]) -> None:
    """Remove the migration's token row from the target server (the migration ended; best effort)."""
    recorded = TargetIdentity.from_options(options)
    if recorded is None:
        return
    try:
        query(target, f"DELETE FROM {qualified(schema, TOKENS_TABLE)} WHERE token = %s", (recorded.token,))
    except pymysql.err.MySQLError as exc:
        log_event(log, "the target's token row was not removed", logging.WARNING, token=recorded.token,
                  reason=str(exc))
