"""MySQL TLS options of the DSN and the connector's own view of the database (address, TLS, truststore)."""
from __future__ import annotations

import ssl

import pytest

from connectors.config import DatabaseAccess, connector_config
from core.db import tls_context
from core.endpoints import ConfigError, Endpoints, KafkaAddress, parse_mysql_dsn
from migration.init_stage import connector_access
from streams.topics import TopicNames

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@127.0.0.1:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}
NAMES = TopicNames("p", "shop", "orders")


@pytest.fixture
def ca(tmp_path):
    path = tmp_path / "ca.pem"
    path.write_text("not read here")
    return str(path)


def test_an_ssl_ca_alone_means_full_verification(ca):
    addr = parse_mysql_dsn(f"mysql://u:p?w@db:3307/?ssl-ca={ca}")
    assert (addr.password, addr.host, addr.port, addr.ssl_mode, addr.ssl_ca) == ("p?w", "db", 3307,
                                                                                  "verify-identity", ca)
    assert parse_mysql_dsn("mysql://u:p@db/").ssl_mode == "preferred"


def test_an_at_sign_in_an_option_path_stays_in_the_option(tmp_path):
    ca = tmp_path / "team@ops" / "ca.pem"
    ca.parent.mkdir()
    ca.write_text("not read here")
    addr = parse_mysql_dsn(f"mysql://u:p@ss@db:3307/?ssl-mode=required&ssl-ca={ca}")
    assert (addr.user, addr.password, addr.host, addr.port, addr.ssl_mode, addr.ssl_ca) == \
        ("u", "p@ss", "db", 3307, "required", str(ca))


def test_required_encrypts_without_checking_the_certificate():
    context = tls_context(parse_mysql_dsn("mysql://u:p@db/?ssl-mode=required"))
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    assert tls_context(parse_mysql_dsn("mysql://u:p@db/")) is None   # PyMySQL's own: TLS if offered, unchecked
    verified = tls_context(parse_mysql_dsn("mysql://u:p@db/?ssl-mode=verify-identity"))   # the system's CAs
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname


@pytest.mark.parametrize("options, message", [
    ("ssl-mode=disabled&ssl-ca=/x", "ssl-mode=disabled with TLS files given"),
    ("ssl-mode=sometimes", "ssl-mode must be one of"),
    ("sslca=/x", "unknown option sslca"),
    ("ssl-mode=required&ssl-cert=/x", "ssl-cert and ssl-key go together"),
    ("ssl-ca=/nowhere/ca.pem", "ssl-ca /nowhere/ca.pem is not a readable file"),
])
def test_bad_tls_options_are_refused_without_echoing_the_password(options, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_mysql_dsn(f"mysql://u:S3cret-pw@db/?{options}")
    assert "S3cret-pw" not in str(err.value)


@pytest.mark.parametrize("flavor, mode, expected", [("mariadb", "verify-identity", "verify-full"),
                                                    ("mariadb", "required", "trust"),
                                                    ("mariadb", "preferred", "disable"),
                                                    ("mysql", "verify-ca", "verify_ca"),
                                                    ("mysql", "preferred", "preferred")])
def test_the_connector_gets_the_dsn_tls_mode_in_its_own_words(flavor, mode, expected, ca):
    ca_option = f"&ssl-ca={ca}" if mode == "verify-ca" else ""
    mysql = parse_mysql_dsn(f"mysql://u:p@db/?ssl-mode={mode}{ca_option}")
    config = connector_config(flavor, mysql, "${env:P}", KafkaAddress("k"), NAMES, ("m", "f"), ("m", "h"))
    assert config["database.ssl.mode"] == expected


def test_the_connector_reaches_the_database_at_its_own_address_with_its_truststore():
    endpoints = Endpoints.load(environ={"STREAM_OSC_CONNECTOR_DATABASE_HOST": "mariadb.internal:3310",
                                        "STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE": "/etc/connect/db-trust.p12",
                                        "STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE_PASSWORD": "${env:TRUST_PW}"},
                               defaults=ADDRESSES)
    config = connector_config("mariadb", endpoints.mysql, "${env:P}", endpoints.kafka, NAMES, ("m", "f"), ("m", "h"),
                              access=connector_access(endpoints))
    assert (config["database.hostname"], config["database.port"]) == ("mariadb.internal", "3310")
    assert config["database.ssl.truststore"] == "/etc/connect/db-trust.p12"
    assert config["database.ssl.truststore.password"] == "${env:TRUST_PW}"
    assert endpoints.mysql.host == "127.0.0.1"   # the tool's own sessions are unchanged


def test_the_connector_address_defaults_to_the_dsn_and_takes_the_dsn_port():
    assert Endpoints.load(environ={}, defaults=ADDRESSES).connector_database == ("127.0.0.1", 3306)
    assert Endpoints.load(environ={"STREAM_OSC_CONNECTOR_DATABASE_HOST": "db"},
                          defaults=ADDRESSES).connector_database == ("db", 3306)
    config = connector_config("mariadb", parse_mysql_dsn("mysql://u:p@h:3307/"), "${env:P}", KafkaAddress("k"),
                              NAMES, ("m", "f"), ("m", "h"), access=DatabaseAccess("host.docker.internal", 3307))
    assert config["database.hostname"] == "host.docker.internal"


@pytest.mark.parametrize("variable, value, message", [
    ("STREAM_OSC_CONNECTOR_DATABASE_HOST", "db:port", "must be host or host:port"),
    ("STREAM_OSC_CONNECTOR_SSL_TRUSTSTORE_PASSWORD", "changeit-plain", "config provider reference")])
def test_bad_connector_database_settings_are_refused(variable, value, message):
    with pytest.raises(ConfigError, match=message) as err:
        Endpoints.load(environ={variable: value}, defaults=ADDRESSES)
    assert "changeit-plain" not in str(err.value)
