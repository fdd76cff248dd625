"""Kafka client properties (SASL/TLS): read from one file, used by every client, handed to the connector's
clients translated, the password never in the connector config, a log line or an error."""
from __future__ import annotations

from dataclasses import replace

import pytest

from connectors.config import connector_config
from connectors.secrets import KAFKA_JAAS_KEY, require_connector_secret, write_connector_secret
from core.endpoints import ConfigError, Endpoints, KafkaAddress, parse_mysql_dsn
from streams.topics import TopicNames, client_config, consumer_config

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9093",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}
SECRET = 'k@fka"pa\\ss'
SASL = f"""# a client config as for kafka-topics.sh --command-config
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=osc
sasl.password={SECRET}
ssl.ca.location=/etc/kafka/ca.pem
"""


def endpoints_with(tmp_path, text: str, **environ: str) -> Endpoints:
    path = tmp_path / "kafka.properties"
    path.write_text(text)
    return Endpoints.load(environ={"STREAM_OSC_KAFKA_PROPERTIES": str(path), **environ}, defaults=ADDRESSES)


def test_every_client_starts_from_the_file_and_the_tool_keeps_its_own_settings(tmp_path):
    kafka = endpoints_with(tmp_path, SASL).kafka
    config = consumer_config(kafka, **{"group.id": "g"})
    assert config["bootstrap.servers"] == "k:9093" and config["group.id"] == "g"
    assert (config["security.protocol"], config["sasl.mechanism"], config["sasl.password"]) == \
        ("SASL_SSL", "SCRAM-SHA-512", SECRET)
    assert client_config(kafka)["ssl.ca.location"] == "/etc/kafka/ca.pem"
    assert SECRET not in repr(kafka) and "sasl.password=***" in repr(kafka) and str(kafka) == "k:9093"


@pytest.mark.parametrize("line, message", [("bootstrap.servers=other:9092", "STREAM_OSC_KAFKA_BOOTSTRAP"),
                                           ("group.id=mine", "set by stream-osc itself"),
                                           (f"just-a-{SECRET}", "line 2: expected key=value")])
def test_a_bad_properties_file_is_refused_naming_the_line_not_the_value(tmp_path, line, message):
    with pytest.raises(ConfigError, match=message) as err:
        endpoints_with(tmp_path, f"security.protocol=SASL_SSL\n{line}\n")
    assert SECRET not in str(err.value)


def test_a_missing_properties_file_is_refused_at_load():
    with pytest.raises(ConfigError, match="cannot read the Kafka client properties file /nowhere/k.properties"):
        Endpoints.load(environ={"STREAM_OSC_KAFKA_PROPERTIES": "/nowhere/k.properties"}, defaults=ADDRESSES)


def test_the_connectors_clients_get_the_settings_and_the_login_only_by_reference(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    endpoints = endpoints_with(tmp_path, SASL, STREAM_OSC_CONNECTOR_SECRETS_DIR=str(secrets))
    require_connector_secret(endpoints)
    write_connector_secret(endpoints, "conn-1")
    reference = f"${{file:{secrets / 'conn-1.properties'}:{KAFKA_JAAS_KEY}}}"
    config = connector_config("mariadb", endpoints.mysql, "${file:x:y}", endpoints.kafka,
                              TopicNames("p", "shop", "orders"), ("m", "f"), ("m", "h"), reference)
    for client in ("producer", "consumer"):
        prefix = f"schema.history.internal.{client}."
        assert config[prefix + "security.protocol"] == "SASL_SSL"
        assert config[prefix + "sasl.mechanism"] == "SCRAM-SHA-512"
        assert config[prefix + "sasl.jaas.config"] == reference
        assert (config[prefix + "ssl.truststore.type"], config[prefix + "ssl.truststore.location"]) == \
            ("PEM", "/etc/kafka/ca.pem")
    assert config["schema.history.internal.kafka.bootstrap.servers"] == "k:9093"
    assert not any(SECRET in value or "osc" == value for value in config.values())
    written = (secrets / "conn-1.properties").read_text()
    assert f"{KAFKA_JAAS_KEY}=org.apache.kafka.common.security.scram.ScramLoginModule\\u0020required" in written
    assert "database.password=p" in written


def test_a_login_that_could_only_go_in_clear_is_refused(tmp_path):
    endpoints = endpoints_with(tmp_path, SASL, STREAM_OSC_CONNECTOR_PASSWORD="${env:DB_PASSWORD}")
    with pytest.raises(ConfigError, match="STREAM_OSC_CONNECTOR_KAFKA_JAAS") as err:
        require_connector_secret(endpoints)
    assert SECRET not in str(err.value)
    given = replace(endpoints, connector_kafka_jaas="${env:KAFKA_JAAS}")
    require_connector_secret(given)
    with pytest.raises(ConfigError, match="not the JAAS line itself"):
        endpoints_with(tmp_path, SASL, STREAM_OSC_CONNECTOR_KAFKA_JAAS="org...PlainLoginModule required;")


def test_plain_bootstrap_only_is_unchanged():
    assert client_config(KafkaAddress("k:1")) == {"bootstrap.servers": "k:1", "log_level": 2}
    assert not any(k.startswith("schema.history.internal.producer") for k in connector_config(
        "mariadb", parse_mysql_dsn("mysql://u:p@h/"), "${env:P}", KafkaAddress("k:1"), TopicNames("p", "d", "t"),
        ("m", "f"), ("m", "h")))
