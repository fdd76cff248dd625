"""Waiting for a condition in a test, instead of sleeping for a time that may be too short or too long."""
from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition",
             every_s: float = 0.1) -> object:
    """Poll every `every_s` until `condition()` is truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
