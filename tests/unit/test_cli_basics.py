"""The command line's basics: --version, global options after the subcommand, one-line usage errors, and
exit codes that are distinct, documented in `--help` and the README, and chosen by what stopped the run."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from cli.exit_codes import EPILOG, ExitCode, exit_code_for
from cli.main import build_parser, main
from core.endpoints import ConfigError
from throttle.load import CriticalLoad
from core.source_check import SourceChanged
from core.target_identity import TargetMismatch
from core.swap_preconditions import UnsafeServerSetting
from migration.checks import PreflightError
from migration.coordination import MigrationStopped

README = Path(__file__).resolve().parents[2] / "README.md"


def test_version_prints_the_package_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert re.fullmatch(r"stream-osc \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


@pytest.mark.parametrize("argv", [
    ["--log-level", "info", "--log-format", "json", "status", "--table", "a.b"],
    ["status", "--table", "a.b", "--log-level", "info", "--log-format", "json"],
    ["stack", "status", "--log-level", "INFO", "--log-format", "json"],
])
def test_global_options_are_accepted_before_or_after_the_subcommand(argv):
    args = build_parser().parse_args(argv)
    assert (args.log_level, args.log_format) == ("INFO", "json")


def test_global_option_defaults_hold_when_not_given():
    args = build_parser().parse_args(["status", "--table", "a.b"])
    assert (args.log_level, args.log_format) == ("WARNING", "logfmt")


@pytest.mark.parametrize("argv, message", [
    (["status", "--table", "a.b", "--log-level", "loud"], "argument --log-level: invalid choice: 'LOUD'"),
    (["--log-format", "xml", "status", "--table", "a.b"], "argument --log-format: invalid choice: 'xml'"),
    (["migrate", "--metrics-port", "70000"], "'70000' is not a TCP port"),
    (["status", "--table", "a.b", "--watch", "--interval", "0"], "'0' is not a positive number of seconds"),
])
def test_a_bad_option_is_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == ExitCode.REFUSED == 2
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err


def readme_exit_codes() -> dict[int, str]:
    """{code: meaning} from the README's exit codes table."""
    return {int(code): text for code, text in re.findall(r"^\| `(\d+)` \| (.+) \|$", README.read_text(), re.M)}


def epilog_exit_codes() -> dict[int, str]:
    """{code: meaning} from `stream-osc --help`'s exit codes (continuation lines joined)."""
    codes: dict[int, str] = {}
    for line in EPILOG.splitlines()[1:]:
        entry = re.match(r"^  (\d+) +(.*)$", line)
        if entry:
            last = int(entry.group(1))
            codes[last] = entry.group(2)
        else:
            codes[last] += " " + line.strip()
    return codes


def words(text: str) -> str:
    return re.sub(r"[-_`\s]+", " ", text.lower())


def test_exit_codes_are_distinct():
    members = ExitCode.__members__.values()   # aliases included: iterating an enum skips them
    assert len({int(code) for code in members}) == len(members)
    # the documented tables list exactly the codes there are, each under the meaning its name says
    for documented in (readme_exit_codes(), epilog_exit_codes()):
        assert sorted(documented) == sorted(int(code) for code in members)
        assert {code.name: code.value for code in members if words(code.name) not in words(documented[code])} == {}


