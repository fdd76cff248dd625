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
    """One `[name]` table of the config file at `path` ({} when it has none); ConfigError when `name` is there
    but is no table (`migration = 5`)."""
    section = _read(str(path)).get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{name} in config file {path} is a key with a value; it must be a [{name}] section")
    return dict(section)


@cache
def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except UnicodeDecodeError as exc:   # TOML is UTF-8; the bytes are not shown (the file may hold a secret)
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text (byte {exc.start})") from None
