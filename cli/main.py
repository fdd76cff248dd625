"""The `stream-osc` command line."""
from __future__ import annotations

import argparse
import sys
import traceback
from importlib import metadata
from typing import NoReturn

from core.logs import FORMATS, LEVELS, configure_logging
from cli import commands
from cli.exit_codes import EPILOG, ExitCode, exit_code_for
from stack import cli as stack_cli


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (and where to look), exit code 2 (refused), instead of the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.REFUSED, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


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
    parser = build_parser()
    args = parser.parse_args(argv)   # a usage error exits 2 with one line, as REFUSED
    configure_logging(args.log_level, args.log_format)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("stream-osc: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line and a documented code
        if getattr(exc, "user_facing", False):
            print(f"stream-osc: error: {exc}", file=sys.stderr)
            return exit_code_for(exc)
        traceback.print_exc()
        print(f"stream-osc: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
