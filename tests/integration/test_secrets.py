"""The database password never leaves the tool readable: Kafka Connect gets a config provider reference,
returns and stores only that, and capture with the password works."""
from __future__ import annotations

import json
import os
import stat
import urllib.request
from dataclasses import replace
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer, TopicPartition

from cli.main import main
from connectors.secrets import secret_file
from core.db import ServerInfo, connect, query
from migration.init_stage import start_capture
from streams.topics import TopicNames
from tests.integration.helpers import changed_keys, forms, leftovers, recorded_migration

pytestmark = pytest.mark.integration

DB = "secrets"
USER = "osc_secret_test"
# every character a URL, a properties file or a JSON document treats specially (ASCII: PyMySQL sends a
# password encoded as latin-1)
PASSWORD = "pw#1:a=b c\\d?e/f@g%h!\"'"


@pytest.fixture
def secret_user_endpoints(endpoints, conn):
    """The endpoints with a DSN of a user whose password holds every special character."""
    query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")
    query(conn, f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
    query(conn, f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%'")
    mysql = endpoints.mysql
    yield replace(endpoints, mysql_dsn=f"mysql://{USER}:{quote(PASSWORD, safe='')}@{mysql.host}:{mysql.port}/")
    query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")


def rest(endpoints, path: str) -> bytes:
    with urllib.request.urlopen(endpoints.connect_url + path, timeout=15) as resp:
        return resp.read()


def config_topic_values(bootstrap: str, topic: str, connector: str) -> list[bytes]:
    """The records of Connect's config topic about `connector` (connector and task configs, commits, target
    state: keyed by its name), from the beginning to its end now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secrets-test", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        position = 0
        while position < high:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                if connector.encode() in (msg.key() or b""):
                    values.append(msg.value() or b"")
                position = msg.offset() + 1
        return values
    finally:
        consumer.close()


def test_password_is_in_no_config_connect_returns_or_stores_and_capture_works(stack_config, secret_user_endpoints):
    if stack_config is None:
        pytest.skip("reads the embedded stack's Connect config topic and log")
    endpoints = secret_user_endpoints
    conn = connect(endpoints.mysql)   # the tool itself runs as the special user too
    try:
        with recorded_migration(conn, endpoints, DB, "items") as recorded:
            spec, migration = recorded.spec, recorded.migration
            path = secret_file(endpoints.connector_secrets_dir, migration.connector)
            start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)   # proves capture: fences seen
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

            config = rest(endpoints, f"/connectors/{migration.connector}/config")
            assert json.loads(config)["database.password"] == f"${{file:{path}:database.password}}"
            documents = {"GET config": config,
                         "GET tasks": rest(endpoints, f"/connectors/{migration.connector}/tasks"),
                         "GET connector": rest(endpoints, f"/connectors/{migration.connector}")}
            config_topic = f"{stack_config.connect_group}-configs"
            stored = config_topic_values(endpoints.kafka_bootstrap, config_topic, migration.connector)
            assert any(b"database.password" in value for value in stored), \
                "the connector's stored config was not read"
            documents.update({f"config topic record {n}": value for n, value in enumerate(stored)})
            log = stack_config.log_file("connect").read_bytes()
            for where, document in {**documents, "connect log": log}.items():
                for form in forms(PASSWORD):
                    assert form not in document, f"the password is in {where}"

            query(conn, f"INSERT INTO {DB}.items VALUES (7, 'after')")
            changes = TopicNames(migration.prefix, DB, "items").changes
            assert changed_keys(endpoints.kafka_bootstrap, changes, 2) == [7]
    finally:
        conn.close()
    assert not path.exists(), "the password file outlived its connector"


def test_migrate_is_refused_when_the_password_could_only_go_in_clear(endpoints, conn, capsys, monkeypatch):
    """Another Connect worker than the stack's, and no provider reference given: one error, nothing made."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.plain")
    query(conn, f"CREATE TABLE {DB}.plain (id INT PRIMARY KEY, v INT)")
    monkeypatch.setenv("STREAM_OSC_CONNECT_URL", endpoints.connect_url + "/")   # the same worker, named otherwise
    monkeypatch.delenv("STREAM_OSC_CONNECTOR_PASSWORD", raising=False)
    monkeypatch.delenv("STREAM_OSC_CONNECTOR_SECRETS_DIR", raising=False)
    code = main(["migrate", "--table", f"{DB}.plain", "--alter", "ADD COLUMN x INT", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "STREAM_OSC_CONNECTOR_PASSWORD" in err and "STREAM_OSC_CONNECTOR_SECRETS_DIR" in err
    assert leftovers(endpoints, DB, "plain") == []
    query(conn, f"DROP TABLE {DB}.plain")
