"""Endpoints of the services a migration talks to: MySQL/MariaDB, Kafka, Kafka Connect, Redis, and the target server
of a migration to another server."""
from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlparse

from core.config_file import ConfigError, config_section
from core.kafka_properties import describe, read_kafka_properties
from core.secrets_manager import secret_string

ENV_KEYS = {
    "mysql_dsn": "STREAM_OSC_MYSQL_DSN",
    "kafka_bootstrap": "STREAM_OSC_KAFKA_BOOTSTRAP",
    "connect_url": "STREAM_OSC_CONNECT_URL",
    "redis_url": "STREAM_OSC_REDIS_URL",
}

# How the Kafka Connect worker finds the database password, so that the connector config never holds it
# (docs/secrets.md): a config provider reference, or a folder the worker reads with its FileConfigProvider.
CONNECTOR_SECRET_KEYS = {
    "connector_password": "STREAM_OSC_CONNECTOR_PASSWORD",
    "connector_secrets_dir": "STREAM_OSC_CONNECTOR_SECRETS_DIR",
}

# Kafka client properties (SASL/TLS) for the tool's clients, and how the connector's clients find the SASL
# login (docs/connectivity.md): a properties file, and a config provider reference for the JAAS line.
KAFKA_CLIENT_KEYS = {
    "kafka_properties": "STREAM_OSC_KAFKA_PROPERTIES",
    "connector_kafka_jaas": "STREAM_OSC_CONNECTOR_KAFKA_JAAS",
}
# How the connector reaches the database when its view differs from the tool's (a worker in a container cannot
# reach the tool's 127.0.0.1), and the Java truststore its TLS checks the server with (docs/connectivity.md).
CONNECTOR_DATABASE_KEYS = {
    "connector_database_host": "STREAM_OSC_CONNECTOR_DATABASE_HOST",
    "connector_ssl_truststore": "STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE",
    "connector_ssl_truststore_password": "STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE_PASSWORD",
}
# Basic auth and TLS of the Kafka Connect REST API (the password from the environment or a file, never the URL).
CONNECT_AUTH_KEYS = {
    "connect_user": "STREAM_OSC_CONNECT_USER",
    "connect_password": "STREAM_OSC_CONNECT_PASSWORD",
    "connect_password_file": "STREAM_OSC_CONNECT_PASSWORD_FILE",
    "connect_ca": "STREAM_OSC_CONNECT_CA",
}
# The target server of a migration to another server and where its login comes from (`Endpoints.target`,
# docs/secrets.md): a whole DSN, a password for a DSN given without one, an AWS Secrets Manager secret.
TARGET_KEYS = {
    "target_dsn": "STREAM_OSC_TARGET_DSN",
    "target_password": "STREAM_OSC_TARGET_PASSWORD",
    "target_secret_id": "STREAM_OSC_TARGET_SECRET_ID",
    "target_secret_region": "STREAM_OSC_TARGET_SECRET_REGION",
}
OPTIONAL_KEYS = {**CONNECTOR_SECRET_KEYS, **KAFKA_CLIENT_KEYS, **CONNECTOR_DATABASE_KEYS, **CONNECT_AUTH_KEYS,
                 **TARGET_KEYS}

# ${provider:path:key} or ${provider:key}, as Kafka's ConfigTransformer reads it
PROVIDER_REFERENCE = re.compile(r"\$\{[A-Za-z0-9_.-]+:[^}]+\}")

DSN_SHAPE = "mysql://user:password@host:port/"

# TLS of the tool's database sessions, as MySQL's clients name the modes (docs/connectivity.md)
# (preferred, the default: TLS when the server offers it, its certificate unchecked, as PyMySQL does)
SSL_MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")
DSN_OPTIONS = ("ssl-mode", "ssl-ca", "ssl-cert", "ssl-key")


class MissingEndpoint(ConfigError):
    """An endpoint no layer gives (unset, or set to an empty string): never filled in by a default here."""


