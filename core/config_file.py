"""The TOML config file (`--config` or STREAM_OSC_CONFIG), read once per process.

Its `[endpoints]` section feeds core/endpoints.py and its `[migration]` section core/spec.py; both
take their section from here, so the file is read (and its errors reported) once.
"""
from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any



class ConfigError(ValueError):
    """A setting is missing or malformed."""

    user_facing = True


def config_section(path: str | Path, name: str) -> dict[str, Any]:
    """One `[name]` table of the config file at `path` ({} when it has none)."""
    return dict(_read(str(path)).get(name, {}))


@cache
def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
