"""`stream-osc stack install|up|down|status|env`: the embedded local stack."""
from __future__ import annotations

import argparse
import time

from stack import services
from stack.config import StackConfig
from stack.install import install


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `stack` command and its sub-commands."""
    stack = subparsers.add_parser("stack", help="run the embedded local stack (MariaDB, Redis, Kafka, Connect)",
                                  description="The embedded local stack: plain processes, data and logs in .run/.")
    sub = stack.add_subparsers(dest="stack_command", required=True)

    p = sub.add_parser("install", help="fetch the Kafka and Debezium jars with Maven (idempotent)")
    p.add_argument("--force", action="store_true", help="fetch again even if up to date")
    p.set_defaults(func=cmd_install)

    service_help = (f"services to act on (default: all of {', '.join(s.name for s in services.SERVICES)}; "
                    f"known: {', '.join(services.NAMES)})")
    p = sub.add_parser("up", help="start what is not running and wait until every service answers")
    p.add_argument("services", nargs="*", metavar="SERVICE", help=service_help)
    p.add_argument("--target-server", action="store_true",
                   help=f"also start a second MariaDB server ({services.TARGET.name}, user osc_target): the target of "
                        "migrations to another server (`stack env` then prints STREAM_OSC_TARGET_DSN)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop the services (reverse order), leaving no process behind")
    p.add_argument("services", nargs="*", metavar="SERVICE",
                   help=f"services to stop (default: every one that runs, of {', '.join(services.NAMES)})")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("status", help="one line per service: pid, ports, memory, or stopped")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("env", help="print `export STREAM_OSC_...` lines for this stack (eval them)")
    p.set_defaults(func=cmd_env)


def cmd_install(args: argparse.Namespace) -> int:
    for line in install(StackConfig(), force=args.force):
        print(line)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    config = StackConfig()
    started = time.monotonic()

    def report(result: services.StartResult) -> None:
        if result.started:
            print(f"{result.name:<8} started   pid {result.pid:<7} ready in {result.seconds:.1f} s", flush=True)
        else:
            print(f"{result.name:<8} running   pid {result.pid:<7} (already up)", flush=True)

    services.up(config, args.services or None, on_ready=report, target_server=args.target_server)
    print(f"stack up in {time.monotonic() - started:.1f} s; run dir {config.run_dir}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    config = StackConfig()

    def report(name: str, pid: int | None) -> None:
        if pid is None and name == services.TARGET.name and not args.services:
            return   # only started on request: its absence is not news
        print(f"{name:<8} {'stopped   pid ' + str(pid) if pid else 'was not running'}", flush=True)

    services.stop_all(config, args.services or None, on_stopped=report)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    for row in services.status(StackConfig()):
        print(format_status(row))
    return 0


def format_status(row: services.ServiceStatus) -> str:
    ports = ",".join(str(port) for port, _label in row.ports)
    if not row.running:
        return f"{row.name:<8} stopped   port {ports}"
    state = {True: "ready", False: "NOT ANSWERING", None: ""}[row.ready]
    rss = f"rss {row.rss / 2**20:.0f} MiB" if row.rss else "rss ?"
    return f"{row.name:<8} running   pid {row.pid:<7} port {ports:<11} {rss:<13} {state}  log {row.log}"


def cmd_env(args: argparse.Namespace) -> int:
    for key, value in StackConfig().env().items():
        print(f"export {key}={sh_quote(value)}")
    return 0


def sh_quote(value: str) -> str:
    """Single-quote for POSIX shells, always (so the output looks the same for every value)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"