@dataclass(frozen=True)
class MySQLAddress:
    """Parsed `mysql://user:password@host:port/?ssl-mode=…&ssl-ca=…&ssl-cert=…&ssl-key=…` DSN."""

    host: str
    port: int
    user: str
    password: str
    ssl_mode: str = "preferred"
    ssl_ca: str = ""       # PEM file of the CA that signed the server's certificate (else the system's CAs)
    ssl_cert: str = ""     # PEM client certificate and key, for servers that require one (REQUIRE X509)
    ssl_key: str = ""

    def __repr__(self) -> str:  # never show the password
        return f"MySQLAddress({self.user}@{self.host}:{self.port})"

    def where(self) -> str:
        """Host and port, for messages (no credentials)."""
        return f"{self.host}:{self.port}"


# Where a DSN's options begin: the first '?' that starts a known option.
OPTIONS_START = re.compile(r"\?(?:" + "|".join(map(re.escape, DSN_OPTIONS)) + ")=")


@dataclass(frozen=True)
class DsnParts:
    """What a DSN names, before defaults: a user, password or port it leaves out is None (the target server's
    login may come from elsewhere, `Endpoints.target`)."""

    host: str
    port: int | None
    user: str | None
    password: str | None
    tls: Mapping[str, str]

    def __repr__(self) -> str:  # never show the password
        return f"DsnParts({self.user}@{self.host}:{self.port})"


def parse_mysql_dsn(dsn: str, name: str = "STREAM_OSC_MYSQL_DSN") -> MySQLAddress:
    """Parse a mysql:// URL (user root and port 3306 unless named); errors name `name` and never echo the
    password (nor anything before the '@')."""
    parts = dsn_parts(dsn, name)
    return MySQLAddress(host=parts.host, port=parts.port or 3306, user=parts.user or "root",
                        password=parts.password or "", **parts.tls)


def dsn_parts(dsn: str, name: str = "STREAM_OSC_MYSQL_DSN") -> DsnParts:
    """Split a mysql:// URL into what it names; raise ConfigError (naming `name`) without echoing the password.

    The credentials are everything between '//' and the last '@' before the options (`?ssl-…=`), so a
    password may hold '?', '/', '#' or '@' as they are, and an option's file path may hold '@';
    percent-escapes in the password are decoded (a literal '%' is written %25).
    """
    scheme, sep, rest = dsn.partition("://")
    if not sep or scheme.lower() not in ("mysql", "mariadb"):
        raise ConfigError(f"{name} must look like {DSN_SHAPE} (scheme mysql:// or mariadb://)")
    options = OPTIONS_START.search(rest)
    before_options = rest[:options.start()] if options else rest
    credentials, at, location = before_options.rpartition("@")
    location += rest[len(before_options):]
    hostport = re.split(r"[/?#]", location, maxsplit=1)[0]
    host, colon, port_text = hostport.rpartition(":")
    if not colon or (host.startswith("[") and not host.endswith("]")):   # no port (an IPv6 literal has colons)
        host, port_text = hostport, ""
    host = host.strip("[]")
    if not host:
        raise ConfigError(f"{name} has no host; it must look like {DSN_SHAPE}")
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ConfigError(f"{name}: the port is not a number from 1 to 65535; it must look like "
                          f"{DSN_SHAPE} (nothing of the DSN is shown: a misplaced part may be the password)")
    user, _, password = credentials.partition(":") if at else ("", "", "")
    return DsnParts(host=host, port=int(port_text) if port_text else None, user=unquote(user) or None,
                    password=unquote(password) or None, tls=tls_options(location, name))


def tls_options(location: str, name: str = "STREAM_OSC_MYSQL_DSN") -> dict[str, str]:
    """The TLS options of the DSN's query (after the '@', so never part of the password)."""
    _, question, query_text = location.partition("?")
    given = {key: values[-1] for key, values in parse_qs(query_text.partition("#")[0], keep_blank_values=True).items()}
    unknown = sorted(set(given) - set(DSN_OPTIONS))
    if unknown:
        raise ConfigError(f"{name}: unknown option {', '.join(unknown)}; known: {', '.join(DSN_OPTIONS)}")
    mode = given.get("ssl-mode") or ("verify-identity" if given.get("ssl-ca") else "preferred")
    if mode not in SSL_MODES:
        raise ConfigError(f"{name}: ssl-mode must be one of {', '.join(SSL_MODES)}")
    if bool(given.get("ssl-cert")) != bool(given.get("ssl-key")):
        raise ConfigError(f"{name}: ssl-cert and ssl-key go together")
    if mode in ("disabled", "preferred") and any(given.get(k) for k in ("ssl-ca", "ssl-cert", "ssl-key")):
        raise ConfigError(f"{name}: ssl-mode={mode} with TLS files given (they need required, "
                          "verify-ca or verify-identity)")
    for key in ("ssl-ca", "ssl-cert", "ssl-key"):
        if given.get(key) and not os.access(given[key], os.R_OK):
            raise ConfigError(f"{name}: {key} {given[key]} is not a readable file")
    return {"ssl_mode": mode, "ssl_ca": given.get("ssl-ca", ""), "ssl_cert": given.get("ssl-cert", ""),
            "ssl_key": given.get("ssl-key", "")}


