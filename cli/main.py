"""The `stream-osc` command line."""
from __future__ import annotations

import argparse
import logging
import sys
import traceback
from importlib import metadata
from typing import NoReturn

from core.logs import FORMATS, LEVELS, JsonFormatter, configure_logging
from cli import commands
from cli.exit_codes import EPILOG, ExitCode, exit_code_for
from stack import cli as stack_cli


def fatal_text(log_format: str, event: str, error: str, code: int, plain: str,
               exc_info: BaseException | None = None) -> str:
    """What a fatal error prints on stderr: with `--log-format json` one JSON event like every other log line
    (`msg` the event, `error` its text, `exit_code`, a traceback in `exc`), else the plain `plain` line (after
    the traceback, if any)."""
    if log_format == "json":
        record = logging.LogRecord("stream_osc.cli", logging.ERROR, __file__, 0, event, None,
                                   (type(exc_info), exc_info, exc_info.__traceback__) if exc_info else None)
        record.fields = {"error": error, "exit_code": int(code)}
        return JsonFormatter().format(record) + "\n"
    trace = "".join(traceback.format_exception(exc_info)) if exc_info else ""
    return f"{trace}{plain}\n"


def asked_log_format(argv: list[str]) -> str:
    """The `--log-format` the command line asks for, read before parsing it (a usage error is printed in it)."""
    found = "logfmt"
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--log-format" and i + 1 < len(argv) else arg.removeprefix("--log-format=")
        if value in FORMATS:
            found = value
    return found


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (and where to look), exit code 2 (refused), instead of the whole usage."""

    log_format = "logfmt"   # set by `main` from the command line before parsing it

    def error(self, message: str) -> NoReturn:
        error = f"{message} (see `{self.prog} --help`)"
        self.exit(ExitCode.REFUSED, fatal_text(Parser.log_format, "usage error", error, ExitCode.REFUSED,
                                               f"{self.prog}: error: {error}"))


def version() -> str:
    """The installed package's version (the source tree's when run without installing)."""
    try:
        return metadata.version("stream-osc")
    except metadata.PackageNotFoundError:
        return "unknown"


def add_global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """Options every command takes, before or after the subcommand's name.

    On subcommands their default is "not given", so a value given before the subcommand is kept.
    """
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, default=default("WARNING"),
                        help="level of the structured logs on stderr (default WARNING)")
    parser.add_argument("--log-format", choices=FORMATS, default=default("logfmt"),
                        help="logfmt (default) or json: one JSON object per line")


def _every_subparser(parser: argparse.ArgumentParser):
    """Each subcommand's parser, nested ones (`stack up`) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield child
                yield from _every_subparser(child)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="stream-osc", description="Online schema change on change data capture.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"stream-osc {version()}")
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    commands.register(sub)
    stack_cli.register(sub)
    for child in _every_subparser(parser):
        add_global_options(child, top=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    Parser.log_format = asked_log_format(argv)
    parser = build_parser()
    args = parser.parse_args(argv)   # a usage error exits 2 with one line, as REFUSED
    configure_logging(args.log_level, args.log_format)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        fatal = ("interrupted", "interrupted", ExitCode.INTERRUPTED, "stream-osc: interrupted", None)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line and a documented code
        if getattr(exc, "user_facing", False):
            fatal = ("error", str(exc), exit_code_for(exc), f"stream-osc: error: {exc}", None)
        else:
            error = f"{type(exc).__name__}: {exc}"
            fatal = ("internal error", error, ExitCode.INTERNAL, f"stream-osc: internal error: {error}", exc)
    sys.stderr.write(fatal_text(args.log_format, *fatal))
    sys.stderr.flush()
    return fatal[2]


if __name__ == "__main__":
    sys.exit(main())