def test_every_exit_code_is_documented_in_help_and_readme(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    readme = README.read_text()
    for code in ExitCode:
        assert re.search(rf"^  {int(code)} ", EPILOG, re.M), code
        assert re.search(rf"^  {int(code)} ", help_text, re.M), code
        assert re.search(rf"^\| `{int(code)}` \|", readme, re.M), f"README lacks exit code {int(code)}"


@pytest.mark.parametrize("error, code", [
    (PreflightError("no such table"), ExitCode.REFUSED),
    (ConfigError("--table must be DB.TABLE"), ExitCode.REFUSED),
    (MigrationStopped("connector failed"), ExitCode.STOPPED),
    (MigrationStopped("migration 3 was aborted", resumable=False), ExitCode.FAILED),
    (CriticalLoad("critical load reached"), ExitCode.CRITICAL_LOAD),
    (SourceChanged("table altered during the migration"), ExitCode.FAILED),
    (UnsafeServerSetting("max_write_lock_count is 1"), ExitCode.STOPPED),
    (TargetMismatch("the target server at db3:3306 is not the one this migration writes to"), ExitCode.WRONG_TARGET),
])
def test_exit_code_follows_what_stopped_the_run(error, code):
    assert exit_code_for(error) == code


def test_an_unexpected_error_is_internal_with_its_traceback(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr("cli.commands.cmd_list", broken)
    assert main(["list"]) == ExitCode.INTERNAL == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == "stream-osc: internal error: RuntimeError: a bug"


def test_a_user_facing_error_is_one_line_with_its_code(monkeypatch, capsys):
    def stopped(args):
        raise CriticalLoad("critical load reached (Threads_running=120 >= 100)")
    monkeypatch.setattr("cli.commands.cmd_list", stopped)
    assert main(["list"]) == ExitCode.CRITICAL_LOAD
    assert capsys.readouterr().err == "stream-osc: error: critical load reached (Threads_running=120 >= 100)\n"


def json_event(err: str) -> dict:
    """The one line on stderr, read as a JSON object (fails when it is not exactly one JSON line)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return json.loads(lines[0])


@pytest.mark.parametrize("where", ["before", "after"])
def test_with_json_logs_a_fatal_error_is_one_json_event(monkeypatch, capsys, where):
    def stopped(args):
        raise CriticalLoad("critical load reached (Threads_running=120 >= 100)")
    monkeypatch.setattr("cli.commands.cmd_list", stopped)
    argv = ["--log-format", "json", "list"] if where == "before" else ["list", "--log-format", "json"]
    assert main(argv) == ExitCode.CRITICAL_LOAD
    event = json_event(capsys.readouterr().err)
    assert (event["level"], event["logger"], event["msg"]) == ("error", "stream_osc.cli", "error")
    assert event["error"] == "critical load reached (Threads_running=120 >= 100)"
    assert event["exit_code"] == ExitCode.CRITICAL_LOAD and event["ts"].endswith("Z")


def test_with_json_logs_an_internal_error_is_one_json_event_with_its_traceback(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr("cli.commands.cmd_list", broken)
    assert main(["--log-format", "json", "list"]) == ExitCode.INTERNAL
    event = json_event(capsys.readouterr().err)
    assert (event["msg"], event["error"], event["exit_code"]) == ("internal error", "RuntimeError: a bug", 1)
    assert "Traceback" in event["exc"] and "a bug" in event["exc"]


def test_with_json_logs_an_interruption_and_a_usage_error_are_json_events(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr("cli.commands.cmd_list", interrupted)
    assert main(["list", "--log-format=json"]) == ExitCode.INTERRUPTED
    assert json_event(capsys.readouterr().err)["msg"] == "interrupted"
    with pytest.raises(SystemExit) as stop:
        main(["--log-format", "json", "list", "--no-such-option"])
    assert stop.value.code == ExitCode.REFUSED
    event = json_event(capsys.readouterr().err)
    assert event["msg"] == "usage error" and "--no-such-option" in event["error"]
    assert event["exit_code"] == ExitCode.REFUSED


def test_with_logfmt_a_usage_error_stays_one_plain_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["list", "--no-such-option"])
    assert stop.value.code == ExitCode.REFUSED
    err = capsys.readouterr().err
    assert err.startswith("stream-osc: error: unrecognized arguments: --no-such-option") and err.count("\n") == 1


@pytest.mark.parametrize("options, message", [
    (["--cloudwatch-namespace", "AWS/RDS"], "not starting with AWS/"),
    (["--metrics-address", "0.0.0.0"], "--metrics-address needs --metrics-port"),
])
def test_bad_observability_options_are_refused_before_any_service_is_asked(monkeypatch, capsys, options, message):
    def no_service(*args, **kwargs):
        raise AssertionError("a service was asked")
    monkeypatch.setattr("cli.commands.Runner", no_service)
    for var, value in {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
                       "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}.items():
        monkeypatch.setenv(var, value)
    code = main(["migrate", "--table", "shop.orders", "--alter", "ADD COLUMN note INT NULL", *options])
    err = capsys.readouterr().err
    assert code == ExitCode.REFUSED and len(err.strip().splitlines()) == 1 and message in err, err


def _spec_dests(parser) -> set[str]:
    return {action.dest for action in parser._actions} - {"help", "table", "alter", "config", "stack", "quiet", "func",
                                                           "metrics_port", "metrics_address", "cloudwatch_namespace",
                                                           "log_level", "log_format"}


def test_every_spec_option_of_migrate_is_a_spec_field_and_reaches_the_spec():
    from cli.command_spec import SPEC_FIELDS, given_options, spec_from_args
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert _spec_dests(subparsers.choices["migrate"]) <= SPEC_FIELDS
    assert _spec_dests(subparsers.choices["resume"]) <= SPEC_FIELDS
    args = build_parser().parse_args(["migrate", "--table", "shop.orders", "--alter", "ADD COLUMN c INT",
                                      "--cutover", "manual", "--drop-old", "--dry-run", "--partitions", "3"])
    spec = spec_from_args(args)
    assert (spec.cutover, spec.keep_old, spec.dry_run, spec.partitions) == ("manual", False, True, 3)
    assert {"cutover", "keep_old", "dry_run", "partitions"} <= given_options(args)
    assert "chunk_size" not in given_options(args)


@pytest.mark.parametrize("command", ["migrate", "resume", "cutover", "worker", "status", "pause", "abort", "set",
                                     "list"])
def test_every_command_on_a_migration_takes_the_store_options(command):
    argv = {"set": ["set", "--table", "a.b", "x=1"], "list": ["list"]}.get(command, [command, "--table", "a.b"])
    args = build_parser().parse_args([*argv, "--config", "c.toml", "--metadata-schema", "osc_meta"])
    assert (args.config, args.metadata_schema) == ("c.toml", "osc_meta")