@dataclass(frozen=True)
class KafkaAddress:
    """Bootstrap servers and the client properties (SASL/TLS) every Kafka client of the tool starts from."""

    bootstrap: str
    properties: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # never show a secret
        return f"KafkaAddress({self.bootstrap}; {describe(dict(self.properties))})"

    def __str__(self) -> str:
        return self.bootstrap

    def settings(self) -> dict[str, str]:
        return dict(self.properties)


@dataclass(frozen=True)
class ConnectAccess:
    """How the tool authenticates to Kafka Connect's REST API and verifies its certificate."""

    url: str
    user: str = ""
    password: str = ""
    ca: str = ""    # PEM file of the CA of an https:// URL (else the system's CAs)

    def __repr__(self) -> str:  # never show the password
        return f"ConnectAccess({self.url}, user={self.user or None}, ca={self.ca or None})"


@dataclass(frozen=True)
class Endpoints:
    """The four services: the caller's defaults, overridden by a config file, then by env vars."""

    mysql_dsn: str
    kafka_bootstrap: str
    connect_url: str
    redis_url: str
    connector_password: str = ""      # a config provider reference, e.g. ${file:/etc/connect/db.properties:password}
    connector_secrets_dir: str = ""   # a folder the Connect worker reads; the tool writes the password there
    kafka_properties: str = ""        # a Kafka client properties file (SASL/TLS; core/kafka_properties.py)
    connector_kafka_jaas: str = ""    # a config provider reference resolving to the connector clients' JAAS line
    connector_database_host: str = ""  # host[:port] of the database as the Connect workers reach it
    connector_ssl_truststore: str = ""  # JKS/PKCS12 file on the workers holding the database's CA
    connector_ssl_truststore_password: str = ""   # a config provider reference to its password
    connect_user: str = ""            # Kafka Connect REST basic auth
    connect_password: str = ""
    connect_password_file: str = ""   # a file whose first line is the password
    connect_ca: str = ""              # CA (PEM) of an https:// Connect URL
    target_dsn: str = ""              # the target server of a migration to another server (may hold its password)
    target_password: str = ""         # its password, for a DSN that has none (--target-dsn never has one)
    target_secret_id: str = ""        # an AWS Secrets Manager secret (id or ARN) holding its login
    target_secret_region: str = ""    # the secret's region (else boto3's own resolution)

    @property
    def mysql(self) -> MySQLAddress:
        return parse_mysql_dsn(self.mysql_dsn)

    @functools.cached_property
    def connect(self) -> ConnectAccess:
        password = self.connect_password
        if self.connect_password_file:
            try:
                password = Path(self.connect_password_file).read_text(encoding="utf-8").partition("\n")[0]
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read STREAM_OSC_CONNECT_PASSWORD_FILE {self.connect_password_file}: "
                                  f"{getattr(exc, 'strerror', None) or type(exc).__name__}") from None
        return ConnectAccess(self.connect_url, self.connect_user, password, self.connect_ca)

    @property
    def connector_database(self) -> tuple[str, int]:
        """(host, port) of the database as the Connect workers reach it: the tool's unless set apart."""
        mysql = self.mysql
        if not self.connector_database_host:
            return mysql.host, mysql.port
        host, colon, port = self.connector_database_host.rpartition(":")
        if not colon or "]" in port:   # no port given (or an IPv6 literal without one)
            return self.connector_database_host.strip("[]"), mysql.port
        return host.strip("[]"), int(port)

    @functools.cached_property
    def kafka(self) -> KafkaAddress:
        properties = read_kafka_properties(self.kafka_properties) if self.kafka_properties else {}
        return KafkaAddress(self.kafka_bootstrap, tuple(sorted(properties.items())))

    def target(self, dsn: str = "") -> MySQLAddress:
        """The target server of a migration to another server.

        `dsn` is what the user gave `migrate --target-dsn` (refused if it holds a password); when empty,
        `target_dsn` is used. Its host and port come from that DSN, else from the secret (host and port
        together). The password comes from `target_dsn` itself, else `target_password`, else the secret;
        the user from the DSN, else the secret, else root. The secret is read only when the DSN and
        `target_password` leave something open.
        """
        if dsn:
            refuse_password_on_command_line(dsn)
        given, name = (dsn, "--target-dsn") if dsn else (self.target_dsn, "STREAM_OSC_TARGET_DSN (target_dsn)")
        if not given and not self.target_secret_id:
            raise ConfigError("no target server: give --target-dsn mysql://user@host:port/, or set "
                              "STREAM_OSC_TARGET_DSN or STREAM_OSC_TARGET_SECRET_ID (docs/secrets.md)")
        parts = dsn_parts(given, name) if given else DsnParts("", None, None, None, tls_options(""))
        password = parts.password or self.target_password
        secret = None
        if self.target_secret_id and not (password and parts.user and parts.host):
            secret = secret_login(secret_string(self.target_secret_id, self.target_secret_region),
                                  self.target_secret_id)
        if not parts.host and not (secret and secret.host):
            raise ConfigError(f"the target server has no host: the Secrets Manager secret {self.target_secret_id} "
                              "names none; give --target-dsn mysql://user@host:port/ or STREAM_OSC_TARGET_DSN")
        address = parts if parts.host else secret
        user = parts.user or (secret.user if secret else None) or "root"
        password = password or (secret.password if secret else None)
        if not password:
            raise ConfigError(f"no password for the target server {user}@{address.host}:{address.port or 3306}: "
                              "set STREAM_OSC_TARGET_PASSWORD, STREAM_OSC_TARGET_SECRET_ID (a Secrets Manager "
                              "secret), or the whole DSN in STREAM_OSC_TARGET_DSN")
        return MySQLAddress(host=address.host, port=address.port or 3306, user=user, password=password,
                            **address.tls)

    def __repr__(self) -> str:
        target = ""
        if self.target_dsn:
            parts = dsn_parts(self.target_dsn, "STREAM_OSC_TARGET_DSN (target_dsn)")
            target = f", target={parts.host}:{parts.port or 3306}"
        elif self.target_secret_id:
            target = f", target=secret {self.target_secret_id}"
        return (f"Endpoints(mysql={self.mysql.where()}, kafka={self.kafka_bootstrap}, "
                f"connect={self.connect_url}, redis={redis_where(self.redis_url)}{target})")

    @classmethod
    def load(cls, config_file: str | Path | None = None, environ: Mapping[str, str] | None = None,
             defaults: Mapping[str, str] | None = None) -> "Endpoints":
        """`defaults` (keyed by variable name) < `[endpoints]` of a TOML config file < STREAM_OSC_* variables.

        The defaults are the caller's to give (the CLI gives the embedded stack's): this layer knows
        no addresses of its own, so a production run never falls back to a development default here.
        """
        environ = os.environ if environ is None else environ
        defaults = defaults or {}
        keys = {**ENV_KEYS, **OPTIONAL_KEYS}
        values = {key: defaults[var] for key, var in keys.items() if var in defaults}
        path = config_file or environ.get("STREAM_OSC_CONFIG")
        if path:
            section = config_section(path, "endpoints")
            unknown = set(section) - set(keys)
            if unknown:
                raise ConfigError(f"unknown keys in [endpoints] of {path}: {', '.join(sorted(unknown))}")
            quoted = sorted(key for key, value in section.items() if not isinstance(value, str))
            if quoted:   # a number or a flag here is a mistake (the value is not shown: it may be a password)
                raise ConfigError(f"{', '.join(quoted)} in [endpoints] of {path} must be a string (in quotes)")
            values.update(section)
        for key, var in keys.items():
            if environ.get(var, "").strip():
                values[key] = environ[var]
        missing = [f"{var} ({'set but empty; ' if var in environ else ''}or {key} in [endpoints])"
                   for key, var in ENV_KEYS.items() if not str(values.get(key, "")).strip()]
        if missing:
            raise MissingEndpoint(f"no address for: {', '.join(missing)}")
        endpoints = cls(**values)
        parse_mysql_dsn(endpoints.mysql_dsn)  # a malformed DSN is refused here, not at first use
        if endpoints.target_dsn:
            dsn_parts(endpoints.target_dsn, "STREAM_OSC_TARGET_DSN (target_dsn)")
        _ = endpoints.kafka  # so is an unreadable Kafka properties file
        check_service_addresses(endpoints)   # and a Kafka, Connect or Redis address of the wrong shape
        check_connector_database(endpoints)
        check_connect_access(endpoints)
        check_connector_secret_settings(endpoints)
        return endpoints


