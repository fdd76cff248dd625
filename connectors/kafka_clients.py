"""The connector's own Kafka clients (Debezium's schema-history producer and consumer) get the tool's Kafka
client properties, translated from librdkafka's names to the Java client's.

The SASL login becomes a JAAS line holding the password: it never goes into the connector config
itself, which Connect stores in its config topic and shows on its REST API, but behind a config
provider reference (connectors/secrets.py, docs/connectivity.md).
"""
from __future__ import annotations

from collections.abc import Mapping

from core.config_file import ConfigError

# The clients the connector runs besides the worker's own producer (which the worker's config secures).
CLIENT_PREFIXES = ("schema.history.internal.producer.", "schema.history.internal.consumer.")

SAME_NAME = ("security.protocol", "ssl.endpoint.identification.algorithm", "sasl.kerberos.service.name")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
CREDENTIALS = ("sasl.username", "sasl.password")
TRANSLATED = (*SAME_NAME, "sasl.mechanism", "sasl.mechanisms", "ssl.ca.location", *CREDENTIALS)


def mechanism(properties: Mapping[str, str]) -> str:
    return properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "GSSAPI"


def needs_login(properties: Mapping[str, str]) -> bool:
    """True when the clients log in with a user name and password (the connector then needs a JAAS line)."""
    return any(key in properties for key in CREDENTIALS)


def jaas_line(properties: Mapping[str, str]) -> str:
    """The Java clients' sasl.jaas.config for the user name and password of the properties."""
    module = LOGIN_MODULES.get(mechanism(properties).upper())
    if module is None:
        raise ConfigError(f"sasl.mechanism {mechanism(properties)} with sasl.username/sasl.password cannot be handed "
                          f"to the connector's clients; supported: {', '.join(LOGIN_MODULES)}")

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (f"{module} required username={quoted(properties.get('sasl.username', ''))} "
            f"password={quoted(properties.get('sasl.password', ''))};")


def java_settings(properties: Mapping[str, str], jaas_reference: str) -> dict[str, str]:
    """One Java client's settings for the librdkafka properties; the JAAS line by `jaas_reference` only."""
    settings = {key: properties[key] for key in SAME_NAME if key in properties}
    if settings.get("ssl.endpoint.identification.algorithm") == "none":
        settings["ssl.endpoint.identification.algorithm"] = ""
    if "sasl.mechanism" in properties or "sasl.mechanisms" in properties:
        settings["sasl.mechanism"] = mechanism(properties)
    if "ssl.ca.location" in properties:   # a PEM file, read by the worker at that path
        settings["ssl.truststore.type"] = "PEM"
        settings["ssl.truststore.location"] = properties["ssl.ca.location"]
    if needs_login(properties):
        settings["sasl.jaas.config"] = jaas_reference
    return settings


def connector_client_settings(properties: Mapping[str, str], jaas_reference: str) -> dict[str, str]:
    """The connector config entries that secure its schema-history producer and consumer."""
    java = java_settings(properties, jaas_reference)
    return {prefix + key: value for prefix in CLIENT_PREFIXES for key, value in java.items()}


def untranslated(properties: Mapping[str, str]) -> list[str]:
    """Properties the tool's clients use that the connector's clients do not get (logged at init)."""
    return sorted(key for key in properties if key not in TRANSLATED)
