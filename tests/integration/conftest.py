"""Fixtures of the integration tests."""
from __future__ import annotations

import pytest

from core.db import query
from tests.integration.helpers import db_conn


@pytest.fixture
def conn(endpoints, request):
    """A connection to the server, with the test module's own schema (its `DB`) created."""
    connection = db_conn(endpoints)
    query(connection, f"CREATE DATABASE IF NOT EXISTS {request.module.DB}")
    yield connection
    connection.close()
