"""One schema for the options: an impossible value is refused at parse time (exit 2, one line) on the command
line, in a config file and by `stream-osc set`; a config file's keys are the options' names, its values typed as
the options; `resume` and `cutover` do not offer the options they would ignore."""
from __future__ import annotations

import argparse
import math

import pytest

from cli.command_spec import spec_from_args
from cli.main import build_parser, main
from core.endpoints import ConfigError
from core.options import OPTIONS
from core.spec import MigrationSpec, load_migration_file
from migration.settings import SETTABLE, parse_assignments

MIGRATE = ["migrate", "--table", "shop.orders", "--alter", "ADD COLUMN c INT"]


def usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("option, value, message", [
    ("--max-lag", "-1", "argument --max-lag: must be at least 0, not -1"),
    ("--cutover-attempts", "0", "argument --cutover-attempts: must be at least 1, not 0"),
    ("--cutover-window", "nan", "argument --cutover-window: must be a finite number of seconds above 0, not nan"),
    ("--cutover-window", "inf", "must be a finite number of seconds above 0, not inf"),
    ("--cutover-window", "-3", "must be a finite number of seconds above 0, not -3"),
    ("--cutover-window", "0", "must be a finite number of seconds above 0, not 0"),
    ("--lock-wait-timeout", "nan", "argument --lock-wait-timeout: must be a finite number of seconds above 0"),
    ("--lock-wait-timeout", "-0.5", "must be a finite number of seconds above 0, not -0.5"),
    ("--lock-tries", "0", "argument --lock-tries: must be at least 1, not 0"),
    ("--copy-workers", "4.7", "argument --copy-workers: '4.7' is not a whole number of at least 1"),
    ("--copy-workers", "0", "argument --copy-workers: must be at least 1, not 0"),
    ("--apply-workers", "-2", "must be at least 1, not -2"),
    ("--chunk-size", "0", "argument --chunk-size: must be at least 1, not 0"),
    ("--batch-size", "0", "must be at least 1"),
    ("--apply-batch-size", "0", "must be at least 1"),
    ("--partitions", "0", "argument --partitions: must be at least 1, not 0"),
    ("--max-replica-lag", "0", "must be at least 1"),
    ("--force-kill-max-rows", "-1", "argument --force-kill-max-rows: must be at least 0, not -1"),
    ("--force-kill-blockers-after", "-5s", "'-5s' is not a duration such as 5s"),
])
def test_an_impossible_limit_is_refused_at_parse_time(capsys, option, value, message):
    assert message in usage_error(capsys, [*MIGRATE, f"{option}={value}"])


@pytest.mark.parametrize("argv, message", [
    (["worker", "--table", "a.b", "--copy-workers", "0"], "argument --copy-workers: must be at least 1"),
    (["worker", "--table", "a.b", "--apply-workers", "-1"], "argument --apply-workers: must be at least 1"),
    (["status", "--table", "a.b", "--interval", "nan"], "'nan' is not a positive number of seconds"),
    (["status", "--table", "a.b", "--interval", "inf"], "'inf' is not a positive number of seconds"),
    (["resume", "--table", "a.b", "--max-lag=-1"], "argument --max-lag: must be at least 0, not -1"),
])
def test_other_commands_refuse_impossible_numbers_too(capsys, argv, message):
    assert message in usage_error(capsys, argv)


@pytest.mark.parametrize("item, message", [
    ("max-lag=-1", "max-lag must be at least 0, not -1"),
    ("max_lag=nope", "max-lag: 'nope' is not a whole number"),
    ("copy-workers=4.7", "copy-workers: '4.7' is not a whole number"),
    ("apply-workers=0", "apply-workers must be at least 1, not 0"),
    ("max-replica-lag=0", "max-replica-lag must be at least 1, not 0"),
    ("apply-batch-size=-5", "apply-batch-size must be at least 1, not -5"),
])
def test_set_refuses_what_the_option_refuses(item, message):
    with pytest.raises(ConfigError, match=message):
        parse_assignments([item])


def test_every_settable_name_is_an_option_of_the_schema():
    names = {option.name: option.field for option in OPTIONS}
    assert all(names[name] == field for name, field in SETTABLE.items())


@pytest.mark.parametrize("field, value, message", [
    ("cutover_window_s", math.nan, "--cutover-window must be a finite number of seconds above 0, not nan"),
    ("cutover_attempts", 0, "--cutover-attempts must be at least 1, not 0"),
    ("max_lag_events", -1, "--max-lag must be at least 0, not -1"),
    ("lock_wait_s", math.nan, "--lock-wait-timeout must be a finite number of seconds above 0"),
    ("force_kill_blockers_after_s", math.inf, "--force-kill-blockers-after must be a finite duration"),
])
def test_the_spec_itself_refuses_impossible_values(field, value, message):
    with pytest.raises(ConfigError, match=message):
        MigrationSpec(database="shop", table="orders", alter="ADD c INT", **{field: value}).validate()