def refuse_password_on_command_line(dsn: str) -> None:
    """ConfigError when a `--target-dsn` value holds a password (never repeating it)."""
    if dsn_parts(dsn, "--target-dsn").password:
        raise ConfigError("--target-dsn holds a password: `ps` shows command lines to every user of the machine; "
                          "put the password in STREAM_OSC_TARGET_PASSWORD, a Secrets Manager secret "
                          "(STREAM_OSC_TARGET_SECRET_ID), or the whole DSN in STREAM_OSC_TARGET_DSN")


def secret_login(text: str, secret_id: str) -> DsnParts:
    """What a secret holds: JSON as RDS keeps its managed secrets (`username`, `password`, optional `host`, `port`,
    `dbname`) or a mysql:// DSN. Errors name the secret, never its content."""
    name = f"the Secrets Manager secret {secret_id} (STREAM_OSC_TARGET_SECRET_ID)"
    if not text.lstrip().startswith("{"):
        return dsn_parts(text.strip(), name)
    try:
        login = json.loads(text)
    except ValueError:
        raise ConfigError(f"{name} is neither valid JSON nor a DSN like {DSN_SHAPE}") from None
    if not isinstance(login, dict):
        raise ConfigError(f"{name} must be a JSON object (username, password, host, port)")
    port = str(login.get("port") or "")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"{name}: port is not a number from 1 to 65535")
    return DsnParts(host=str(login.get("host") or ""), port=int(port) if port else None,
                    user=str(login.get("username") or "") or None, password=str(login.get("password") or "") or None,
                    tls=tls_options(""))


