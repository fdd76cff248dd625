"""`status` and `list`: a migration's state as one typed document (docs/status.md), as text or JSON.

The document's fields always have the same JSON type; a figure that cannot be read now is `null`,
with the reason in a companion `*_error` field, never a string in place of a number.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import redis

from applier.giving_way import LockWaits
from connectors.health import describe_failure
from connectors.rest import ConnectError, connect_client
from core import redis_keys
from core.context import read_throttle_note
from core.db import query
from cutover.blockers import Blocker
from core.schedule import parse_schedule
from core.endpoints import Endpoints, parse_mysql_dsn
from core.spec import MigrationSpec
from core.state import StateStore
from core.state_records import Migration
from core.stages import FINISHED, WORKING_STAGES, Stage, Status
from migration.lease import live_coordinator
from migration.settings import settings_of
from monitor.progress import copy_fraction, format_duration
from streams.topics import TopicNames, group_lag

SCHEMA_VERSION = 1
LAG_STAGES = WORKING_STAGES   # the applier group has offsets from init on
STOPPED_STATUSES = (Status.RUNNING, Status.PAUSED)          # without a live coordinator: stopped
CAPTURE_UNKNOWN = {   # why the coordinator's note has no capture lag, by its `reason` (monitor/capture_lag.py)
    "paused": "not measured while the migration is paused: nothing is stamped until it resumes",
    "unreachable": "not measured now: the coordinator cannot reach Kafka or the database"}


@dataclass(frozen=True)
class Times:
    """When a migration row was made and last changed, and the database's clock now (Unix seconds)."""

    created_at: float
    updated_at: float
    now: float

    @property
    def age_s(self) -> float:
        return self.now - self.created_at


