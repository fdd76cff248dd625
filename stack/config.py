"""Where the embedded local stack lives on disk and which ports it listens on."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from core.endpoints import Endpoints
from stack.process import running_pid

REPO_ROOT = Path(__file__).resolve().parent.parent

KAFKA_VERSION = "4.1.1"
DEBEZIUM_VERSION = "3.5.0.Final"


# StackConfig field -> the variable that moves that port
PORT_ENV: dict[str, str] = {
    "mysql_port": "STREAM_OSC_STACK_MYSQL_PORT",
    "redis_port": "STREAM_OSC_STACK_REDIS_PORT",
    "kafka_port": "STREAM_OSC_STACK_KAFKA_PORT",
    "controller_port": "STREAM_OSC_STACK_CONTROLLER_PORT",
    "connect_port": "STREAM_OSC_STACK_CONNECT_PORT",
    "kafka_sasl_port": "STREAM_OSC_STACK_KAFKA_SASL_PORT",
    "kafka_relay_port": "STREAM_OSC_STACK_KAFKA_RELAY_PORT",
    "kafka_relay_advertised_port": "STREAM_OSC_STACK_KAFKA_RELAY_ADVERTISED_PORT",
    "target_mysql_port": "STREAM_OSC_STACK_TARGET_MYSQL_PORT",
}

# The second MariaDB server (`stack up --target-server`): the target of migrations to another server
TARGET_MYSQL = "mariadb-target"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"STREAM_OSC_STACK_{name}_PORT", default))


@dataclass(frozen=True)
class StackConfig:
    """Paths and ports of the embedded stack; ports can be moved with STREAM_OSC_STACK_<NAME>_PORT."""

    root: Path = REPO_ROOT
    mysql_port: int = field(default_factory=lambda: _port("MYSQL", 13306))
    redis_port: int = field(default_factory=lambda: _port("REDIS", 16379))
    kafka_port: int = field(default_factory=lambda: _port("KAFKA", 19092))
    controller_port: int = field(default_factory=lambda: _port("CONTROLLER", 19093))
    connect_port: int = field(default_factory=lambda: _port("CONNECT", 18083))
    kafka_sasl_port: int = field(default_factory=lambda: _port("KAFKA_SASL", 19094))   # SASL_PLAINTEXT, PLAIN
    # A second broker listener whose advertised address is another port: a client bootstrapped there
    # learns that port from metadata, so whatever listens on it (a TCP relay) carries all its traffic.
    kafka_relay_port: int = field(default_factory=lambda: _port("KAFKA_RELAY", 19096))
    kafka_relay_advertised_port: int = field(default_factory=lambda: _port("KAFKA_RELAY_ADVERTISED", 19097))
    target_mysql_port: int = field(default_factory=lambda: _port("TARGET_MYSQL", 13307))
    host: str = "127.0.0.1"
    mysql_user: str = "osc"
    mysql_password: str = "osc-local"
    target_mysql_user: str = "osc_target"        # another account than the source's, with only what the tool needs
    target_mysql_password: str = "osc-target-local"
    kafka_sasl_user: str = "osc-client"          # the one login of the SASL listener (a local test secret)
    kafka_sasl_password: str = "osc-sasl-local"
    java_heap: str = "1g"
    ready_timeout: float = field(default_factory=lambda: float(os.environ.get("STREAM_OSC_STACK_READY_TIMEOUT", 90)))
    connect_group: str = "stream-osc-connect"

    @property
    def cache_dir(self) -> Path:
        """Downloaded jars (git-ignored)."""
        return Path(os.environ.get("STREAM_OSC_CACHE_DIR", self.root / ".cache"))

    @property
    def run_dir(self) -> Path:
        """Data folders, logs and PID files of running services (git-ignored)."""
        return Path(os.environ.get("STREAM_OSC_RUN_DIR", self.root / ".run"))

    @property
    def jars_dir(self) -> Path:
        """Root of the jar folders that `stream-osc stack install` fills."""
        return self.cache_dir / "jars"

    @property
    def kafka_jars_dir(self) -> Path:
        """Classpath of the broker and the Connect worker."""
        return self.jars_dir / "kafka"

    @property
    def plugin_dir(self) -> Path:
        """Kafka Connect `plugin.path` (holds debezium-connector-mariadb/); STREAM_OSC_PLUGIN_DIR moves it."""
        return Path(os.environ.get("STREAM_OSC_PLUGIN_DIR", self.jars_dir / "plugins"))

    @property
    def connect_secrets_dir(self) -> Path:
        """Where the tool writes connector passwords for the Connect worker's FileConfigProvider (mode 0700)."""
        return self.run_dir / "connect" / "secrets"

    def pid_file(self, service: str) -> Path:
        """PID file of one service."""
        return self.run_dir / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        """Log file (stdout and stderr) of one service."""
        return self.run_dir / f"{service}.log"

    def endpoints(self, config_file: str | Path | None = None) -> Endpoints:
        """The endpoints a command uses: this stack's addresses unless a config file or STREAM_OSC_*
        variables say otherwise.

        The stack's secrets folder is the default only while the Connect worker is this stack's: another
        worker cannot read it, and is told how to find the password by its operator (docs/secrets.md).
        """
        loaded = Endpoints.load(config_file, defaults=self.env())
        if (loaded.connect_url == self.env()["STREAM_OSC_CONNECT_URL"] and not loaded.connector_password
                and not loaded.connector_secrets_dir):
            loaded = dataclasses.replace(loaded, connector_secrets_dir=str(self.connect_secrets_dir))
        return loaded

    def env(self) -> dict[str, str]:
        """The endpoint variables every stream-osc command reads, for this stack.

        STREAM_OSC_TARGET_DSN only while the target server runs (its PID file names a live process): a
        migration to another server then finds it, and otherwise fails with "no target server" rather
        than with a connection refused by a port nobody listens on.
        """
        env = {
            "STREAM_OSC_MYSQL_DSN": f"mysql://{self.mysql_user}:{self.mysql_password}@{self.host}:{self.mysql_port}/",
            "STREAM_OSC_KAFKA_BOOTSTRAP": f"{self.host}:{self.kafka_port}",
            "STREAM_OSC_CONNECT_URL": f"http://{self.host}:{self.connect_port}",
            "STREAM_OSC_REDIS_URL": f"redis://{self.host}:{self.redis_port}/0",
        }
        if running_pid(self.pid_file(TARGET_MYSQL)):
            env["STREAM_OSC_TARGET_DSN"] = (f"mysql://{self.target_mysql_user}:{self.target_mysql_password}"
                                            f"@{self.host}:{self.target_mysql_port}/")
        return env