KAFKA_SHAPE = "HOST:PORT[,HOST:PORT…], e.g. kafka-1:9092,kafka-2:9092"
CONNECT_SHAPE = "an http:// or https:// URL with a host, e.g. http://connect.internal:8083"
REDIS_SHAPE = "a redis://HOST[:PORT]/DB, rediss://… or unix://PATH URL, e.g. redis://redis.internal:6379/0"


def check_service_addresses(endpoints: Endpoints) -> None:
    """Refuse a Kafka bootstrap list, Connect URL or Redis URL that no client could use, when the endpoints are read
    rather than at first use (a traceback, or a wait for a broker that cannot be). A URL is never repeated: the
    Redis URL may hold a password, and a misplaced part of either may be one."""
    for item in (part.strip() for part in endpoints.kafka_bootstrap.split(",")):
        if item and _broker_problem(item.rpartition("://")[2]):   # (an empty one, a trailing comma's, is skipped)
            raise ConfigError(f"STREAM_OSC_KAFKA_BOOTSTRAP (kafka_bootstrap) must be {KAFKA_SHAPE}: {item!r} is "
                              "not HOST:PORT")
    if _url_problem(endpoints.connect_url, ("http", "https")):
        raise ConfigError(f"STREAM_OSC_CONNECT_URL (connect_url) must be {CONNECT_SHAPE}")
    if _url_problem(endpoints.redis_url, ("redis", "rediss", "unix")):
        raise ConfigError(f"STREAM_OSC_REDIS_URL (redis_url) must be {REDIS_SHAPE} (the URL is not shown: it may "
                          "hold a password)")


def _broker_problem(hostport: str) -> bool:
    """Whether `hostport` (HOST, HOST:PORT, [IPv6]:PORT) is no broker address: no host, a space, a bad port."""
    host, colon, port = ("", "", "") if hostport.endswith("]") else hostport.rpartition(":")
    if not colon:
        host, port = hostport, ""
    return (not host.strip("[]") or any(c.isspace() or not c.isprintable() for c in hostport)
            or (bool(colon) and not (port.isdigit() and 0 < int(port) < 65536)))


