"""`stream-osc set NAME=VALUE`: names are the long options' (dashes or underscores), values take the
setting's type, and anything unknown, mistyped or invalid for the migration is one clear error."""
from __future__ import annotations

import pytest

from core.endpoints import ConfigError
from core.spec import MigrationSpec
from core.state_records import Migration
from core.stages import Stage, Status
from migration.settings import SETTINGS_OPTION, options_with, parse_assignments, settings_of, with_settings

SPEC = MigrationSpec(database="shop", table="orders", alter="ADD COLUMN n INT").validate()


def migration(settings: dict | None = None) -> Migration:
    options = {"chunk_size": 1000, **({SETTINGS_OPTION: settings} if settings is not None else {})}
    return Migration(7, "shop", "orders", "ADD COLUMN n INT", Stage.COPY, Status.RUNNING, "p", ("id",), None, 0,
                     None, None, options)


def test_assignments_take_the_settings_types():
    assert parse_assignments(["batch-size=2000", "max_load=Threads_running=30", "max-lag=50",
                              "copy-workers=8"]) == {
        "batch_size": 2000, "max_load": "Threads_running=30", "max_lag_events": 50, "copy_workers": 8}


@pytest.mark.parametrize("item, message", [
    ("chunk-size=10", "use NAME=VALUE with NAME one of max-load"),
    ("batch-size", "use NAME=VALUE"),
    ("batch-size=fast", "batch-size: 'fast' is not a whole number"),
])
def test_unknown_or_mistyped_settings_are_refused(item, message):
    with pytest.raises(ConfigError, match=message):
        parse_assignments([item])


@pytest.mark.parametrize("values, message", [
    ({"batch_size": 0}, "batch-size must be at least 1"),
    ({"max_load": "Threads_running>5"}, "--max-load: 'Threads_running>5' is not STATUS_VARIABLE=NUMBER"),
])
def test_a_setting_invalid_for_the_migration_is_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        options_with(migration(), SPEC, values)


def test_settings_accumulate_and_apply_over_the_spec():
    first = migration({"batch_size": 100})
    options = options_with(first, SPEC, {"copy_workers": 8})
    assert options[SETTINGS_OPTION] == {"batch_size": 100, "copy_workers": 8} and options["chunk_size"] == 1000
    later = migration(options[SETTINGS_OPTION])
    assert settings_of(later) == {"batch_size": 100, "copy_workers": 8}
    applied = with_settings(SPEC, later)
    assert (applied.batch_size, applied.copy_workers, applied.apply_workers) == (100, 8, SPEC.apply_workers)
    assert with_settings(SPEC, migration()) is SPEC
