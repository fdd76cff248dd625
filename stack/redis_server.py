"""Redis of the embedded stack: loopback only, no persistence, runs in the foreground under our PID file."""
from __future__ import annotations

import redis

from stack.base import Service, require_binary
from stack.config import StackConfig

NAME = "redis"


def preflight(config: StackConfig) -> None:
    require_binary("redis-server", "redis-server")


def prepare(config: StackConfig) -> None:
    (config.run_dir / NAME).mkdir(parents=True, exist_ok=True)


def command(config: StackConfig) -> list[str]:
    return [require_binary("redis-server", "redis-server"),
            "--port", str(config.redis_port), "--bind", config.host,
            "--dir", str(config.run_dir / NAME), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", ""]


def probe(config: StackConfig) -> bool:
    """Ready when PING answers PONG."""
    client = redis.Redis(host=config.host, port=config.redis_port, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


SERVICE = Service(
    name=NAME,
    ports=lambda config: [(config.redis_port, NAME)],
    command=command,
    probe=probe,
    prepare=prepare,
    preflight=preflight,
)
