"""`stream-osc accept-target`: take a failed-over target server as the move's target (docs/move.md).

The token init wrote on the target is data, so replication carries it to the new primary; the server id is not.
Every process refuses such a server (core/target_identity.py) because a writable replica looks the same, and an
asynchronous failover may have lost rows the appliers wrote and whose offsets they committed. Only the operator
knows which it is. Accepting records the new server's identity and forgets a validation already passed (a
migration at its cutover goes back to validation; a move never checks chunks ahead of it), so the whole table is
compared, and repaired, on the new server before any cutover.
"""
from __future__ import annotations

import logging

import pymysql

from core.context import target_connection
from core.endpoints import Endpoints
from core.logs import log_event
from core.spec import MigrationSpec
from core.state import StateStore
from core.state_records import Migration
from core.stages import WORKING_STAGES, Stage, Status
from core.target_identity import TARGET_IDENTITY_OPTION, TargetIdentity, has_token, read_server
from migration.checks import PreflightError
from migration.lease import live_coordinator

log = logging.getLogger("stream_osc.target_failover")


def accept_target(conn: pymysql.connections.Connection, endpoints: Endpoints, spec: MigrationSpec,
                  store: StateStore, migration: Migration) -> str:
    """Record the server the target DSN reaches now as the migration's target, if it holds the migration's token;
    returns what was done, in a sentence. Refused while a coordinator runs (it would go on past the validation it
    made on the old server)."""
    recorded = TargetIdentity.from_options(migration.options)
    if not spec.target_server or recorded is None:
        raise PreflightError(f"migration {migration.id} of {spec.qualified_name} recorded no target server "
                             "identity: nothing to accept")
    if migration.stage not in WORKING_STAGES:
        raise PreflightError(f"migration {migration.id} is at stage {migration.stage}: nothing to accept")
    live = live_coordinator(store, migration.id)
    if live is not None:
        raise PreflightError(f"the coordinator {live[0]} of migration {migration.id} is running: stop it first "
                             "(it stops by itself on a target it does not know)")
    target = target_connection(endpoints, spec)
    assert target is not None
    try:
        found = read_server(target)
        where = endpoints.target(spec.target_dsn).where()
        if not has_token(target, spec.metadata_schema, recorded.token):
            raise PreflightError(f"the server at {where} ({found.describe()}) does not hold token {recorded.token} "
                                 "of this migration: it is no copy of the target server; not accepted")
    finally:
        target.close()
    if found.same_server(recorded.server):
        return f"the server at {where} is already the migration's target ({found.describe()}); nothing changed"
    accepted = TargetIdentity(recorded.token, found)
    store.change_options(migration.id, lambda current: {**current.options, TARGET_IDENTITY_OPTION: accepted.option()})
    again = ""
    if migration.stage == Stage.CUTOVER:
        store.set_status(migration.id, Status.RUNNING, only_from=(Status.WAITING,))
        store.enter_stage(migration.id, Stage.VALIDATE)
        again = "; it goes back to validation"
    log_event(log, "failed-over target server accepted", logging.WARNING, migration=migration.id,
              was=recorded.server.describe(), now=found.describe(), token=recorded.token)
    return (f"migration {migration.id} of {spec.qualified_name}: the target is now {found.describe()} at {where} "
            f"(was {recorded.server.describe()}){again}; the whole table is validated again before the cutover: "
            f"`stream-osc resume --table {spec.qualified_name}` continues")
