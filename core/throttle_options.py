"""The grammar of the throttle's options, read by the spec: what `--max-load`, `--critical-load`,
`--cloudwatch-max-load` and `--throttle-replicas` say. The throttling itself is in throttle/."""
from __future__ import annotations

import re

from core.endpoints import ConfigError

THRESHOLD = re.compile(r"^([A-Za-z][A-Za-z0-9_]{0,63})=(\d+)$")
CLOUDWATCH_THRESHOLD = re.compile(r"^([A-Za-z][A-Za-z0-9]{0,254})=(\d+(?:\.\d+)?)$")
CLOUDWATCH_OPTION = "--cloudwatch-max-load"


def parse_thresholds(text: str, option: str) -> dict[str, int]:
    """`Threads_running=25,Innodb_row_lock_current_waits=10` -> {name: limit}; ConfigError if malformed."""
    return {name: int(limit) for name, limit in _pairs(text, option, THRESHOLD,
                                                       "STATUS_VARIABLE=NUMBER (e.g. Threads_running=25)")}


def parse_cloudwatch_thresholds(text: str) -> dict[str, float]:
    """`CPUUtilization=80,AuroraReplicaLagMaximum=1000` -> {AWS/RDS metric: limit}; ConfigError if malformed."""
    return {name: float(limit) for name, limit in _pairs(text, CLOUDWATCH_OPTION, CLOUDWATCH_THRESHOLD,
                                                         "METRIC=NUMBER (e.g. CPUUtilization=80)")}


def _pairs(text: str, option: str, pattern: re.Pattern[str], form: str) -> list[tuple[str, str]]:
    """The NAME=LIMIT items of a comma-separated option value, each matched by `pattern`."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = pattern.match(item)
        if match is None:
            raise ConfigError(f"{option}: {item!r} is not {form}")
        pairs.append((match.group(1), match.group(2)))
    return pairs


def parse_replicas(text: str) -> list[tuple[str, int]]:
    """`replica-1:3306,10.0.0.7` -> [(host, port)]; ConfigError if malformed."""
    replicas = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "3306")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"--throttle-replicas: {item!r} is not HOST or HOST:PORT")
        replicas.append((host, int(port)))
    return replicas
