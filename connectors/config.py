"""Debezium connector configuration for capturing one table (plus its fence and capture heartbeat tables)."""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from connectors.secrets import ENV_PROVIDER, FILE_PROVIDER
from connectors.kafka_clients import connector_client_settings
from core.endpoints import KafkaAddress, MySQLAddress
from streams.topics import TopicNames

CONNECTOR_CLASSES = {
    "mariadb": "io.debezium.connector.mariadb.MariaDbConnector",
    "mysql": "io.debezium.connector.mysql.MySqlConnector",
}

# Settings that hold for every connector stream-osc creates; the reasons are noted beside them.
BASE_SETTINGS: dict[str, str] = {
    "tasks.max": "1",
    "snapshot.mode": "no_data",               # start at the current position, copy nothing
    "snapshot.locking.mode": "none",          # no global read lock on a busy primary
    "tombstones.on.delete": "false",
    "decimal.handling.mode": "string",
    # BIGINT UNSIGNED keys above 2^63 would arrive wrapped to negative numbers as a Java long: send them
    # exactly (a decimal of scale 0), written by the JSON converters as a plain number, not base64 bytes.
    "bigint.unsigned.handling.mode": "precise",
    "key.converter.decimal.format": "NUMERIC",
    "value.converter.decimal.format": "NUMERIC",
    "include.schema.changes": "false",
    "schema.history.internal.skip.unparseable.ddl": "true",
    "schema.history.internal.store.only.captured.tables.ddl": "true",
    "heartbeat.interval.ms": "1000",          # keeps the position moving on a quiet table
    # Reconnect within seconds when the binlog connection drops, but not faster than the server can
    # start a GTID dump: it scans the binlog file up to the position first, sending nothing meanwhile
    # (an 800 MB file took over a second), and a shorter interval reconnects in a loop and never streams.
    "connect.keep.alive.interval.ms": "10000",
    "poll.interval.ms": "20",
    "max.batch.size": "8192",
    "max.queue.size": "32768",
    "producer.override.linger.ms": "5",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}

# Connect worker settings the stack and docker-compose share with this module.
WORKER_SETTINGS: dict[str, str] = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter.schemas.enable": "false",
    "connector.client.config.override.policy": "All",
    "offset.flush.interval.ms": "500",
    # the connector config names the password by reference (connectors/secrets.py); the worker resolves it
    "config.providers": "file,env",
    "config.providers.file.class": FILE_PROVIDER,
    "config.providers.env.class": ENV_PROVIDER,
}


def server_id_for(prefix: str) -> str:
    """A replication server id derived from the prefix, away from common small ids."""
    return str(5_400_000 + zlib.crc32(prefix.encode()) % 1_000_000)


def java_literal(text: str) -> str:
    """`text` as a Java regular expression matching exactly it: letters, digits and _ as themselves, every
    other character as \\x{hex} (no comma, which would split Debezium's list, and no quoting to escape)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"\\x{{{ord(c):x}}}" for c in text)


def table_pattern(database: str, table: str) -> str:
    """The include-list pattern of exactly `database`.`table`, case-sensitive as the server's names are
    (Debezium matches include lists ignoring case: `Orders` would otherwise capture `orders` too)."""
    return f"(?-i){java_literal(database)}\\.{java_literal(table)}"


def data_topic(prefix: str, database: str, table: str) -> str:
    """The topic Debezium names for a table's changes: `<prefix>.<db>.<table>`, every character outside Kafka's
    alphabet [a-zA-Z0-9._-] as `_` (its default topic naming strategy; names are within the BMP, one Java char
    each, and ours stay under its 249-character cut)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{prefix}.{database}.{table}")


# The DSN's ssl-mode as each connector names it (Debezium's MariaDB connector uses MariaDB Connector/J's names).
SSL_MODES = {
    "mariadb": {"disabled": "disable", "preferred": "disable", "required": "trust", "verify-ca": "verify-ca",
                "verify-identity": "verify-full"},   # (it has no "preferred")
    "mysql": {"disabled": "disabled", "preferred": "preferred", "required": "required", "verify-ca": "verify_ca",
              "verify-identity": "verify_identity"},
}


