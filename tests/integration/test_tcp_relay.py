"""The relay the fault tests cut really carries a client's whole link, and a cut really cuts it."""
from __future__ import annotations

import dataclasses

import pymysql
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from core.db import connect, query
from stack.process import free_ports
from tests.integration.tcp_relay import TcpRelay, refuses

pytestmark = pytest.mark.integration


def quiet(*_args: object) -> None:
    """Swallow librdkafka's connection chatter while the relay is cut."""


def test_kafka_metadata_sends_a_client_on_the_relay_listener_back_to_the_relay(stack_config):
    if stack_config is None:
        pytest.skip("the relay listener is the embedded broker's")
    relay = TcpRelay(stack_config.kafka_relay_advertised_port, (stack_config.host, stack_config.kafka_relay_port))
    relay.restore()
    try:
        admin = AdminClient({"bootstrap.servers": f"{stack_config.host}:{relay.port}",
                             "socket.connection.setup.timeout.ms": 1000, "logger": quiet})
        brokers = admin.list_topics(timeout=20).brokers.values()
        assert [(b.host, b.port) for b in brokers] == [(stack_config.host, relay.port)]   # never the broker's own
        assert relay.cut() > 0 and refuses(relay.port)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        relay.restore()
        assert admin.list_topics(timeout=20).brokers
    finally:
        relay.cut()


def test_a_cut_ends_database_sessions_and_refuses_new_ones(endpoints):
    addr = endpoints.mysql
    relay = TcpRelay(free_ports(1)[0], (addr.host, addr.port))
    through_relay = dataclasses.replace(addr, port=relay.port)
    relay.restore()
    try:
        session = connect(through_relay)
        assert query(session, "SELECT 1") == [(1,)]
        assert relay.cut() == 1 and refuses(relay.port)
        with pytest.raises(pymysql.err.OperationalError):
            query(session, "SELECT 1")
        relay.restore()
        assert query(connect(through_relay), "SELECT 1") == [(1,)]
    finally:
        relay.cut()
