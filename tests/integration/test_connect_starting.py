"""A Kafka Connect worker that is starting is not a worker without the connector (connectors/rest.py).

For a few seconds after it starts listening, a worker's web server answers every path 404 with a page of its
own, before Connect's REST API is ready. Taken for "no such connector", that answer ended a cleanup's removal
that never happened and left the migration's connector behind (a fault run that restarted Connect at cleanup).
"""
from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import pytest

from connectors.rest import ConnectClient, ConnectUnreachable, connect_client, is_connect_answer
from stack import services

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: it restarts the stack's Kafka Connect

ABSENT = "streamosc-never-created"


def page_404(client: ConnectClient, name: str) -> str | None:
    """The body of the worker's answer to GET /connectors/<name> when that is a 404, else None."""
    request = urllib.request.Request(f"{client.url}/connectors/{name}", headers=client.headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=client.tls):
            return None
    except urllib.error.HTTPError as exc:
        return exc.read().decode(errors="replace") if exc.code == 404 else None
    except (urllib.error.URLError, OSError):
        return None


def test_a_starting_worker_is_never_taken_for_one_without_the_connector(endpoints, stack_config):
    if stack_config is None:
        pytest.skip("restarts the embedded stack's Kafka Connect")
    client = connect_client(endpoints)
    assert services.stop_all(stack_config, ["connect"]) == ["connect"]
    starting = threading.Thread(target=services.up, args=(stack_config, ["connect"]), daemon=True)
    starting.start()
    pages_not_connects = 0
    deadline = time.monotonic() + 120
    try:
        while True:
            assert time.monotonic() < deadline, "Connect's own answer never came"
            try:
                absent = not client.exists(ABSENT)
            except ConnectUnreachable:
                absent = False
            page = page_404(client, ABSENT)   # asked after: a worker's answers only move on to Connect's own
            if absent:
                assert page is not None and is_connect_answer(page), f"taken for absent on the page {page!r}"
                break
            pages_not_connects += page is not None and not is_connect_answer(page)
            time.sleep(0.02)
    finally:
        starting.join(120)
    assert pages_not_connects > 0, "the starting worker's own 404 page was never seen: the window went untested"
