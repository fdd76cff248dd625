"""How the connector gets the database password without its config holding it.

Kafka Connect stores a connector's config in its config topic and returns it from
`GET /connectors/<name>/config`; config providers resolve a `${provider:path:key}` reference inside
the worker, at task start, and Connect writes the reference (not the value) back to its topics. So the
connector config carries a reference, and the password reaches the worker by one of two ways
(docs/secrets.md):

- `connector_password`: a reference the operator set up on the worker (a file, an environment variable,
  a vault provider), used as given;
- `connector_secrets_dir`: a folder the worker's FileConfigProvider may read (the embedded stack's, or
  a volume shared with the workers); the tool writes `<connector>.properties` there, mode 0600, and
  removes it with the connector.
"""
from __future__ import annotations

import os
from pathlib import Path

from connectors.kafka_clients import jaas_line, needs_login
from core.config_file import ConfigError
from core.endpoints import Endpoints

PASSWORD_KEY = "database.password"
KAFKA_JAAS_KEY = "kafka.sasl.jaas.config"   # the Kafka login of the connector's own clients

FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"


def require_connector_secret(endpoints: Endpoints) -> None:
    """Refuse to start capture when there is no way to hand the password over except in clear."""
    if not (endpoints.connector_password or endpoints.connector_secrets_dir):
        raise ConfigError("no way to give Kafka Connect the database password without writing it into the "
                          "connector config: set STREAM_OSC_CONNECTOR_PASSWORD to a config provider reference "
                          "(e.g. ${file:/etc/kafka-connect/secrets/db.properties:password}) or "
                          "STREAM_OSC_CONNECTOR_SECRETS_DIR to a folder the Connect workers read (docs/secrets.md)")
    if KAFKA_JAAS_KEY in secrets_to_write(endpoints) and not endpoints.connector_secrets_dir:
        raise ConfigError("no way to give the connector's Kafka clients their SASL login without writing the Kafka "
                          "password into the connector config: set STREAM_OSC_CONNECTOR_KAFKA_JAAS to a config "
                          "provider reference resolving to the JAAS line, or STREAM_OSC_CONNECTOR_SECRETS_DIR to a "
                          "folder the Connect workers read (docs/connectivity.md)")
    folder = endpoints.connector_secrets_dir
    if secrets_to_write(endpoints) and not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"STREAM_OSC_CONNECTOR_SECRETS_DIR {folder} is not a folder this process can write to")


def secret_file(folder: str, connector: str) -> Path:
    """The password file of one connector (connector names are unique and never reused)."""
    return Path(folder) / f"{connector}.properties"


def password_reference(endpoints: Endpoints, connector: str) -> str:
    """What the connector config carries as `database.password`."""
    if endpoints.connector_password:
        return endpoints.connector_password
    return f"${{file:{secret_file(endpoints.connector_secrets_dir, connector)}:{PASSWORD_KEY}}}"


def kafka_jaas_reference(endpoints: Endpoints, connector: str) -> str:
    """What the connector config carries as its Kafka clients' `sasl.jaas.config` (when they log in)."""
    if endpoints.connector_kafka_jaas:
        return endpoints.connector_kafka_jaas
    return f"${{file:{secret_file(endpoints.connector_secrets_dir, connector)}:{KAFKA_JAAS_KEY}}}"


def secrets_to_write(endpoints: Endpoints) -> dict[str, str]:
    """The secrets the tool must put in the connector's secret file: those the operator gave no reference for."""
    entries = {} if endpoints.connector_password else {PASSWORD_KEY: endpoints.mysql.password}
    properties = endpoints.kafka.settings()
    if needs_login(properties) and not endpoints.connector_kafka_jaas:
        entries[KAFKA_JAAS_KEY] = jaas_line(properties)
    return entries


def write_connector_secret(endpoints: Endpoints, connector: str) -> None:
    """Write the secrets where the references point, readable by the owner only (nothing with references)."""
    entries = secrets_to_write(endpoints)
    if not entries:
        return
    path = secret_file(endpoints.connector_secrets_dir, connector)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)   # left by a killed write; a fresh file is made below, never reused
    # O_EXCL with O_NOFOLLOW: the password never goes into a file or link planted under that name
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            lines = "".join(f"{key}={properties_value(value)}\n" for key, value in entries.items())
            os.write(fd, lines.encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)   # no copy of the password outlives a failed write
        raise


def remove_connector_secret(endpoints: Endpoints, connector: str) -> None:
    """Remove the password file of a connector (none when the operator's own reference is used)."""
    if endpoints.connector_secrets_dir:
        secret_file(endpoints.connector_secrets_dir, connector).unlink(missing_ok=True)


def properties_value(text: str) -> str:
    """`text` as a java.util.Properties value: backslashes doubled, everything but printable ASCII as \\uXXXX
    (UTF-16, so that the file reads the same whatever charset the reader assumes)."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif " " < char < "\x7f" and char not in "#!=:":
            out.append(char)
        else:
            units = char.encode("utf-16-be")
            out.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    return "".join(out)
