"""Kafka Connect REST credentials: from the environment or a file, never in the URL, a repr or an error."""
from __future__ import annotations

import pytest

from connectors.rest import connect_client
from core.endpoints import ConfigError, Endpoints

ADDRESSES = {"STREAM_OSC_MYSQL_DSN": "mysql://u:p@db:3306/", "STREAM_OSC_KAFKA_BOOTSTRAP": "k:9092",
             "STREAM_OSC_CONNECT_URL": "https://connect.internal:8443", "STREAM_OSC_REDIS_URL": "redis://r:6379/0"}
SECRET = "c0nnect:S3cret"


def test_the_password_file_wins_and_no_repr_shows_the_password(tmp_path):
    path = tmp_path / "pw"
    path.write_text(SECRET + "\nignored\n")
    endpoints = Endpoints.load(environ={"STREAM_OSC_CONNECT_USER": "admin", "STREAM_OSC_CONNECT_PASSWORD": "other",
                                        "STREAM_OSC_CONNECT_PASSWORD_FILE": str(path)}, defaults=ADDRESSES)
    assert (endpoints.connect.user, endpoints.connect.password) == ("admin", SECRET)
    assert SECRET not in repr(endpoints.connect) and SECRET not in repr(endpoints)
    client = connect_client(endpoints)
    assert client.headers["Authorization"].startswith("Basic ") and SECRET not in client.url


@pytest.mark.parametrize("environ, message", [
    ({"STREAM_OSC_CONNECT_URL": f"https://admin:{SECRET}@connect:8443"}, "must not hold credentials"),
    ({"STREAM_OSC_CONNECT_USER": "admin"}, "needs both STREAM_OSC_CONNECT_USER and a password"),
    ({"STREAM_OSC_CONNECT_PASSWORD": SECRET}, "needs both"),
    ({"STREAM_OSC_CONNECT_CA": "/nowhere/ca.pem"}, "STREAM_OSC_CONNECT_CA /nowhere/ca.pem is not a readable file"),
    ({"STREAM_OSC_CONNECT_USER": "a", "STREAM_OSC_CONNECT_PASSWORD_FILE": "/nowhere/pw"}, "cannot read"),
])
def test_bad_connect_credentials_are_refused_without_echoing_them(environ, message):
    with pytest.raises(ConfigError, match=message) as err:
        Endpoints.load(environ=environ, defaults=ADDRESSES)
    assert SECRET not in str(err.value)