def _url_problem(url: str, schemes: tuple[str, ...]) -> bool:
    """Whether `url` is no URL of one of `schemes` with a host (a path for unix://) and a port, if any, in range."""
    if any(c.isspace() or not c.isprintable() for c in url):
        return True
    try:
        parts = urlparse(url)
        port = parts.port
    except ValueError:   # a port that is no number from 0 to 65535
        return True
    where = parts.path if parts.scheme == "unix" else parts.hostname
    return parts.scheme.lower() not in schemes or not where or port == 0


def check_connect_access(endpoints: Endpoints) -> None:
    """Refuse credentials in the Connect URL (they would be in every message), half a login, an unreadable CA."""
    if urlparse(endpoints.connect_url).password is not None or "@" in urlparse(endpoints.connect_url).netloc:
        raise ConfigError("STREAM_OSC_CONNECT_URL must not hold credentials; give them as STREAM_OSC_CONNECT_USER "
                          "and STREAM_OSC_CONNECT_PASSWORD or STREAM_OSC_CONNECT_PASSWORD_FILE")
    access = endpoints.connect
    if bool(access.user) != bool(access.password):
        raise ConfigError("Kafka Connect basic auth needs both STREAM_OSC_CONNECT_USER and a password "
                          "(STREAM_OSC_CONNECT_PASSWORD or STREAM_OSC_CONNECT_PASSWORD_FILE)")
    if access.ca and not os.access(access.ca, os.R_OK):
        raise ConfigError(f"STREAM_OSC_CONNECT_CA {access.ca} is not a readable file")


def check_connector_database(endpoints: Endpoints) -> None:
    """Refuse a malformed connector-side database address or a truststore password given in clear."""
    host, colon, port = endpoints.connector_database_host.rpartition(":")
    if endpoints.connector_database_host and colon and "]" not in port and not (
            host and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"STREAM_OSC_CONNECTOR_DATABASE_HOST (connector_database_host) must be host or host:port "
                          f"(port 1-65535): {endpoints.connector_database_host}")
    password = endpoints.connector_ssl_truststore_password
    if password and not PROVIDER_REFERENCE.fullmatch(password):
        raise ConfigError("STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE_PASSWORD (connector_ssl_truststore_password) must be "
                          "a Kafka Connect config provider reference such as ${env:TRUSTSTORE_PASSWORD}, not the "
                          "password itself")


def check_connector_secret_settings(endpoints: Endpoints) -> None:
    """Refuse a connector password that is not a provider reference (never echoing it) or an unusable folder."""
    if endpoints.connector_kafka_jaas and not PROVIDER_REFERENCE.fullmatch(endpoints.connector_kafka_jaas):
        raise ConfigError("STREAM_OSC_CONNECTOR_KAFKA_JAAS (connector_kafka_jaas) must be a Kafka Connect config "
                          "provider reference such as ${file:/etc/kafka-connect/secrets/kafka.properties:jaas}, "
                          "not the JAAS line itself: it holds the Kafka password")
    if endpoints.connector_password and not PROVIDER_REFERENCE.fullmatch(endpoints.connector_password):
        raise ConfigError("STREAM_OSC_CONNECTOR_PASSWORD (connector_password) must be a Kafka Connect config "
                          "provider reference such as ${file:/etc/kafka-connect/secrets/db.properties:password} "
                          "or ${env:DB_PASSWORD}, not the password itself: Connect stores a connector's config in "
                          "its config topic and returns it from its REST API")
    folder = endpoints.connector_secrets_dir
    if folder and (not os.path.isabs(folder) or re.search(r"[:}{,]", folder)):
        raise ConfigError(f"STREAM_OSC_CONNECTOR_SECRETS_DIR (connector_secrets_dir) must be an absolute path "
                          f"without ':', ',' or braces (it goes into a ${{file:PATH:KEY}} reference): {folder}")


def redis_where(url: str) -> str:
    """host:port of a redis URL, for messages (no credentials)."""
    parsed = urlparse(url)
    return f"{parsed.hostname}:{parsed.port or 6379}"
