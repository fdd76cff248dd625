"""What every service of the embedded stack declares; stack/services.py starts and stops them."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass

from stack.config import StackConfig
from stack.process import StackError


@dataclass(frozen=True)
class Service:
    """One stack process: how to check, prepare, start and probe it."""

    name: str
    ports: Callable[[StackConfig], list[tuple[int, str]]]
    command: Callable[[StackConfig], list[str]]
    probe: Callable[[StackConfig], bool]
    prepare: Callable[[StackConfig], None] = lambda config: None
    preflight: Callable[[StackConfig], None] = lambda config: None
    stop_timeout: float = 60.0


def require_binary(name: str, package: str) -> str:
    """Absolute path of an executable, or StackError saying how to install it."""
    path = shutil.which(name)
    if not path:
        raise StackError(f"{name} is missing (not on PATH): run `make setup` or `apt-get install {package}`")
    return path

