"""The pure checks behind some answers of the bad-input catalogue (tests/integration/test_bad_input_catalogue.py):
the shape of the Kafka, Connect and Redis addresses, a config file that is not UTF-8 or whose section is a plain key,
an ALTER that renames the table, a `set` value of the wrong format, a time zone given without a schedule. Each
refuses what it must and nothing a working setup uses."""
from __future__ import annotations

import pytest

from core.alter_columns import renames_table
from core.config_file import ConfigError, config_section
from core.endpoints import Endpoints
from core.schedule import parse_schedule
from migration.settings import parse_assignments

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9093",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}


@pytest.mark.parametrize("variable, value", [
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka-1:9092,kafka-2:9092"), ("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka"),
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "SASL_SSL://kafka:9093"), ("STREAM_OSC_KAFKA_BOOTSTRAP", "[::1]:9092"),
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka:9092,"),
    ("STREAM_OSC_CONNECT_URL", "https://connect.internal"), ("STREAM_OSC_CONNECT_URL", "http://[::1]:8083/"),
    ("STREAM_OSC_REDIS_URL", "rediss://:pw@redis:6380/1"), ("STREAM_OSC_REDIS_URL", "unix:///run/redis.sock"),
])
def test_every_address_shape_a_setup_uses_is_taken(variable, value):
    assert Endpoints.load(environ={**ADDRESSES, variable: value})


@pytest.mark.parametrize("variable, value, message", [
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka-1 kafka-2", "'kafka-1 kafka-2' is not HOST:PORT"),
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "kafka:0", "'kafka:0' is not HOST:PORT"),
    ("STREAM_OSC_KAFKA_BOOTSTRAP", ":9092", "':9092' is not HOST:PORT"),
    ("STREAM_OSC_CONNECT_URL", "connect:8083", "STREAM_OSC_CONNECT_URL (connect_url) must be an http:// or https://"),
    ("STREAM_OSC_CONNECT_URL", "http://connect:99999", "STREAM_OSC_CONNECT_URL (connect_url) must be"),
    ("STREAM_OSC_CONNECT_URL", "http://", "STREAM_OSC_CONNECT_URL (connect_url) must be"),
    ("STREAM_OSC_REDIS_URL", "http://redis:6379", "STREAM_OSC_REDIS_URL (redis_url) must be a redis://"),
    ("STREAM_OSC_REDIS_URL", "redis:///0", "STREAM_OSC_REDIS_URL (redis_url) must be"),
    ("STREAM_OSC_REDIS_URL", "redis://:Pw0rd@redis:99999/0", "STREAM_OSC_REDIS_URL (redis_url) must be"),
])
def test_an_address_no_client_could_use_is_refused_when_read_without_repeating_it(variable, value, message):
    with pytest.raises(ConfigError) as refused:
        Endpoints.load(environ={**ADDRESSES, variable: value})
    assert message in str(refused.value) and "Pw0rd" not in str(refused.value)


def test_an_endpoint_in_the_config_file_is_a_string(tmp_path):
    path = tmp_path / "osc.toml"
    path.write_text("[endpoints]\nmysql_dsn = 3306\n")
    with pytest.raises(ConfigError, match=rf"mysql_dsn in \[endpoints\] of {path} must be a string"):
        Endpoints.load(path, environ={}, defaults=ADDRESSES)


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe[migration]\n", "it is not UTF-8 text"),
    (b"migration = 5\n", "migration in config file {path} is a key with a value; it must be a [migration] section"),
])
def test_a_config_file_that_cannot_be_read_as_sections_is_one_error(tmp_path, content, message):
    path = tmp_path / "osc.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        config_section(path, "migration")
    assert message.format(path=path) in str(refused.value)


@pytest.mark.parametrize("alter, renames", [
    ("RENAME TO orders2", True), ("RENAME AS shop.orders2", True), ("RENAME `orders2`", True),
    ("ADD COLUMN c INT, RENAME TO orders2", True), ("/*! RENAME TO orders2 */", True),
    ("RENAME COLUMN a TO b", False), ("RENAME INDEX a TO b", False), ("RENAME KEY a TO b", False),
    ("ADD COLUMN `rename` INT", False), ("MODIFY c INT COMMENT 'RENAME TO x'", False),
    ("ADD COLUMN c VARCHAR(3) DEFAULT 'unterminated", False),
])
def test_an_alter_that_renames_the_table_is_told_from_one_that_renames_a_column(alter, renames):
    assert renames_table(alter) is renames


@pytest.mark.parametrize("item, message", [
    ("max-load=Threads_running", "--max-load: 'Threads_running' is not STATUS_VARIABLE=NUMBER"),
    ("critical-load=Threads_running=lots", "--critical-load: 'Threads_running=lots' is not STATUS_VARIABLE=NUMBER"),
    ("cloudwatch-max-load=CPUUtilization", "--cloudwatch-max-load: 'CPUUtilization' is not METRIC=NUMBER"),
    ("target-batch-time=5 parsecs", "--target-batch-time: '5 parsecs' is not a duration"),
    ("max-app-latency=fast", "--max-app-latency: 'fast' is not auto, off or a positive duration"),
])
def test_set_refuses_a_value_of_the_wrong_format_before_any_migration_is_looked_up(item, message):
    with pytest.raises(ConfigError) as refused:
        parse_assignments([item])
    assert message in str(refused.value)
    assert parse_assignments(["max-load=Threads_running=30", "cloudwatch-max-load=CPUUtilization=80",
                              "max-app-latency=off", "target-batch-time=0"])


def test_an_unknown_time_zone_is_refused_without_a_schedule_too():
    assert parse_schedule("", "Europe/Berlin") is None
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        parse_schedule("", "Mars/Olympus")
