"""What the state store (core/state.py) reads back from the metadata schema: a migration's row, a chunk of its copy
plan, a chunk checked ahead of validation, and the names their options and helper tables go by.

Plain records, apart from the store, so that the logic that only reads them (progress, status, settings) needs no
database session."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from core.keys import Key, load_key
from core.stages import Stage, Status


@dataclass(frozen=True)
class Chunk:
    """One planned key range `[start, end)` of the bulk copy (None: open) and how far it got: the rows
    from `next` on (from `start` while nothing is copied) remain."""

    number: int
    start: Key | None
    end: Key | None
    next: Key | None
    rows_copied: int
    done: bool


@dataclass(frozen=True)
class ChunkCheck:
    """A chunk compared in both tables while the copy went on (cutover/validate_ahead.py): its rows were equal
    but for the `differing` keys, and only keys of events from `offsets` on (the applier group's committed
    offsets per partition of the change topic, read before the check) may have been written since."""

    number: int
    start: Key | None
    end: Key | None
    offsets: dict[int, int]
    at: float   # epoch seconds
    differing: tuple[Key, ...] = ()


CAPTURE_HEARTBEAT_PREFIX = "capture_heartbeat_"   # + migration id: the table of its capture heartbeat row


def capture_heartbeat_table(migration_id: int) -> str:
    """The table of a migration's capture heartbeat row, in the metadata schema (monitor/capture_lag.py)."""
    return f"{CAPTURE_HEARTBEAT_PREFIX}{migration_id}"


# The largest key at init (JSON, core/keys.py): the copy stops there; later keys arrive as changes.
COPY_UNTIL_OPTION = "copy_until"
# The application's write latency before the copy (ms), which copy and validation yield against.
APP_LATENCY_BASELINE_OPTION = "app_latency_baseline_ms"
# The path the migration took: "instant" (the server's ALGORITHM=INSTANT was the change) or "copy"; and why the
# copy, when it is one (core/instant.py). A migration recorded before either was kept is a copy.
PATH_OPTION = "path"
PATH_REASON_OPTION = "path_reason"
# The table's definition as the ALTER makes it (core/source_check.py's table_definition of an empty table made with
# it), kept before the instant try: a coordinator killed after the server made the change finds the table so.
ALTERED_DEFINITION_OPTION = "altered_definition"


@dataclass
class Migration:
    """One row of `<metadata>.migrations`."""

    id: int
    database: str
    table: str
    alter_sql: str
    stage: Stage
    status: Status
    prefix: str
    pk_columns: tuple[str, ...]
    error: str | None
    validation_diffs: int
    cutover_blocked_ms: int | None
    cutover_at: float | None     # wall-clock time (epoch s) when the swap's lock was taken
    options: dict[str, Any]
    protocol: int | None = None   # PROTOCOL of the coordinator that last claimed it (None: a version before it)

    @property
    def connector(self) -> str:
        return self.prefix.replace("_", "-")

    @property
    def fence_table(self) -> str:
        return f"fence_{self.id}"

    @property
    def capture_heartbeat_table(self) -> str:
        return capture_heartbeat_table(self.id)

    @property
    def group_id(self) -> str:
        return f"{self.prefix}.appliers"

    @functools.cached_property
    def copy_until(self) -> Key | None:
        """The largest key at init: the bulk copy covers keys up to it (None: no bound recorded)."""
        return load_key(self.options.get(COPY_UNTIL_OPTION))

    @property
    def path(self) -> str:
        """"instant" or "copy" (core/instant.py); "copy" until init has chosen, and for earlier versions' rows."""
        return str(self.options.get(PATH_OPTION) or "copy")

    @property
    def path_reason(self) -> str | None:
        """Why a copy: the instant try was not made, or the server refused it (None: instant, or not recorded)."""
        value = self.options.get(PATH_REASON_OPTION)
        return str(value) if value else None

    @property
    def app_latency_baseline_ms(self) -> float | None:
        """The application's write latency measured before the copy (throttle/app_latency.py), if recorded."""
        value = self.options.get(APP_LATENCY_BASELINE_OPTION)
        return float(value) if value is not None else None
