"""The `stream-osc` command line."""
from __future__ import annotations

import argparse
import sys

from core.logs import configure_logging
from cli import commands
from stack import cli as stack_cli


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stream-osc", description="Online schema change on change data capture.")
    parser.add_argument("--log-level", default="WARNING", help="log level for structured logs on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    commands.register(sub)
    stack_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("stream-osc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line
        if getattr(exc, "user_facing", False) or isinstance(exc, UserError):
            print(f"stream-osc: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