def write(tmp_path, text: str):
    path = tmp_path / "osc.toml"
    path.write_text(text)
    return path


def test_a_config_file_speaks_the_options_language(tmp_path):
    path = write(tmp_path, '[migration]\ntable = "shop.orders"\nalter = "ADD COLUMN c INT"\nmax_lag = 50\n'
                           'cutover-window = 2.5\nlock_wait_timeout = 1\ndrop_old = true\n'
                           'force_kill_blockers_after = "5s"\ncutover_attempts = 3\ndry_run = false\n'
                           'max-load = "Threads_running=25"\ncopy_workers = 8\n')
    values = load_migration_file(path)
    assert values == {"table": "shop.orders", "alter": "ADD COLUMN c INT", "max_lag_events": 50,
                      "cutover_window_s": 2.5, "lock_wait_s": 1.0, "keep_old": False,
                      "force_kill_blockers_after_s": 5.0, "cutover_attempts": 3, "dry_run": False,
                      "max_load": "Threads_running=25", "copy_workers": 8}
    spec = spec_from_args(argparse.Namespace(config=str(path), table=None, alter=None))
    assert (spec.max_lag_events, spec.cutover_window_s, spec.keep_old, spec.dry_run) == (50, 2.5, False, False)


@pytest.mark.parametrize("line, message", [
    ('copy_workers = "8"', "copy_workers in [migration] of {path} must be a whole number of at least 1 (without "
                           "quotes), not a string"),
    ("copy_workers = 4.7", "copy_workers in [migration] of {path} must be a whole number of at least 1 (without "
                           "quotes), not a fractional number"),
    ('dry_run = "false"', "dry_run in [migration] of {path} must be true or false (without quotes), not a string"),
    ("max_lag = -1", "max_lag in [migration] of {path} must be at least 0, not -1"),
    ("cutover_window = nan", "cutover_window in [migration] of {path} must be a finite number of seconds above 0, "
                             "not nan"),
    ("cutover_attempts = 0", "cutover_attempts in [migration] of {path} must be at least 1, not 0"),
    ("cutover = 1", "cutover in [migration] of {path} must be a string, not an integer"),
    ('cutover = "later"', "cutover in [migration] of {path} must be one of auto, manual, not 'later'"),
    ("max_lag_events = 5", "unknown keys in [migration] of {path}: max_lag_events (the option is max_lag)"),
    ("cutover_window_s = 5", "cutover_window_s (the option is cutover_window)"),
    ('target_dsn = "mysql://u:S3cret@db2/"', "target_dsn in [migration] of {path} holds a password"),
    ("keep_old = true\ndrop_old = true", "drop_old in [migration] of {path} contradicts another key"),
])
def test_a_config_value_of_the_wrong_type_or_range_is_one_error_naming_key_and_file(tmp_path, line, message):
    path = write(tmp_path, f"[migration]\n{line}\n")
    with pytest.raises(ConfigError) as refused:
        load_migration_file(path)
    assert message.format(path=path) in str(refused.value) and "S3cret" not in str(refused.value)


def test_a_wrong_type_in_the_config_file_exits_2_with_one_line(tmp_path, capsys):
    path = write(tmp_path, '[migration]\ncopy_workers = "8"\n')
    assert main([*MIGRATE, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"stream-osc: error: copy_workers in [migration] of {path} must be a whole number of at least 1 "
                   "(without quotes), not a string\n")


def test_the_config_file_of_stream_osc_config_gives_the_migration(tmp_path, monkeypatch):
    path = write(tmp_path, '[migration]\ntable = "shop.orders"\nalter = "ADD COLUMN c INT"\nmax_lag = 7\n')
    monkeypatch.setenv("STREAM_OSC_CONFIG", str(path))
    spec = spec_from_args(argparse.Namespace(config=None, table=None, alter=None, max_lag_events=None))
    assert (spec.qualified_name, spec.max_lag_events) == ("shop.orders", 7)
    spec = spec_from_args(argparse.Namespace(config=None, table=None, alter=None, max_lag_events=9))
    assert spec.max_lag_events == 9   # the command line wins over the file


STORED = ["--partitions", "--chunk-size", "--cutover-window-schedule", "--cutover-timezone"]


@pytest.mark.parametrize("command", ["resume", "cutover"])
def test_resume_and_cutover_offer_no_option_they_would_ignore(capsys, command):
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    shown = capsys.readouterr().out
    assert not [option for option in STORED if option in shown]
    for option in STORED:
        err = usage_error(capsys, [command, "--table", "a.b", option, "4"])
        assert f"{option} is kept with the migration from `stream-osc migrate`; {command} uses the stored value" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["migrate", "--help"])
    shown = capsys.readouterr().out
    assert [option for option in STORED if option not in shown] == [], shown[:300]
