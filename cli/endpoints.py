"""Which services a command talks to: the ones configured, or the embedded stack's when asked for.

Configured means a `--config` file's `[endpoints]` (or STREAM_OSC_CONFIG's) and the STREAM_OSC_* variables;
an address none of them gives is one error naming it, never a default. The embedded stack's addresses are
used only when asked for: `--stack` (this module's `stack_endpoints`), the variables `stream-osc stack env`
prints, or the demo, which runs on the stack it starts and nowhere else.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from core.config_file import ConfigError, config_section
from core.endpoints import ENV_KEYS, TARGET_KEYS, Endpoints, MissingEndpoint
from stack.config import StackConfig

# The variables that name a server (the four services and a move's target): `--stack` and the demo refuse one
# that names another server than the embedded stack's.
ADDRESS_KEYS = {**ENV_KEYS, "target_dsn": TARGET_KEYS["target_dsn"]}

STACK_HINT = 'for the embedded stack, run `eval "$(stream-osc stack env)"` first or add --stack'


def add_stack_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", action="store_true", default=None,
                        help="use the embedded local stack's endpoints (`stream-osc stack up`); refused when "
                             "STREAM_OSC_* variables or the config file name other servers")


def command_endpoints(args: argparse.Namespace) -> Endpoints:
    """The endpoints of a command: the embedded stack's with --stack, else the configured ones."""
    config_file = getattr(args, "config", None)
    if getattr(args, "stack", None):
        return stack_endpoints(config_file, who="--stack")
    return configured_endpoints(config_file)


def configured_endpoints(config_file: str | Path | None = None,
                         environ: Mapping[str, str] | None = None) -> Endpoints:
    """The config file's and the STREAM_OSC_* variables' endpoints, with no default for a missing one.

    When the Connect worker named is this checkout's embedded stack's (`eval "$(stream-osc stack env)"`), its
    secrets folder is where the connector's password goes, unless another way is configured (docs/secrets.md):
    the same rule as `StackConfig.endpoints`, without its address defaults.
    """
    try:
        loaded = Endpoints.load(config_file, environ=environ)
    except MissingEndpoint as exc:
        raise MissingEndpoint(f"{exc}; {STACK_HINT}") from None
    stack = StackConfig()
    if (loaded.connect_url == stack.env()["STREAM_OSC_CONNECT_URL"] and not loaded.connector_password
            and not loaded.connector_secrets_dir):
        loaded = dataclasses.replace(loaded, connector_secrets_dir=str(stack.connect_secrets_dir))
    return loaded


def elsewhere(config_file: str | Path | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The configured addresses that name another server than the embedded stack's: `VAR` for a variable,
    `key in [endpoints] of FILE` for the config file's (values never shown: a DSN holds a password)."""
    environ = os.environ if environ is None else environ
    ours = StackConfig().env()
    found = [var for var in ADDRESS_KEYS.values()
             if environ.get(var, "").strip() and environ[var] != ours.get(var)]
    path = config_file or environ.get("STREAM_OSC_CONFIG")
    if path:
        section = config_section(path, "endpoints")
        found += [f"{key} in [endpoints] of {path}" for key, var in ADDRESS_KEYS.items()
                  if str(section.get(key, "")).strip() and str(section[key]) != ours.get(var)]
    return found


def refuse_other_servers(who: str, config_file: str | Path | None = None,
                         environ: Mapping[str, str] | None = None, otherwise: str = "") -> None:
    """ConfigError when the environment or the config file names another server than the embedded stack's."""
    others = elsewhere(config_file, environ)
    if others:
        variables = [name for name in others if name.startswith("STREAM_OSC_")]
        files = [name for name in others if not name.startswith("STREAM_OSC_")]
        how = " and ".join(([f"`unset {' '.join(variables)}`"] if variables else [])
                           + (["take the file away"] if files else []))
        raise ConfigError(f"{who} runs on the embedded stack only, but {', '.join(others)} "
                          f"name{'s' if len(others) == 1 else ''} another server: {how}{otherwise}")


def stack_endpoints(config_file: str | Path | None = None, who: str = "--stack") -> Endpoints:
    """The embedded stack's endpoints, for a caller that means them; refused when the environment or the config
    file names another server (an address is never mixed from two places). The variables that are not
    addresses (Kafka client properties, connector secrets, …) still apply."""
    refuse_other_servers(who, config_file, otherwise=f", or leave out {who}")
    return StackConfig().endpoints(config_file)
