"""Only Connect's own error body says a connector is absent (connectors/rest.py, is_connect_answer)."""
from __future__ import annotations

import pytest

from connectors.rest import is_connect_answer


def test_connects_own_not_found_is_its_answer():
    assert is_connect_answer('{"error_code":404,"message":"Connector streamosc-x not found"}')


@pytest.mark.parametrize("page", [
    '{\n"message":"Not Found",\n"url":"http://127.0.0.1:18083/connectors/x",\n"status":"404"\n}',   # Jetty, starting
    "<html><body><h2>HTTP ERROR 404 Not Found</h2></body></html>",                                  # a proxy's page
    "",
    "[]",
])
def test_a_page_not_connects_is_not_taken_for_its_answer(page):
    assert not is_connect_answer(page)
