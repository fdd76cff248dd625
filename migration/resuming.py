"""A migration already under way: join its live coordinator (`resume` un-pauses it), ask it to cut over
(`stream-osc cutover`) and read how it stopped if it did, or take it up in this process with the options it
was started with."""
from __future__ import annotations

import logging
from functools import partial

import pymysql
import redis

from connectors.health import binlog_gone, describe_failure
from connectors.rest import ConnectError
from core.context import read_throttle_note
from core.logs import log_event
from core.options import redacted_url
from core.source_check import SourceChanged, check_source_unchanged
from core.spec import TARGET_OPTIONS, MigrationSpec, with_overrides
from core.state_records import Migration
from core.stages import SWAPPED_STAGES, WORKING_STAGES, Stage, Status
from core.swap_preconditions import read_swap_settings, swap_setting_problem
from migration.checks import PreflightError, check_blocker_privileges
from migration.coordination import Coordination, MigrationStopped
from migration.cutover_request import ask_coordinator
from migration.lease import coordinator_gone
from migration.settings import SETTINGS_OPTION, settings_of
from throttle.load import CriticalLoad, is_critical_load_error

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

RESUMABLE_OPTIONS = ("partitions", "chunk_size", "metadata_schema", "keep_old", "cutover", "cutover_window_schedule",
                     "cutover_timezone", "defer_indexes", "algorithm", "alter_foreign_keys_method",
                     *TARGET_OPTIONS)
# kept with the migration too, but a value given to `resume`/`cutover` replaces the stored one (and is kept):
# how the cutover may lock, and what holds the work back or stops it (a migration stopped at --critical-load,
# resumed as its message says, must not go on without that limit)
LOCK_OPTIONS = ("lock_wait_s", "lock_tries", "force_kill_blockers_after_s", "force_kill_max_rows")
THROTTLE_OPTIONS = ("max_load", "critical_load", "cloudwatch_max_load", "rds_instance", "throttle_replicas",
                    "max_replica_lag", "max_app_latency", "max_redo_fill")
# who is told of the migration's events (migration/notify.py): a resume on another machine may name its own
NOTIFY_OPTIONS = ("hook_dir", "notify_url")
KEPT_UNLESS_GIVEN = (*LOCK_OPTIONS, *THROTTLE_OPTIONS, *NOTIFY_OPTIONS)


def shown_value(field: str, value: object) -> object:
    """An option's value as logs and messages show it: a notification URL without its user:password and path."""
    return redacted_url(str(value)) if field == "notify_url" and value else value


def resumed_values(options: dict[str, object], given: frozenset[str]) -> dict[str, object]:
    """The values a resumed migration takes back from its stored `options`: every RESUMABLE_OPTIONS one, and
    the KEPT_UNLESS_GIVEN ones not `given` to the resuming command."""
    return {k: options[k] for k in (*RESUMABLE_OPTIONS, *KEPT_UNLESS_GIVEN)
            if k in options and (k in RESUMABLE_OPTIONS or k not in given)}


def stopped_coordinator_error(error: str) -> Exception:
    """The error a coordinator asked to cut over stopped with, as its stored message tells it: the
    --critical-load stop (4), else a resumable stop (3). Resuming.asked_coordinator_stop reads the facts first."""
    if is_critical_load_error(error):
        return CriticalLoad(error)
    return MigrationStopped(f"the coordinator stopped before the swap: {error}")


def throttle_note_for_display(client: redis.Redis, migration_id: int) -> str | None:
    """read_throttle_note for a display: None when Redis fails."""
    try:
        return read_throttle_note(client, migration_id)
    except redis.RedisError:
        return None