def iso(epoch_s: float | None) -> str | None:
    """UTC ISO 8601 with milliseconds and a Z, or None."""
    if epoch_s is None:
        return None
    moment = dt.datetime.fromtimestamp(epoch_s, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def migration_times(store: StateStore, migration_id: int) -> Times:
    """The row's timestamps, with the server's own clock for "now" (ages do not depend on this host's clock)."""
    row = query(store.conn, f"SELECT UNIX_TIMESTAMP(created_at), UNIX_TIMESTAMP(updated_at), UNIX_TIMESTAMP(NOW(3)) "
                            f"FROM {store.t('migrations')} WHERE id=%s", (migration_id,))[0]
    return Times(*(float(v) for v in row))


def copy_figures(rows: int, chunks_done: int, chunks: int, progress: float, stage: Stage,
                 elapsed_s: float, measured: tuple[float | None, float | None] | None = None) -> dict[str, Any]:
    """Copy progress; while copying, the rate and ETA: `measured` (rows/s, ETA s) by the running coordinator
    when it has a rate, else rows over the migration's age (init and stopped time included) and the ETA it
    implies."""
    rate = eta = None
    if stage == Stage.COPY and measured is not None and measured[0] is not None:
        rate, eta = measured
    elif stage == Stage.COPY and elapsed_s > 0 and rows > 0:
        rate = rows / elapsed_s
        eta = elapsed_s * (1 - progress) / progress if progress > 0 else None
    return {"rows": rows, "chunks_done": chunks_done, "chunks": chunks, "progress": round(progress, 4),
            "rows_per_s": None if rate is None else round(rate, 1), "eta_s": None if eta is None else round(eta, 1)}


def state_of(status: str, coordinator: tuple[str, float] | None) -> str:
    """running | paused | waiting | stopped | done | aborted; stopped: unfinished and no process runs it."""
    return "stopped" if status in STOPPED_STATUSES and coordinator is None else str(status)


def target_of(migration: Migration) -> str | None:
    """Where a move to another server puts the table (docs/move.md): `DB2.T2 on host:port [where …]`."""
    options = migration.options
    if not options.get("target_server"):
        return None
    table = options.get("target_table") or f"{migration.database}.{migration.table}"
    dsn = options.get("target_dsn")
    server = parse_mysql_dsn(dsn, "--target-dsn").where() if dsn else "the server of STREAM_OSC_TARGET_DSN"
    where = f" where {options['where']}" if options.get("where") else ""
    return f"{table} on {server}{where}"


def status_document(migration: Migration, times: Times, copy: tuple[int, int, int, float],
                    coordinator: tuple[str, float] | None, live: dict[str, Any],
                    chunks_checked: int = 0) -> dict[str, Any]:
    """The typed document of docs/status.md; `live` holds the figures read from Connect, Kafka and Redis;
    `chunks_checked` the chunks validation ahead found equal."""
    names = TopicNames(migration.prefix, migration.database, migration.table)
    live = dict(live)
    measured = live.pop("copy_measured", None)   # the coordinator's copy rate and ETA (capture_figures)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "migration": migration.id,
        "table": f"{migration.database}.{migration.table}",
        "alter": migration.alter_sql,
        "target": target_of(migration),
        "path": migration.path,
        "path_reason": migration.path_reason,
        "stage": str(migration.stage),
        "status": str(migration.status),
        "state": state_of(migration.status, coordinator),
        "error": migration.error,
        "created_at": iso(times.created_at),
        "updated_at": iso(times.updated_at),
        "age_s": round(times.age_s, 3),
        "coordinator": coordinator[0] if coordinator else None,
        "coordinator_heartbeat_age_s": round(coordinator[1], 3) if coordinator else None,
        "connector": migration.connector,
        "topic": names.changes,
        "group": migration.group_id,
        "copy": {**copy_figures(*copy, migration.stage, times.age_s, measured), "chunks_checked": chunks_checked},
        "validation_diffs": int(migration.validation_diffs),
        "cutover_blocked_ms": migration.cutover_blocked_ms,
        "cutover_at": iso(migration.cutover_at),
        "settings": settings_of(migration),
        "connector_state": None, "connector_error": None,
        "apply_lag_events": None, "apply_lag_error": None,
        "capture_lag_s": None, "capture_heartbeat_age_s": None, "capture_lag_reason": None,
        "capture_lag_error": None,
        "throttled": None, "throttle_reason": None, "throttle_error": None,
        "blockers": None, "blockers_error": None,
        "apply_waits": None,
        "cutover_window": None,
    }
    doc.update(live)
    return doc


def live_figures(endpoints: Endpoints, migration: Migration) -> dict[str, Any]:
    """Connector state, apply lag and throttle of an unfinished migration; errors go into `*_error`."""
    figures: dict[str, Any] = {}
    if migration.status in FINISHED:
        return figures
    table = f"{migration.database}.{migration.table}"
    try:
        state = connect_client(endpoints).state(migration.connector)
        figures["connector_state"] = "MISSING" if state is None else ("FAILED" if state.failed else state.connector)
        if state is not None and state.failed:
            figures["connector_error"] = describe_failure(migration.connector, state, table)
    except ConnectError as exc:
        figures["connector_error"] = str(exc)
    if migration.stage in LAG_STAGES:
        names = TopicNames(migration.prefix, migration.database, migration.table)
        try:
            partitions = int(migration.options.get("partitions", MigrationSpec.partitions))
            figures["apply_lag_events"] = group_lag(endpoints.kafka, migration.group_id, names.changes, partitions)
        except Exception as exc:  # noqa: BLE001 - status still shows the rest
            figures["apply_lag_error"] = str(exc)
    try:
        client = redis.Redis.from_url(endpoints.redis_url, socket_timeout=5)
        note = read_throttle_note(client, migration.id)
        figures["throttled"] = bool(note)
        figures["throttle_reason"] = note
        blockers = client.get(redis_keys.blockers_note(migration.id))
        figures["blockers"] = json.loads(blockers) if blockers else []
        figures["apply_waits"] = [{"key": key, "waited_s": round(waited, 1)}
                                  for key, waited in LockWaits.read(client, migration.id)]
        figures.update(capture_figures(client.get(redis_keys.capture_note(migration.id)), migration.stage))
    except redis.RedisError as exc:
        figures["throttle_error"] = figures["blockers_error"] = figures["capture_lag_error"] = \
            f"Redis: {type(exc).__name__}"
    if migration.options.get("cutover_window_schedule"):
        figures["cutover_window"] = window_line(migration)
    return figures


