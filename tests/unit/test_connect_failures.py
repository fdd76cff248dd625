"""A connection failure says what happened, from the kind of the underlying error (host name not found, refused,
timed out, login refused), never the driver's text, which may echo the DSN and its password."""
from __future__ import annotations

import errno
import socket

import pymysql
import pytest

from core import db
from core.db import DatabaseUnreachable, connect, connect_failure
from core.endpoints import MySQLAddress

SECRET = "Pa55-in-the-DSN"
ADDR = MySQLAddress("db.example.internal", 3306, "osc", SECRET)


def failure(cause: BaseException, code: int = 2003) -> pymysql.err.OperationalError:
    """The OperationalError PyMySQL raises for `cause`, its text holding the input as PyMySQL's does."""
    exc = pymysql.err.OperationalError(code, f"Can't connect to MySQL server on 'osc:{SECRET}@db' ({cause})")
    exc.original_exception = cause
    return exc


@pytest.mark.parametrize("cause, words", [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "error 2003: host name not found (DNS)"),
    (socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
     "error 2003: the host name could not be resolved now (DNS did not answer)"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
     "error 2003: connection refused (nothing listens on that port)"),
    (TimeoutError("timed out"), "error 2003: timed out after 10 s"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "error 2003: no route to the host (network unreachable)"),
    (ConnectionResetError(errno.ECONNRESET, "reset"), "error 2003: connection reset by the other side"),
])
def test_each_network_failure_reads_differently(cause, words):
    said = connect_failure(failure(cause), ADDR)
    assert said.startswith(words), said
    assert SECRET not in said and "db.example" not in said


def test_the_three_common_failures_never_read_alike():
    said = {connect_failure(failure(cause), ADDR) for cause in (
        socket.gaierror(socket.EAI_NONAME, "x"), ConnectionRefusedError(errno.ECONNREFUSED, "x"), TimeoutError())}
    assert len(said) == 3


@pytest.mark.parametrize("code, words", [
    (1045, "access denied: wrong user name or password"), (1049, "unknown database"),
    (1130, "this host is not allowed to connect"), (1040, "too many connections"),
])
def test_a_refused_login_says_why(code, words):
    exc = pymysql.err.OperationalError(code, f"Access denied for user 'osc'@'h' (using password: {SECRET})")
    said = connect_failure(exc, ADDR)
    assert said.startswith(f"error {code}: ") and words in said and SECRET not in said


def test_a_refused_port_is_said_so(unused_port):
    addr = MySQLAddress("127.0.0.1", unused_port, "osc", SECRET)
    with pytest.raises(DatabaseUnreachable) as refused:
        connect(addr)
    assert str(refused.value) == (f"cannot connect to MySQL at 127.0.0.1:{unused_port} as 'osc' (error 2003: "
                                  "connection refused (nothing listens on that port))")


@pytest.mark.parametrize("cause, words", [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "host name not found (DNS)"),
    (TimeoutError("timed out"), "timed out after 10 s"),
])
def test_pymysqls_own_wrapping_of_a_dns_failure_and_a_connect_timeout(monkeypatch, cause, words):
    def fail(*args, **kwargs):
        raise cause
    monkeypatch.setattr(pymysql.connections.socket, "create_connection", fail)
    with pytest.raises(DatabaseUnreachable) as failed:
        connect(ADDR)
    assert str(failed.value) == f"cannot connect to MySQL at db.example.internal:3306 as 'osc' (error 2003: {words}" \
        + (" (no answer: a firewall, or a host that is down))" if "timed out" in words else ")")


def test_a_server_that_never_answers_is_a_timeout(monkeypatch):
    monkeypatch.setattr(db, "CONNECT_TIMEOUT_S", 0.3)
    with socket.socket() as silent:   # accepts the TCP connection (the kernel does), never sends a greeting
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        addr = MySQLAddress("127.0.0.1", silent.getsockname()[1], "osc", SECRET, ssl_mode="disabled")
        with pytest.raises(DatabaseUnreachable) as timed_out:
            connect(addr)
    assert "timed out after 0.3 s" in str(timed_out.value) and SECRET not in str(timed_out.value)


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
