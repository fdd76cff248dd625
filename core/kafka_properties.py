"""Kafka client properties (SASL, TLS) from a properties file, for every Kafka client of the tool.

One file, in the `key=value` format of Kafka's own `--command-config` files, with librdkafka's
property names (`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`ssl.ca.location`, ...). Its path comes from STREAM_OSC_KAFKA_PROPERTIES or `kafka_properties` in
`[endpoints]`, so no secret is ever on a command line; errors name the file and line, never a value.
The connector's own Java clients get the same settings translated (connectors/kafka_clients.py).
"""
from __future__ import annotations

from pathlib import Path

from core.config_file import ConfigError

# Set by the tool itself for each client: a file value would silently change what a client does.
RESERVED = frozenset({"bootstrap.servers", "group.id", "enable.auto.commit", "enable.partition.eof",
                      "auto.offset.reset", "partitioner", "log_level"})
# Values shown as *** wherever properties are described.
SECRET_WORDS = ("password", "secret", "jaas", "key.pem", "token")


def is_secret(key: str) -> bool:
    return any(word in key.lower() for word in SECRET_WORDS)


def read_kafka_properties(path: str) -> dict[str, str]:
    """The client properties in the file at `path`; ConfigError (naming file and line, no value) if unusable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the Kafka client properties file {path} (STREAM_OSC_KAFKA_PROPERTIES): "
                          f"{getattr(exc, 'strerror', None) or type(exc).__name__}") from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separator = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if separator < 0:
            raise ConfigError(f"{path}, line {number}: expected key=value (the line is not shown: it may hold a "
                              "secret)")
        key, value = line[:separator].strip(), line[separator + 1:].strip()
        if key in RESERVED:
            raise ConfigError(f"{path}, line {number}: {key} is set by stream-osc itself and cannot be given here"
                              + (" (use STREAM_OSC_KAFKA_BOOTSTRAP)" if key == "bootstrap.servers" else ""))
        properties[key] = value
    return properties


def describe(properties: dict[str, str]) -> str:
    """The properties for messages and logs, secrets masked."""
    return ", ".join(f"{k}={'***' if is_secret(k) else v}" for k, v in sorted(properties.items()))