@dataclass(frozen=True)
class DatabaseAccess:
    """How the connector reaches and trusts the database, where it differs from the tool's DSN."""

    host: str
    port: int
    truststore: str = ""                 # JKS/PKCS12 file on the workers
    truststore_password_reference: str = ""


def database_settings(flavor: str, mysql: MySQLAddress, access: DatabaseAccess | None) -> dict[str, str]:
    """Address and TLS of the connector's database connections: the DSN's, unless `access` says otherwise."""
    access = access or DatabaseAccess(mysql.host, mysql.port)
    settings = {"database.hostname": access.host, "database.port": str(access.port),
                "database.ssl.mode": SSL_MODES[flavor][mysql.ssl_mode]}
    if access.truststore:
        settings["database.ssl.truststore"] = access.truststore
        if access.truststore_password_reference:
            settings["database.ssl.truststore.password"] = access.truststore_password_reference
    return settings


def connector_config(flavor: str, mysql: MySQLAddress, password_reference: str, kafka: KafkaAddress,
                     names: TopicNames, fence_table: tuple[str, str], capture_heartbeat_table: tuple[str, str],
                     kafka_jaas_reference: str = "", access: DatabaseAccess | None = None) -> dict[str, str]:
    """Full connector config: capture `db.table`, the fence table and the capture heartbeat table; route the
    first two into the change topic and the third into its own topic.

    `access` is the database as the workers reach it (default: the DSN's host and port).
    The password and the Kafka login are config provider references (connectors/secrets.py), resolved by
    the Connect worker; the Kafka client properties reach the connector's own clients translated
    (connectors/kafka_clients.py).
    """
    config = dict(BASE_SETTINGS)
    config.update({
        "connector.class": CONNECTOR_CLASSES[flavor],
        **database_settings(flavor, mysql, access),
        "database.user": mysql.user,
        "database.password": password_reference,
        "database.server.id": server_id_for(names.prefix),
        "topic.prefix": names.prefix,
        "table.include.list": ",".join(table_pattern(*t) for t in ((names.database, names.table), fence_table,
                                                                     capture_heartbeat_table)),
        "schema.history.internal.kafka.bootstrap.servers": kafka.bootstrap,
        "schema.history.internal.kafka.topic": names.schema_history,
        # The table's changes and the fence rows go into one change topic, keys unchanged. The fences are
        # keyed so that each partition gets one: seeing a partition's fence proves every earlier change of
        # that partition is there. Routing every data topic of the prefix (Debezium's heartbeats have their
        # own prefix) spares knowing how Debezium rewrites the source's name when it is not a valid topic name.
        # The capture heartbeat table's topic is renamed first, exactly (a miss would send its stamps to the
        # change topic, never a source change elsewhere), and that name is kept out of the change topic: its
        # stamps must never count as the appliers' lag.
        "transforms": "heartbeat,route",
        "transforms.heartbeat.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.heartbeat.regex": java_literal(data_topic(names.prefix, *capture_heartbeat_table)),
        "transforms.heartbeat.replacement": names.capture_heartbeat,
        "transforms.route.type": "io.debezium.transforms.ByLogicalTableRouter",
        "transforms.route.topic.regex": re.escape(f"{names.prefix}.") + ".*",
        "transforms.route.topic.replacement": names.changes,
        "transforms.route.key.enforce.uniqueness": "false",
        "transforms.route.predicate": "capture_heartbeat",
        "transforms.route.negate": "true",
        "predicates": "capture_heartbeat",
        "predicates.capture_heartbeat.type": "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
        "predicates.capture_heartbeat.pattern": java_literal(names.capture_heartbeat),
    })
    config.update(connector_client_settings(kafka.settings(), kafka_jaas_reference))
    return config

