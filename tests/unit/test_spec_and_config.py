"""Spec validation, endpoint parsing (no credential leaks), chunk planning, connector config."""
import re

import pytest

from connectors.config import connector_config, data_topic
from core.endpoints import ConfigError, Endpoints, KafkaAddress, parse_mysql_dsn
from core.spec import MigrationSpec
from streams.topics import TopicNames


def test_spec_from_table_arg_and_errors():
    spec = MigrationSpec.from_table_arg("shop.orders", "ADD COLUMN c INT", copy_workers=2, batch_size=None)
    assert (spec.database, spec.table, spec.copy_workers, spec.batch_size) == ("shop", "orders", 2, 5000)
    assert (spec.new_table, spec.old_table) == ("orders_osc_new", "orders_osc_old")
    with pytest.raises(ConfigError, match="DB.TABLE"):
        MigrationSpec.from_table_arg("orders", "ADD COLUMN c INT")
    with pytest.raises(ConfigError, match="empty"):
        MigrationSpec.from_table_arg("a.b", "  ")
    with pytest.raises(ConfigError, match="copy-workers"):
        MigrationSpec.from_table_arg("a.b", "ADD COLUMN c INT", copy_workers=0)
    with pytest.raises(ConfigError, match="ends with a space"):
        MigrationSpec.from_table_arg("a.b ", "ADD COLUMN c INT")


ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "http://c:8083", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}


def test_endpoints_have_no_built_in_addresses():
    with pytest.raises(ConfigError, match="no address for: STREAM_OSC_KAFKA_BOOTSTRAP"):
        Endpoints.load(environ={"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/"})


def test_dsn_parsing_never_shows_password():
    addr = parse_mysql_dsn("mysql://app:s%40cret@db.example:3307/")
    assert (addr.host, addr.port, addr.user, addr.password) == ("db.example", 3307, "app", "s@cret")
    assert "s@cret" not in repr(addr)
    endpoints = Endpoints.load(environ={"STREAM_OSC_MYSQL_DSN": "mysql://app:hunter2@h:1/"}, defaults=ADDRESSES)
    assert "hunter2" not in repr(endpoints)
    with pytest.raises(ConfigError) as err:
        parse_mysql_dsn("postgres://app:hunter2@h/")
    assert "hunter2" not in str(err.value)


def test_endpoints_from_config_file_then_env(tmp_path):
    path = tmp_path / "osc.toml"
    path.write_text('[endpoints]\nkafka_bootstrap = "k:9092"\nredis_url = "redis://r:6379/0"\n')
    endpoints = Endpoints.load(path, environ={"STREAM_OSC_REDIS_URL": "redis://env:1/0"}, defaults=ADDRESSES)
    assert endpoints.kafka_bootstrap == "k:9092"
    assert endpoints.redis_url == "redis://env:1/0"
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[endpoints]\nkafka = "x"\n')
    with pytest.raises(ConfigError, match="unknown keys"):
        Endpoints.load(wrong, environ={})


def test_connector_config_captures_exactly_the_table_and_routes_it_with_the_fence():
    names = TopicNames("streamosc_t_ab", "shop", "orders")
    config = connector_config("mariadb", parse_mysql_dsn("mysql://u:pw@h:3306/"), "${file:/s/c.properties:p}",
                              KafkaAddress("k:9092"), names, ("stream_osc", "fence_4"),
                              ("stream_osc", "capture_heartbeat_4"))
    assert config["connector.class"] == "io.debezium.connector.mariadb.MariaDbConnector"
    assert config["snapshot.mode"] == "no_data" and config["snapshot.locking.mode"] == "none"
    assert config["table.include.list"] == \
        r"(?-i)shop\.orders,(?-i)stream_osc\.fence_4,(?-i)stream_osc\.capture_heartbeat_4"
    assert config["transforms.route.topic.regex"] == r"streamosc_t_ab\..*"
    assert config["transforms.route.topic.replacement"] == "streamosc_t_ab.shop.orders"
    assert config["database.password"] == "${file:/s/c.properties:p}"
    assert "pw" not in config.values()
    assert connector_config("mysql", parse_mysql_dsn("mysql://u:pw@h/"), "${env:P}", KafkaAddress("k"), names,
                            ("m", "f"), ("m", "h"))["connector.class"] \
        == "io.debezium.connector.mysql.MySqlConnector"


def python_pattern(java: str) -> re.Pattern[str]:
    """A Java pattern as connectors/config.py writes them (literals and \\x{hex}), for Python's re."""
    return re.compile(re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: re.escape(chr(int(m[1], 16))), java))


def route(config: dict[str, str], topic: str) -> str:
    """Where the connector's transforms send a record of Debezium's `topic`, as Connect applies them in order."""
    heartbeat = python_pattern(config["transforms.heartbeat.regex"])
    if heartbeat.fullmatch(topic):
        topic = config["transforms.heartbeat.replacement"]
    kept_out = bool(python_pattern(config["predicates.capture_heartbeat.pattern"]).fullmatch(topic))
    assert config["transforms.route.negate"] == "true" and config["transforms.route.predicate"] == "capture_heartbeat"
    if not kept_out and re.fullmatch(config["transforms.route.topic.regex"], topic):
        topic = config["transforms.route.topic.replacement"]
    return topic


@pytest.mark.parametrize("metadata_schema", ["stream_osc", "osc meta.ü-2"])
def test_capture_heartbeats_go_to_their_own_topic_and_every_captured_change_to_the_change_topic(metadata_schema):
    names = TopicNames("streamosc_t_ab", "shop", "capture_heartbeat_4")   # a source named like the heartbeat table
    config = connector_config("mariadb", parse_mysql_dsn("mysql://u:pw@h:3306/"), "${env:P}", KafkaAddress("k"),
                              names, (metadata_schema, "fence_4"), (metadata_schema, "capture_heartbeat_4"))
    assert route(config, data_topic(names.prefix, metadata_schema, "capture_heartbeat_4")) == \
        names.capture_heartbeat == "streamosc_t_ab.capture-heartbeat"
    assert route(config, data_topic(names.prefix, metadata_schema, "fence_4")) == names.changes
    assert route(config, data_topic(names.prefix, "shop", "capture_heartbeat_4")) == names.changes
    assert route(config, "__debezium-heartbeat.streamosc_t_ab") == "__debezium-heartbeat.streamosc_t_ab"
    assert names.capture_heartbeat in names.all()


def test_debezium_topic_names_keep_only_kafkas_alphabet():
    assert data_topic("p", "osc meta.ü", "t-1") == "p.osc_meta._.t-1"


def test_a_cutover_window_that_would_stall_coordinator_heartbeats_past_their_lease_is_refused():
    spec = MigrationSpec("d", "t", "ADD x INT", cutover_window_s=10.0, lock_tries=20, lock_wait_s=0.5)
    assert spec.validate() is spec   # tries are apart: between them no lock request holds heartbeats back
    with pytest.raises(ConfigError, match="heartbeats would stall"):
        MigrationSpec("d", "t", "ADD x INT", cutover_window_s=10.0, lock_wait_s=1.0).validate()