def capture_figures(note: bytes | None, stage: Stage) -> dict[str, Any]:
    """Capture lag and heartbeat age as the coordinator last measured them (monitor/capture_lag.py), and its copy
    rate and ETA (`copy_measured`, taken into the document's `copy` by status_document)."""
    if stage not in LAG_STAGES:
        return {}
    if note is None:
        return {"capture_lag_error": "not measured now: no coordinator is running the migration"}
    figures = json.loads(note)
    reason = figures.get("reason")   # absent in notes of earlier versions
    return {"capture_lag_s": figures["capture_lag_s"], "capture_heartbeat_age_s": figures["heartbeat_age_s"],
            "copy_measured": (figures.get("copy_rows_per_s"), figures.get("copy_eta_s")),
            "capture_lag_reason": reason if figures["capture_lag_s"] is None else None,
            "capture_lag_error": None if figures["capture_lag_s"] is not None else CAPTURE_UNKNOWN.get(
                reason, CAPTURE_UNKNOWN["unreachable"])}


def window_line(migration: Migration) -> str:
    """The migration's cutover windows and whether one is open now."""
    options = migration.options
    schedule = parse_schedule(options["cutover_window_schedule"], options.get("cutover_timezone", "UTC"))
    now = dt.datetime.now(dt.timezone.utc)
    when = "open now" if schedule.is_open(now) else f"next at {schedule.next_opening(now):%Y-%m-%d %H:%M %Z}"
    return f"{schedule.describe()}, {when}"


def blockers_text(blockers: list[dict[str, Any]] | None) -> str | None:
    """The sessions the cutover waits for, one phrase each."""
    if blockers is None:
        return None
    return "; ".join(Blocker(**b).describe() for b in blockers) or "none"


def apply_waits_text(waits: list[dict[str, Any]] | None) -> str | None:
    """The keys whose re-read waits for a row another session holds, longest first; None when there are none."""
    if not waits:
        return None
    shown = ", ".join(f"{w['key']} ({w['waited_s']:.1f} s)" for w in waits[:5])
    more = f" and {len(waits) - 5} more" if len(waits) > 5 else ""
    return f"rows held by another session: {shown}{more}"


def running_coordinator(store: StateStore, migration_id: int, status: str) -> tuple[str, float] | None:
    """(owner, heartbeat age) of the process coordinating an unfinished migration; None if none is alive
    (one that ran in this pid space and is gone counts as dead at once, without waiting for its heartbeat to age)."""
    return None if status in FINISHED else live_coordinator(store, migration_id)


def read_status(endpoints: Endpoints, store: StateStore, migration: Migration) -> dict[str, Any]:
    """Everything `status` shows for one migration."""
    coordinator = running_coordinator(store, migration.id, migration.status)
    chunks = store.chunks(migration.id)
    chunk_rows = int(migration.options.get("chunk_size", MigrationSpec.chunk_size))
    copy = (sum(c.rows_copied for c in chunks), sum(c.done for c in chunks), len(chunks),
            copy_fraction(chunks, chunk_rows) if chunks else 0.0)
    return status_document(migration, migration_times(store, migration.id), copy, coordinator,
                           live_figures(endpoints, migration), store.checked_count(migration.id))


