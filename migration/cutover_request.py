"""`stream-osc cutover` while a coordinator runs the migration: ask it, through the migration's row, and wait.

A coordinator waiting for its cutover (`--cutover manual`, or outside its `--cutover-window-schedule`)
keeps its appliers applying, so it is the process that can swap in seconds: it holds the lease, the
appliers are warm and the lag is near zero. The request is a timestamp in the row (as `pause` is a
status), read by the coordinator about once a second; it stands until a coordinator takes it up, so a
coordinator resumed after a crash honours it too. Interrupting the asking command withdraws it until a
coordinator takes it up; after that the coordinator swaps as soon as it can, also after a hold for --max-load.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from core.state import StateStore
from core.stages import Stage, Status
from migration.lease import live_coordinator

POLL_S = 0.5


@dataclass(frozen=True)
class CutoverAnswer:
    """How a request ended: `swapped`; or the coordinator stopped before the swap with `error`; or (neither)
    it went away without a word (killed): the asking process then cuts over itself."""

    swapped: bool
    error: str | None = None


def ask_coordinator(store: StateStore, migration_id: int, say: Callable[[str], None],
                    read_throttle_reason: Callable[[], str | None] = lambda: None) -> CutoverAnswer:
    """Request the cutover of a migration whose coordinator is alive; return once it swapped or went away.
    `read_throttle_reason` reads why the coordinator holds the work back (a throttle also postpones the swap's lock)."""
    store.request_cutover(migration_id)
    paused_said = False
    throttle_said: str | None = None
    try:
        while True:
            throttled = read_throttle_reason()
            if throttled and throttled != throttle_said:
                say(f"throttled ({throttled}): the swap waits until the load drops")
            throttle_said = throttled
            migration = store.find(migration_id)
            if migration is None:   # discarded: the ALTER cannot succeed on this data (its coordinator said why)
                return CutoverAnswer(False, f"migration {migration_id} was discarded by its coordinator")
            if migration.stage == Stage.DONE:
                return CutoverAnswer(True)
            if migration.status == Status.ABORTED:
                return CutoverAnswer(False, f"migration {migration_id} was aborted")
            if migration.status == Status.PAUSED and not paused_said:
                say(f"migration {migration_id} is paused: it cuts over once resumed")
                paused_said = True
            if live_coordinator(store, migration_id) is None:
                after = store.find(migration_id)
                if after is None:   # discarded between the two reads
                    return CutoverAnswer(False, f"migration {migration_id} was discarded by its coordinator")
                if after.stage == Stage.DONE:
                    return CutoverAnswer(True)
                return CutoverAnswer(False, after.error)
            time.sleep(POLL_S)
    except BaseException:
        store.clear_cutover_request(migration_id)   # (harmless once taken up: the coordinator already acts on it)
        raise
