"""Endpoints of the services a migration talks to: MySQL/MariaDB, Kafka, Kafka Connect, Redis."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from urllib.parse import unquote, urlparse

from core.config_file import ConfigError, config_section

ENV_KEYS = {
    "mysql_dsn": "STREAM_OSC_MYSQL_DSN",
    "kafka_bootstrap": "STREAM_OSC_KAFKA_BOOTSTRAP",
    "connect_url": "STREAM_OSC_CONNECT_URL",
    "redis_url": "STREAM_OSC_REDIS_URL",
}


@dataclass(frozen=True)
class MySQLAddress:
    """Parsed `mysql://user:password@host:port/` DSN."""

    host: str
    port: int
    user: str
    password: str

    def __repr__(self) -> str:  # never show the password
        return f"MySQLAddress({self.user}@{self.host}:{self.port})"

    def where(self) -> str:
        """Host and port, for messages (no credentials)."""
        return f"{self.host}:{self.port}"


def parse_mysql_dsn(dsn: str) -> MySQLAddress:
    """Parse a mysql:// URL; raise ConfigError without echoing the password."""
    url = urlparse(dsn)
    if url.scheme not in ("mysql", "mariadb") or not url.hostname:
        raise ConfigError("STREAM_OSC_MYSQL_DSN must look like mysql://user:password@host:port/")
    return MySQLAddress(
        host=url.hostname,
        port=url.port or 3306,
        user=unquote(url.username or "root"),
        password=unquote(url.password or ""),
    )


@dataclass(frozen=True)
class Endpoints:
    """The four services: the caller's defaults, overridden by a config file, then by env vars."""

    mysql_dsn: str
    kafka_bootstrap: str
    connect_url: str
    redis_url: str

    @property
    def mysql(self) -> MySQLAddress:
        return parse_mysql_dsn(self.mysql_dsn)

    def __repr__(self) -> str:
        return (f"Endpoints(mysql={self.mysql.where()}, kafka={self.kafka_bootstrap}, "
                f"connect={self.connect_url}, redis={redis_where(self.redis_url)})")

    @classmethod
    def load(cls, config_file: str | Path | None = None, environ: Mapping[str, str] | None = None,
             defaults: Mapping[str, str] | None = None) -> "Endpoints":
        """`defaults` (keyed by variable name) < `[endpoints]` of a TOML config file < STREAM_OSC_* variables.

        The defaults are the caller's to give (the CLI gives the embedded stack's): this layer knows
        no addresses of its own, so a production run never falls back to a development default here.
        """
        environ = os.environ if environ is None else environ
        defaults = defaults or {}
        values = {key: defaults[var] for key, var in ENV_KEYS.items() if var in defaults}
        path = config_file or environ.get("STREAM_OSC_CONFIG")
        if path:
            section = config_section(path, "endpoints")
            unknown = set(section) - set(ENV_KEYS)
            if unknown:
                raise ConfigError(f"unknown keys in [endpoints] of {path}: {', '.join(sorted(unknown))}")
            values.update({k: str(v) for k, v in section.items()})
        for key, var in ENV_KEYS.items():
            if environ.get(var):
                values[key] = environ[var]
        missing = [f"{var} (or {key} in [endpoints])" for key, var in ENV_KEYS.items() if key not in values]
        if missing:
            raise ConfigError(f"no address for: {', '.join(missing)}")
        endpoints = cls(**values)
        parse_mysql_dsn(endpoints.mysql_dsn)  # a malformed DSN is refused here, not at first use
        return endpoints


def redis_where(url: str) -> str:
    """host:port of a redis URL, for messages (no credentials)."""
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port or 6379}"