def status_lines(doc: dict[str, Any]) -> list[str]:
    """The document as aligned `name: value` lines for a terminal (unknown figures say why)."""
    copy = doc["copy"]
    rate = f", {copy['rows_per_s']:,.0f} rows/s" if copy["rows_per_s"] is not None else ""
    eta = f", ETA {format_duration(copy['eta_s'])}" if copy["eta_s"] is not None else ""
    finished = doc["state"] in ("done", "aborted")
    copied = doc.get("path") != "instant"   # an instant change made no copy, connector, topic or group
    rows: list[tuple[str, object]] = [
        ("migration", doc["migration"]), ("table", doc["table"]), ("alter", doc["alter"]),
        ("moves to", doc["target"]),
        ("path", doc["path"] + (f" ({doc['path_reason']})" if doc.get("path_reason") else "")
         + (" (ALGORITHM=INSTANT: nothing was copied)" if not copied else "")),
        ("stage", doc["stage"]), ("state", doc["state"]),
        ("started", f"{doc['created_at']} ({format_duration(doc['age_s'])} ago)"),
        ("copy", None if not copied else f"{copy['rows']:,} rows, chunks {copy['chunks_done']}/{copy['chunks']} "
                 f"({copy['progress'] * 100:.1f}%{rate}{eta})"
                 + (f", {copy['chunks_checked']} validated ahead" if copy["chunks_checked"] else "")),
        ("apply lag (events)", _known(doc["apply_lag_events"], doc["apply_lag_error"])),
        ("capture lag", _known(None if doc["capture_lag_s"] is None else f"{doc['capture_lag_s']:.2f} s" + (
            f" (connector heartbeat {doc['capture_heartbeat_age_s']:.1f} s ago)"
            if doc["capture_heartbeat_age_s"] is not None else ""), doc["capture_lag_error"])),
        ("throttled", _known(None if doc["throttled"] is None else
                             f"yes: {doc['throttle_reason']}" if doc["throttled"] else "no",
                             doc["throttle_error"])),
        ("waiting for", _known(blockers_text(doc["blockers"]), doc["blockers_error"])),
        ("apply waits on", apply_waits_text(doc["apply_waits"])),
        ("cutover window", doc["cutover_window"]),
        ("validation diffs", doc["validation_diffs"]), ("cutover blocked ms", doc["cutover_blocked_ms"]),
        ("coordinator", None if finished else (
            f"{doc['coordinator']} (heartbeat {doc['coordinator_heartbeat_age_s']:.1f} s ago)"
            if doc["coordinator"] else "none running")),
        ("connector", doc["connector"] if copied else None),
        ("connector state", f"FAILED: {doc['connector_error']}" if doc["connector_state"] == "FAILED"
         else _known(doc["connector_state"], doc["connector_error"])),
        ("topic", doc["topic"] if copied else None), ("consumer group", doc["group"] if copied else None),
        ("settings", ", ".join(f"{k}={v}" for k, v in doc["settings"].items()) or None), ("error", doc["error"]),
    ]
    return [f"{name:>20}: {value}" for name, value in rows if value is not None]


def _known(value: object, error: str | None) -> object:
    """`value`, or `unknown (why)` when it could not be read."""
    return f"unknown ({error})" if error else value


def list_rows(store: StateStore, endpoints: Endpoints) -> list[dict[str, Any]]:
    """Every migration recorded in the metadata schema, newest first: id, table, stage, state, age, and for an
    unfinished one its copy progress and ETA (as `status` reads them) and its lag: the applier group's, read from
    Kafka, and the capture lag its coordinator last measured (Redis). A figure not read is null."""
    if not store.schema_exists():
        return []
    rows = query(store.conn, f"SELECT id, db, tbl, stage, status, error IS NOT NULL, "
                             f"TIMESTAMPDIFF(MICROSECOND, created_at, NOW(3)) / 1e6, "
                             f"TIMESTAMPDIFF(MICROSECOND, updated_at, NOW(3)) / 1e6, alter_sql "
                             f"FROM {store.t('migrations')} ORDER BY id DESC")
    notes = redis.Redis.from_url(endpoints.redis_url, socket_timeout=5)
    try:
        listed = []
        for row in rows:
            mid, status = int(row[0]), row[4]
            copy, live = None, {}
            if status not in FINISHED:
                migration = store.get(mid)
                chunks = store.chunks(mid)
                chunk_rows = int(migration.options.get("chunk_size", MigrationSpec.chunk_size))
                copy = (sum(c.rows_copied for c in chunks), sum(c.done for c in chunks), len(chunks),
                        copy_fraction(chunks, chunk_rows) if chunks else 0.0)
                live = list_live(endpoints, migration, notes)
            listed.append(list_entry(row, running_coordinator(store, mid, status), copy, live))
        return listed
    finally:
        notes.close()