class Resuming:
    """What the coordinator does with a migration it finds under way."""

    def __init__(self, shared: Coordination, given: frozenset[str], resume_live: bool) -> None:
        self.shared = shared
        self.given = given               # spec fields the operator set for this run (command line or config file)
        self.resume_live = resume_live   # a live coordinator elsewhere: un-pause it instead of refusing

    def join_live(self, migration: Migration, owner: str, age_s: float) -> int:
        """Another process coordinates this migration: `resume` un-pauses it, `migrate` refuses."""
        name = self.shared.spec.qualified_name
        if not self.resume_live:
            raise PreflightError(f"migration {migration.id} of {name} is being run by {owner} "
                                 f"(heartbeat {age_s:.0f} s ago); add workers with `stream-osc worker --table "
                                 f"{name}` or pause/abort it")
        if migration.status == Status.PAUSED:
            self.shared.store.update(migration.id, status=Status.RUNNING, error=None)
            self.shared.say(f"migration {migration.id} of {name} resumed; {owner} continues it")
        else:
            self.shared.say(f"migration {migration.id} of {name} is already {migration.status} under {owner}")
        return 0

    def ask_live_coordinator(self, migration: Migration, owner: str) -> bool:
        """`stream-osc cutover` while a coordinator runs the migration: it swaps (True, also when it swaps after
        an abort's answer), it stops with an error (raised: asked_coordinator_stop), or it went away without a
        word (False: this process takes over)."""
        shared, name = self.shared, self.shared.spec.qualified_name
        shared.say(f"asking {owner}, which runs migration {migration.id}, to cut over {name} now (its own options "
                   "apply)")
        log_event(log, "cutover requested", migration=migration.id, coordinator=owner)
        notes = redis.Redis.from_url(shared.endpoints.redis_url, socket_timeout=5)
        try:
            answer = ask_coordinator(shared.store, migration.id, shared.say,
                                     partial(throttle_note_for_display, notes, migration.id))
        finally:
            notes.close()
        if answer.swapped:
            shared.say(f"cutover: {owner} swapped {name}")
            return True
        if answer.error:
            stop = self.asked_coordinator_stop(migration.id, answer.error)
            if stop is None:   # it swapped all the same: an abort came too late
                shared.say(f"cutover: {owner} swapped {name}")
                return True
            raise stop
        shared.say(f"{owner} stopped before the swap; cutting over in this process")
        return False

    def asked_coordinator_stop(self, migration_id: int, error: str) -> Exception | None:
        """The error of an asked coordinator's stop, with its exit code, read again from the facts once it is gone
        (an abort is answered before its coordinator stops, and it may swap meanwhile), where its message alone
        would misreport it. None: the tables were swapped and the coordinator finished, or is finishing, the
        migration. Exit codes: docs/cli.md; when the facts cannot be read now, as its message tells
        (stopped_coordinator_error)."""
        shared, name = self.shared, self.shared.spec.qualified_name
        try:
            alive = not coordinator_gone(shared.store, migration_id)
            current = shared.store.find(migration_id)
            if current is None:
                return PreflightError(f"{error}: nothing of it is left, and {name} is unchanged "
                                      "(the coordinator's output says why)")
            if current.stage == Stage.DONE or (current.stage in SWAPPED_STAGES and alive):
                return None
            if current.stage in SWAPPED_STAGES or shared.swap_already_done():
                return MigrationStopped(f"{error}; the tables were swapped all the same: `stream-osc resume --table "
                                        f"{name}` finishes the migration")
            if current.status == Status.ABORTED:
                return MigrationStopped(f"migration {migration_id} was aborted", resumable=False)
            if current.stage in WORKING_STAGES:
                check_source_unchanged(shared.conn, current)
                state = shared.connect.state(current.connector)
                if state is not None and state.failed and binlog_gone(state):
                    return MigrationStopped(describe_failure(current.connector, state, name), resumable=False)
        except SourceChanged as changed:
            return changed
        except (pymysql.err.Error, ConnectError, LookupError):   # unknown here: the resume that follows finds out
            pass
        return stopped_coordinator_error(error)

    def resumed_spec(self, migration: Migration) -> MigrationSpec:
        """The spec a resumed migration runs with: its stored RESUMABLE_OPTIONS always; its stored KEPT_UNLESS_GIVEN
        unless given to this command, in which case the given value wins, over a `stream-osc set` one too, and is
        stored for later resumes. Refused (nothing changed) when the user may not do what the lock options ask
        (e.g. kill blockers)."""
        shared = self.shared
        spec = with_overrides(shared.spec, **resumed_values(migration.options, self.given))
        check_blocker_privileges(shared.conn, spec)
        given = [k for k in KEPT_UNLESS_GIVEN if k in self.given]
        settings = settings_of(migration)
        replaced = {k: getattr(spec, k) for k in given if migration.options.get(k) != getattr(spec, k) or k in settings}
        if replaced:
            shared.store.change_options(migration.id, lambda current: {
                **current.options, **replaced,
                SETTINGS_OPTION: {k: v for k, v in settings_of(current).items() if k not in replaced}})
            shown = {k: shown_value(k, v) for k, v in replaced.items()}
            log_event(log, "stored options replaced", **shown)
            shared.say("resume: " + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + " as given "
                       "(on the command line or in the config file), replacing the migration's own values")
        return spec

    def warn_if_cutover_would_refuse(self) -> None:
        """Say as a migration resumes, not hours later at its cutover, that the server's settings would stop it (a
        new migration has just passed preflight, which refuses them). Advisory only: a failed read says nothing;
        the cutover checks again (core/swap_preconditions.py)."""
        try:
            variables = read_swap_settings(self.shared.conn)
        except pymysql.err.Error:
            return
        problem = swap_setting_problem(variables, self.shared.info.is_mariadb)
        if problem is not None:
            log_event(log, "the cutover will refuse on this server's settings", logging.WARNING, reason=problem)
            self.shared.say(f"warning: the cutover will refuse unless this changes first: {problem}")
