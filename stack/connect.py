"""Kafka Connect of the embedded stack: one distributed worker with the Debezium MariaDB connector."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from connectors.config import CONNECTOR_CLASSES, WORKER_SETTINGS
from stack.base import Service
from stack.config import StackConfig
from stack.java import java_binary, java_command, render_log4j2, require_jars
from stack.process import StackError, tail

NAME = "connect"
MARIADB_CONNECTOR = CONNECTOR_CLASSES["mariadb"]


def home(config: StackConfig) -> Path:
    return config.run_dir / NAME


def properties_file(config: StackConfig) -> Path:
    return home(config) / "worker.properties"


def log4j2_file(config: StackConfig) -> Path:
    return home(config) / "log4j2.properties"


def url(config: StackConfig) -> str:
    return f"http://{config.host}:{config.connect_port}"


def render_properties(config: StackConfig) -> str:
    """worker.properties: the shared WORKER_SETTINGS (JSON without schemas, config providers, offset flush),
    internal topics with replication factor 1, and the file provider limited to the secrets folder."""
    group = config.connect_group
    shared = "".join(f"{key}={value}\n" for key, value in WORKER_SETTINGS.items())
    return f"""\
# written by stream-osc (stack/connect.py); rewritten on every start
bootstrap.servers={config.host}:{config.kafka_port}
group.id={group}
{shared}config.providers.file.param.allowed.paths={config.connect_secrets_dir}
config.providers.env.param.allowlist.pattern=STREAM_OSC_CONNECTOR_SECRET_.*
config.storage.topic={group}-configs
offset.storage.topic={group}-offsets
status.storage.topic={group}-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
listeners=http://{config.host}:{config.connect_port}
rest.advertised.host.name={config.host}
rest.advertised.port={config.connect_port}
plugin.path={config.plugin_dir}
plugin.discovery=service_load
"""


def preflight(config: StackConfig) -> None:
    java_binary()
    require_jars(config)


def prepare(config: StackConfig) -> None:
    home(config).mkdir(parents=True, exist_ok=True)
    config.connect_secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    config.connect_secrets_dir.chmod(0o700)
    properties_file(config).write_text(render_properties(config))
    log4j2_file(config).write_text(render_log4j2())


def command(config: StackConfig) -> list[str]:
    return java_command(config, "org.apache.kafka.connect.cli.ConnectDistributed", log4j2_file(config),
                        str(properties_file(config)))


def _get(config: StackConfig, path: str) -> object | None:
    try:
        with urllib.request.urlopen(url(config) + path, timeout=3) as resp:
            return json.load(resp) if resp.status == 200 else None
    except (OSError, ValueError, urllib.error.HTTPError):
        return None


def probe(config: StackConfig) -> bool:
    """Ready when REST answers GET /, GET /health says the worker finished start-up (joined its group),
    and GET /connector-plugins lists the Debezium MariaDB connector.

    Plugins are scanned once, before the REST server starts: a worker whose plugin list answers
    without the connector will never have it, so that fails at once instead of at the timeout.
    """
    if _get(config, "/") is None:
        return False
    plugins = _get(config, "/connector-plugins")
    if plugins is None:
        return False
    if any(p.get("class") == MARIADB_CONNECTOR for p in plugins if isinstance(p, dict)):
        health = _get(config, "/health")
        return isinstance(health, dict) and health.get("status") == "healthy"
    log = config.log_file(NAME)
    raise StackError(f"connect: the worker runs but does not list {MARIADB_CONNECTOR} "
                     f"(plugin.path={config.plugin_dir}; run `stream-osc stack install`); see {log}:\n{tail(log)}")


SERVICE = Service(
    name=NAME,
    ports=lambda config: [(config.connect_port, NAME)],
    command=command,
    probe=probe,
    prepare=prepare,
    preflight=preflight,
)
