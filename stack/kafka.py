"""Kafka broker of the embedded stack: one KRaft node (broker and controller), replication factor 1."""
from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from stack.base import Service
from stack.config import StackConfig
from stack.java import java_binary, java_command, render_log4j2, require_jars
from stack.process import StackError, tail

NAME = "kafka"


def home(config: StackConfig) -> Path:
    return config.run_dir / NAME


def data_dir(config: StackConfig) -> Path:
    return home(config) / "data"


def properties_file(config: StackConfig) -> Path:
    return home(config) / "server.properties"


def log4j2_file(config: StackConfig) -> Path:
    return home(config) / "log4j2.properties"


def render_properties(config: StackConfig) -> str:
    """server.properties of a single-node KRaft cluster."""
    h = config.host
    return f"""\
# written by stream-osc (stack/kafka.py); rewritten on every start
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{h}:{config.controller_port}
listeners=PLAINTEXT://{h}:{config.kafka_port},RELAY://{h}:{config.kafka_relay_port},CONTROLLER://{h}:{config.controller_port},SASL_PLAINTEXT://{h}:{config.kafka_sasl_port}
advertised.listeners=PLAINTEXT://{h}:{config.kafka_port},RELAY://{h}:{config.kafka_relay_advertised_port},SASL_PLAINTEXT://{h}:{config.kafka_sasl_port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,RELAY:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
# a listener that requires a SASL login (PLAIN), for clients configured as against a secured cluster
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config={sasl_jaas(config)}
log.dirs={data_dir(config)}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def sasl_jaas(config: StackConfig) -> str:
    """The SASL listener's server-side JAAS line: its one user and password."""
    return (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'user_{config.kafka_sasl_user}="{config.kafka_sasl_password}";')


def new_cluster_id() -> str:
    """A random cluster id in Kafka's format (22 characters of URL-safe base64).

    Like Kafka's own Uuid.randomUuid, never one starting with "-": the storage tool's argument parser
    would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def preflight(config: StackConfig) -> None:
    java_binary()
    require_jars(config)


def prepare(config: StackConfig) -> None:
    """Write server.properties and log4j2 config; format the storage once (random cluster id)."""
    home(config).mkdir(parents=True, exist_ok=True)
    properties_file(config).write_text(render_properties(config))
    log4j2_file(config).write_text(render_log4j2())
    if (data_dir(config) / "meta.properties").exists():
        return
    log = config.log_file(NAME)
    with open(log, "ab") as out:
        out.write(b"\n==> formatting the storage (kafka.tools.StorageTool format)\n")
        out.flush()
        cmd = java_command(config, "kafka.tools.StorageTool", log4j2_file(config),
                           "format", "-t", new_cluster_id(), "-c", str(properties_file(config)), heap="256m")
        result = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise StackError(f"kafka: storage format failed (exit {result.returncode}); see {log}:\n{tail(log)}")


def command(config: StackConfig) -> list[str]:
    return java_command(config, "kafka.Kafka", log4j2_file(config), str(properties_file(config)))


def probe(config: StackConfig) -> bool:
    """Ready when the broker answers a metadata request (AdminClient list_topics)."""
    admin = AdminClient({"bootstrap.servers": f"{config.host}:{config.kafka_port}",
                         "socket.connection.setup.timeout.ms": 1000, "log_level": 0,
                         "logger": _quiet})
    try:
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def _quiet(*_args: object) -> None:
    """Swallow librdkafka's connection-refused chatter while the broker starts."""


SERVICE = Service(
    name=NAME,
    ports=lambda config: [(config.kafka_port, NAME), (config.kafka_relay_port, "kafka relay listener"),
                          (config.controller_port, "kafka controller"),
                          (config.kafka_sasl_port, "kafka SASL listener")],
    command=command,
    probe=probe,
    prepare=prepare,
    preflight=preflight,
)