def list_live(endpoints: Endpoints, migration: Migration, notes: redis.Redis) -> dict[str, Any]:
    """The applier group's lag (Kafka) and the coordinator's capture lag and copy rate (its Redis note) of an
    unfinished migration; what cannot be read is left out (null in the list)."""
    figures: dict[str, Any] = {}
    if migration.stage in LAG_STAGES:
        names = TopicNames(migration.prefix, migration.database, migration.table)
        try:
            partitions = int(migration.options.get("partitions", MigrationSpec.partitions))
            figures["apply_lag_events"] = group_lag(endpoints.kafka, migration.group_id, names.changes, partitions)
        except Exception:  # noqa: BLE001 - the list still shows the rest (status says why)
            pass
    try:
        figures.update(capture_figures(notes.get(redis_keys.capture_note(migration.id)), migration.stage))
    except redis.RedisError:
        pass
    return figures


def list_entry(row: tuple, coordinator: tuple[str, float] | None, copy: tuple[int, int, int, float] | None,
               live: dict[str, Any]) -> dict[str, Any]:
    """One migration of `list` (docs/status.md): `row` as read from the migrations table; `copy` (rows, chunks
    done, chunks, progress) and `live` (list_live) for an unfinished one, else None and {}."""
    mid, db, tbl, stage, status, failed, age, idle, alter_sql = row
    age = float(age)
    progress = eta = None
    if status == Status.DONE:
        progress = 1.0
    elif copy is not None:
        figures = copy_figures(*copy, stage, age, live.get("copy_measured"))
        progress, eta = figures["progress"], figures["eta_s"]
    return {"migration": int(mid), "table": f"{db}.{tbl}", "stage": stage, "status": status,
            "state": state_of(status, coordinator), "has_error": bool(failed), "age_s": round(age, 3),
            "updated_s_ago": round(float(idle), 3), "alter": alter_sql, "progress": progress, "eta_s": eta,
            "apply_lag_events": live.get("apply_lag_events"), "capture_lag_s": live.get("capture_lag_s")}


def list_lines(rows: list[dict[str, Any]]) -> list[str]:
    """`list` for a terminal: one line a migration, durations as `1h02m` (JSON keeps seconds)."""
    def shown(value: object, text: str) -> str:
        return "-" if value is None else text
    lines = [f"{'ID':>6}  {'TABLE':<40} {'STAGE':<9} {'STATE':<8} {'PROGRESS':>8} {'ETA':>6} {'LAG':>14} "
             f"{'AGE':>6}  ERROR"]
    for row in rows:
        progress, eta, lag = row["progress"], row["eta_s"], row["apply_lag_events"]
        lines.append(f"{row['migration']:>6}  {row['table']:<40} {row['stage']:<9} {row['state']:<8} "
                     f"{shown(progress, f'{(progress or 0) * 100:.1f}%'):>8} "
                     f"{shown(eta, format_duration(eta or 0)):>6} {shown(lag, f'{lag or 0:,} events'):>14} "
                     f"{format_duration(row['age_s']):>6}  {'yes' if row['has_error'] else ''}".rstrip())
    return lines
