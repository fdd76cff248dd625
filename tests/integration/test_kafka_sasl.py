"""The tool's Kafka clients and the connector's own clients work through a listener that requires a SASL
login, with the client properties from one file; a wrong password is one clear error, never echoed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import replace

import pytest

from core.db import ServerInfo, query
from migration.init_stage import start_capture
from streams.topics import TopicNames
from tests.integration.helpers import changed_keys, existing_topics, forms, leftovers, recorded_migration

pytestmark = pytest.mark.integration

DB = "kafka_sasl"


def sasl_properties(tmp_path, stack_config, password: str) -> str:
    path = tmp_path / "kafka-client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.username={stack_config.kafka_sasl_user}\nsasl.password={password}\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture
def sasl_endpoints(stack_config, endpoints, tmp_path):
    if stack_config is None:
        pytest.skip("uses the embedded broker's SASL listener")
    return replace(endpoints, kafka_bootstrap=f"{stack_config.host}:{stack_config.kafka_sasl_port}",
                   kafka_properties=sasl_properties(tmp_path, stack_config, stack_config.kafka_sasl_password))


def test_capture_runs_through_the_sasl_listener_with_the_login_only_by_reference(stack_config, sasl_endpoints, conn):
    endpoints = sasl_endpoints
    with recorded_migration(conn, endpoints, DB, "items") as recorded:
        spec, migration = recorded.spec, recorded.migration
        names = TopicNames(migration.prefix, DB, "items")
        # topic created and fences read by the tool's clients, schema history written by the connector's:
        # all through the listener that refuses clients without the login
        start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)
        assert set(names.all()) <= existing_topics(endpoints.kafka)
        with urllib.request.urlopen(f"{endpoints.connect_url}/connectors/{migration.connector}/config",
                                    timeout=15) as resp:
            document = resp.read()
        config = json.loads(document)
        for client in ("producer", "consumer"):
            prefix = f"schema.history.internal.{client}."
            assert config[prefix + "security.protocol"] == "SASL_PLAINTEXT"
            assert config[prefix + "sasl.jaas.config"].startswith("${file:")
        assert config["schema.history.internal.kafka.bootstrap.servers"] == endpoints.kafka_bootstrap
        for form in forms(stack_config.kafka_sasl_password):
            assert form not in document, "the Kafka password is in the connector config"
        query(conn, f"INSERT INTO {DB}.items VALUES (7, 'after')")
        plain_listener = f"{stack_config.host}:{stack_config.kafka_port}"   # the test's own reader: same broker
        assert changed_keys(plain_listener, names.changes, 2) == [7]
    assert leftovers(endpoints, DB, "items") == []


def cli_with(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env})


def test_a_wrong_kafka_password_is_one_clear_error_and_never_echoed(stack_config, tmp_path, conn):
    if stack_config is None:
        pytest.skip("uses the embedded broker's SASL listener")
    query(conn, f"CREATE TABLE IF NOT EXISTS {DB}.dry (id INT PRIMARY KEY)")
    sasl = f"{stack_config.host}:{stack_config.kafka_sasl_port}"
    args = ("migrate", "--table", f"{DB}.dry", "--alter", "ADD COLUMN x INT", "--dry-run")
    good = cli_with({"STREAM_OSC_KAFKA_BOOTSTRAP": sasl, "STREAM_OSC_KAFKA_PROPERTIES":
                     sasl_properties(tmp_path, stack_config, stack_config.kafka_sasl_password)}, *args)
    assert good.returncode == 0, good.stderr
    wrong_password = "Wr0ng-kafka-S3cret"
    bad = cli_with({"STREAM_OSC_KAFKA_BOOTSTRAP": sasl, "STREAM_OSC_KAFKA_PROPERTIES":
                    sasl_properties(tmp_path, stack_config, wrong_password)}, *args)
    assert bad.returncode == 2
    errors = [line for line in bad.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert errors == [f"stream-osc: error: Kafka at {sasl} refused the client's SASL login "
                                               "(wrong user name, password or mechanism); the client properties "
                                               "come from STREAM_OSC_KAFKA_PROPERTIES (docs/connectivity.md)"]
    assert wrong_password not in bad.stdout + bad.stderr
