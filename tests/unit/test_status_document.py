"""The status document keeps the types docs/status.md promises, for every field, whether the live figures
could be read or not; and a migration that no process runs is `stopped`."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli.status import (Times, capture_figures, copy_figures, iso, list_entry, list_lines, status_document,
                        status_lines)
from core.state_records import Migration
from core.stages import Stage, Status
from monitor.capture_lag import capture_note

DOC = Path(__file__).resolve().parents[2] / "docs" / "status.md"
JSON_TYPES = {"integer": int, "number": (int, float), "string": str, "boolean": bool, "object": dict, "array": list,
              "null": type(None)}


def documented_fields(section: str) -> dict[str, tuple[type, ...]]:
    """{field path: allowed Python types} from the first table after `section` in docs/status.md."""
    text = DOC.read_text().split(section, 1)[1]
    fields = {}
    for name, kinds in re.findall(r"^\| `([a-z_.]+)` \| ([a-z ]+?) \|", text, re.M):
        if name in fields:
            break   # the next table
        types: list[type] = []
        for kind in kinds.split(" or "):
            allowed = JSON_TYPES[kind]
            types += list(allowed) if isinstance(allowed, tuple) else [allowed]
        fields[name] = tuple(types)
    return fields


def flatten(doc: dict) -> dict[str, object]:
    flat = {}
    for key, value in doc.items():
        flat[key] = value
        if key == "copy":
            flat.update({f"{key}.{k}": v for k, v in value.items()})
    return flat


def migration(stage: Stage = Stage.APPLY, status: Status = Status.RUNNING, **values) -> Migration:
    base = dict(id=7, database="shop", table="orders", alter_sql="ADD COLUMN note INT", stage=stage, status=status,
                prefix="streamosc_orders_7", pk_columns=("id",), error=None, validation_diffs=0,
                cutover_blocked_ms=None, cutover_at=None, options={"chunk_size": 100})
    base.update(values)
    return Migration(**base)


TIMES = Times(created_at=1_700_000_000.0, updated_at=1_700_000_050.5, now=1_700_000_100.25)
LIVE_READ = {"connector_state": "RUNNING", "apply_lag_events": 12, "throttled": True,
             "throttle_reason": "Threads_running=31 >= 25", "capture_lag_s": 0.04, "capture_heartbeat_age_s": 0.8}
LIVE_UNREADABLE = {"connector_error": "Kafka Connect at http://x:8083 is unreachable",
                   "apply_lag_error": "KafkaUnreachable", "throttle_error": "Redis: ConnectionError",
                   "capture_lag_error": "Redis: ConnectionError"}


@pytest.mark.parametrize("case, doc", [
    ("copying, live figures read", status_document(migration(Stage.COPY), TIMES, (500, 2, 10, 0.3),
                                                   ("host:1:abc", 0.5), LIVE_READ)),
    ("applying, nothing readable", status_document(migration(), TIMES, (1000, 10, 10, 1.0), None, LIVE_UNREADABLE)),
    ("done", status_document(migration(Stage.DONE, Status.DONE, cutover_blocked_ms=40, cutover_at=1_700_000_090.0,
                                       validation_diffs=1), TIMES, (1000, 10, 10, 1.0), None, {})),
])
def test_every_field_has_its_documented_type(case, doc):
    fields = documented_fields("| field | type | meaning |")
    flat = flatten(doc)
    assert set(flat) == set(fields), (case, set(flat) ^ set(fields))
    wrong = {name: type(flat[name]).__name__ for name, types in fields.items()
             if not isinstance(flat[name], types) or (isinstance(flat[name], bool) and bool not in types)}
    assert wrong == {}, case


LISTED = (7, "shop", "orders", "copy", "running", 0, 3725.5, 1.25, "ADD COLUMN note INT")   # a row as list reads it


def listed(**changes) -> tuple:
    names = ("migration", "db", "tbl", "stage", "status", "failed", "age", "idle", "alter")
    return tuple({**dict(zip(names, LISTED)), **changes}[name] for name in names)


def test_list_fields_are_documented_and_typed():
    fields = documented_fields("## `stream-osc list`")
    assert set(fields) == {"migration", "table", "stage", "status", "state", "has_error", "age_s", "updated_s_ago",
                           "alter", "progress", "eta_s", "apply_lag_events", "capture_lag_s"}
    for entry in (list_entry(LISTED, ("host:1:abc", 0.5), (500, 2, 10, 0.25),
                             {"apply_lag_events": 1_204, "capture_lag_s": 0.04, "copy_measured": (80.0, 185.0)}),
                  list_entry(listed(stage="done", status="done"), None, None, {})):
        assert set(entry) == set(fields)
        assert {name: type(entry[name]).__name__ for name, types in fields.items()
                if not isinstance(entry[name], types)} == {}


def test_list_shows_progress_eta_and_lag_of_each_migration():
    copying = list_entry(LISTED, ("host:1:abc", 0.5), (500, 2, 10, 0.25),
                         {"apply_lag_events": 1_204, "capture_lag_s": 0.04, "copy_measured": (80.0, 185.0)})
    assert (copying["progress"], copying["eta_s"], copying["apply_lag_events"], copying["capture_lag_s"]) == \
        (0.25, 185.0, 1_204, 0.04)
    averaged = list_entry(LISTED, None, (500, 2, 10, 0.25), {})   # no coordinator's rate: over the age
    assert averaged["state"] == "stopped" and averaged["eta_s"] == round(3725.5 * 3, 1)
    done = list_entry(listed(stage="done", status="done"), None, None, {})
    assert (done["progress"], done["eta_s"], done["apply_lag_events"]) == (1.0, None, None)


def test_list_on_a_terminal_shows_human_durations_and_seconds_in_json():
    rows = [list_entry(LISTED, ("host:1:abc", 0.5), (500, 2, 10, 0.25),
                       {"apply_lag_events": 1_204, "copy_measured": (80.0, 185.0)}),
            list_entry(listed(migration=6, stage="done", status="done", age=42.0), None, None, {})]
    header, copying, done = list_lines(rows)
    assert header.split() == ["ID", "TABLE", "STAGE", "STATE", "PROGRESS", "ETA", "LAG", "AGE", "ERROR"]
    assert copying.split() == ["7", "shop.orders", "copy", "running", "25.0%", "3m05s", "1,204", "events", "1h02m"]
    assert done.split() == ["6", "shop.orders", "done", "done", "100.0%", "-", "-", "42s"]
    assert json.loads(json.dumps(rows))[0]["eta_s"] == 185.0 and rows[0]["age_s"] == 3725.5


def test_status_on_a_terminal_shows_the_eta_and_age_as_durations():
    doc = status_document(migration(Stage.COPY), TIMES, (1_000, 1, 4, 0.25), ("host:1:abc", 0.5),
                          capture_figures(json.dumps(capture_note(0.1, 0.5, None, 812.3, 3725.0)).encode(), Stage.COPY))
    lines = "\n".join(status_lines(doc))
    assert "812 rows/s, ETA 1h02m)" in lines and "(1m40s ago)" in lines
    assert doc["copy"]["eta_s"] == 3725.0 and doc["age_s"] == 100.25   # JSON keeps seconds


def test_timestamps_are_utc_iso_with_milliseconds():
    doc = status_document(migration(Stage.DONE, Status.DONE, cutover_at=1_700_000_090.5), TIMES, (0, 0, 0, 1.0),
                          None, {})
    assert doc["created_at"] == "2023-11-14T22:13:20.000Z"
    assert doc["cutover_at"] == "2023-11-14T22:14:50.500Z"
    assert doc["age_s"] == 100.25
    assert iso(None) is None


def test_copy_rate_and_eta_while_copying_only():
    assert copy_figures(1_000, 1, 4, 0.25, Stage.COPY, 10.0) == {
        "rows": 1_000, "chunks_done": 1, "chunks": 4, "progress": 0.25, "rows_per_s": 100.0, "eta_s": 30.0}
    after = copy_figures(4_000, 4, 4, 1.0, Stage.APPLY, 60.0)
    assert after["rows_per_s"] is None and after["eta_s"] is None and after["progress"] == 1.0


@pytest.mark.parametrize("status, coordinator, state", [
    (Status.RUNNING, None, "stopped"),
    (Status.PAUSED, None, "stopped"),
    (Status.RUNNING, ("host:1:abc", 1.0), "running"),
    (Status.PAUSED, ("host:1:abc", 1.0), "paused"),
    (Status.WAITING, None, "waiting"),      # --cutover manual: in sync, no process needed
    (Status.DONE, None, "done"),
    (Status.ABORTED, None, "aborted"),
])
def test_unfinished_migration_without_coordinator_is_stopped(status, coordinator, state):
    assert status_document(migration(status=status), TIMES, (0, 0, 0, 0.0), coordinator, {})["state"] == state


def test_text_lines_say_why_a_figure_is_unknown():
    lines = "\n".join(status_lines(status_document(migration(), TIMES, (1000, 10, 10, 1.0), None, LIVE_UNREADABLE)))
    assert "apply lag (events): unknown (KafkaUnreachable)" in lines
    assert "throttled: unknown (Redis: ConnectionError)" in lines
    assert "coordinator: none running" in lines and "state: stopped" in lines


def test_chunks_validated_ahead_are_counted_on_the_copy_line():
    doc = status_document(migration(Stage.COPY), TIMES, (500, 2, 10, 0.3), ("host:1:abc", 0.5), LIVE_READ, 2)
    assert doc["copy"]["chunks_checked"] == 2
    copy_line = next(line for line in status_lines(doc) if line.strip().startswith("copy:"))
    assert "chunks 2/10 (30.0%, " in copy_line and copy_line.endswith(", 2 validated ahead")


def test_capture_lag_is_shown_with_the_heartbeat_age_or_why_it_is_unknown():
    lines = "\n".join(status_lines(status_document(migration(Stage.COPY), TIMES, (500, 2, 10, 0.3),
                                                   ("host:1:abc", 0.5), LIVE_READ)))
    assert "capture lag: 0.04 s (connector heartbeat 0.8 s ago)" in lines
    assert capture_figures(None, Stage.APPLY) == {
        "capture_lag_error": "not measured now: no coordinator is running the migration"}
    assert capture_figures(b'{"capture_lag_s": null, "heartbeat_age_s": null}', Stage.CUTOVER)["capture_lag_error"]
    assert capture_figures(None, Stage.DONE) == {}


def test_a_paused_migration_says_so_instead_of_blaming_kafka():
    paused = capture_figures(b'{"capture_lag_s": null, "heartbeat_age_s": 0.5, "reason": "paused"}', Stage.APPLY)
    assert paused["capture_lag_reason"] == "paused" and "paused" in paused["capture_lag_error"]
    assert "Kafka" not in paused["capture_lag_error"]
    cut = capture_figures(b'{"capture_lag_s": null, "heartbeat_age_s": null, "reason": "unreachable"}', Stage.COPY)
    assert cut["capture_lag_reason"] == "unreachable" and "Kafka" in cut["capture_lag_error"]
    measured = capture_figures(b'{"capture_lag_s": 0.1, "heartbeat_age_s": 0.5, "reason": null}', Stage.COPY)
    assert measured["capture_lag_reason"] is None and measured["capture_lag_error"] is None
    lines = status_lines(status_document(migration(status=Status.PAUSED), TIMES, (0, 0, 0, 1.0), ("host:1:abc", 0.5),
                                         paused))
    assert any(line.endswith("capture lag: unknown (" + paused["capture_lag_error"] + ")") for line in lines)


def test_the_coordinator_note_names_why_the_lag_is_unknown():
    assert capture_note(None, 0.5, "paused") == {"capture_lag_s": None, "heartbeat_age_s": 0.5, "reason": "paused",
                                                 "copy_rows_per_s": None, "copy_eta_s": None}
    assert capture_note(0.0421, None, "paused")["reason"] is None


def test_while_copying_the_coordinators_rate_is_preferred_to_the_average_over_the_migrations_age():
    note = json.dumps(capture_note(0.1, 0.5, None, 812.345, 61.26)).encode()
    live = capture_figures(note, Stage.COPY)
    doc = status_document(migration(Stage.COPY), TIMES, (1_000, 1, 4, 0.25), ("host:1:abc", 0.5), live)
    assert doc["copy"]["rows_per_s"] == 812.3 and doc["copy"]["eta_s"] == 61.3
    assert "copy_measured" not in doc
    no_rate_yet = capture_figures(json.dumps(capture_note(0.1, 0.5)).encode(), Stage.COPY)
    doc = status_document(migration(Stage.COPY), TIMES, (1_000, 1, 4, 0.25), ("host:1:abc", 0.5), no_rate_yet)
    assert doc["copy"] == {**copy_figures(1_000, 1, 4, 0.25, Stage.COPY, TIMES.age_s), "chunks_checked": 0}
    applying = status_document(migration(Stage.APPLY), TIMES, (1_000, 4, 4, 1.0), ("host:1:abc", 0.5), live)
    assert applying["copy"]["rows_per_s"] is None


def test_a_move_names_where_the_table_goes_and_a_one_server_change_names_none():
    moved = migration(options={"target_server": True, "target_dsn": "mysql://osc@db2.example:3307/",
                               "target_table": "archive.orders", "where": "region = 'eu'"})
    assert status_document(moved, TIMES, (0, 0, 0, 0.0), None, {})["target"] == \
        "archive.orders on db2.example:3307 where region = 'eu'"
    assert status_document(migration(), TIMES, (0, 0, 0, 0.0), None, {})["target"] is None
