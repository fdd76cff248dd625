"""A failed connector's error, told in the operator's terms."""
from connectors.health import binlog_gone, describe_failure
from connectors.rest import ConnectorState

PURGED = ("org.apache.kafka.connect.errors.ConnectException: An exception occurred in the change event producer.\n"
          "Caused by: io.debezium.DebeziumException: The connector is trying to read binlog starting at "
          "GTIDs 0-1-977, but this is no longer available on the server. Reconfigure the connector to use a "
          "snapshot when needed.")


def test_purged_binlog_says_what_happened_and_what_to_do():
    state = ConnectorState("RUNNING", ["FAILED"], PURGED)
    assert binlog_gone(state)
    text = describe_failure("c1", state, "shop.orders")
    assert "binlog position is no longer on the server" in text
    assert "stream-osc abort --table shop.orders" in text and "binlog_expire_logs_seconds" in text


def test_mariadb_refusing_a_purged_gtid_is_recognised():
    trace = ("io.debezium.DebeziumException: Could not find GTID state requested by slave in any binlog files. "
             "Probably the slave state is too old and required binlog files have been purged. Error code: 1236;")
    text = describe_failure("c1", ConnectorState("RUNNING", ["FAILED"], trace), "shop.orders")
    assert "binlog position is no longer on the server" in text


def test_other_failures_show_the_connector_error_and_resume():
    state = ConnectorState("RUNNING", ["FAILED"], "io.debezium.text.ParsingException: DDL statement couldn't be parsed")
    assert not binlog_gone(state)
    text = describe_failure("c1", state, "shop.orders")
    assert text.startswith("connector c1 failed: io.debezium.text.ParsingException")
    assert "stream-osc resume --table shop.orders" in text
