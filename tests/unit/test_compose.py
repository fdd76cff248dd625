"""docker-compose.yml agrees with what connectors/ and stack/ generate: one source of truth."""
from pathlib import Path

import yaml

from connectors.config import WORKER_SETTINGS
from core.endpoints import parse_mysql_dsn
from stack.config import PORT_ENV, StackConfig

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def test_services_present():
    assert {"mysql", "kafka", "connect", "redis", "stream-osc"} <= set(SERVICES)


def test_host_ports_match_the_embedded_stack(monkeypatch):
    for variable in PORT_ENV.values():   # the defaults, not a session's moved ports
        monkeypatch.delenv(variable, raising=False)
    stack = StackConfig()
    published = {name: [p.split(":")[0] for p in svc.get("ports", [])] for name, svc in SERVICES.items()}
    assert str(stack.mysql_port) in published["mysql"]
    assert str(stack.redis_port) in published["redis"]
    assert str(stack.kafka_port) in published["kafka"]
    assert str(stack.connect_port) in published["connect"]


def test_connect_worker_settings_match_connectors_module():
    env = SERVICES["connect"]["environment"]
    for key, value in WORKER_SETTINGS.items():
        assert str(env["CONNECT_" + key.upper().replace(".", "_")]) == value, key


def test_mysql_binlog_settings_are_what_init_checks():
    flags = set(SERVICES["mysql"]["command"])
    assert {"--binlog-format=ROW", "--binlog-row-image=FULL", "--log-bin=mysql-bin",
            "--innodb-autoinc-lock-mode=2"} <= flags


def test_tool_endpoints_point_at_the_services():
    env = SERVICES["stream-osc"]["environment"]
    mysql = parse_mysql_dsn(env["STREAM_OSC_MYSQL_DSN"])
    assert mysql.host == "mysql" and mysql.user == SERVICES["mysql"]["environment"]["MYSQL_USER"]
    assert env["STREAM_OSC_KAFKA_BOOTSTRAP"] == SERVICES["connect"]["environment"]["BOOTSTRAP_SERVERS"]
    assert env["STREAM_OSC_CONNECT_URL"].endswith(":" + SERVICES["connect"]["ports"][0].split(":")[1])
    assert env["STREAM_OSC_REDIS_URL"].startswith("redis://redis:")
