"""The tool's database sessions use TLS as the DSN asks: a user that requires it is served with the CA
option, and refused clearly without it or with a CA that did not sign the server's certificate."""
from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import quote

import pytest

from core.db import DatabaseUnreachable, connect, query
from core.endpoints import parse_mysql_dsn
from stack.tls import ca_file

pytestmark = pytest.mark.integration

DB = "mysql_tls"
USER = "osc_tls_test"
PASSWORD = "tls-Only?pw"


@pytest.fixture
def tls_user(stack_config, conn):
    if stack_config is None:
        pytest.skip("uses the embedded MariaDB's certificate")
    query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")
    query(conn, f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s REQUIRE SSL", (PASSWORD,))
    query(conn, f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%'")
    yield f"mysql://{USER}:{quote(PASSWORD, safe='')}@{stack_config.host}:{stack_config.mysql_port}/"
    query(conn, f"DROP USER IF EXISTS '{USER}'@'%'")


def cipher(dsn: str) -> str:
    conn = connect(parse_mysql_dsn(dsn))
    try:
        return query(conn, "SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1]
    finally:
        conn.close()


def test_a_user_that_requires_tls_is_served_with_the_ca_and_refused_without(stack_config, tls_user, tmp_path):
    ca = ca_file(stack_config)
    assert cipher(f"{tls_user}?ssl-ca={ca}")                       # verify-identity: CA and host name checked
    assert cipher(f"{tls_user}?ssl-mode=verify-ca&ssl-ca={ca}")
    with pytest.raises(DatabaseUnreachable) as plain:
        connect(parse_mysql_dsn(f"{tls_user}?ssl-mode=disabled"))
    assert "error 1045: access denied" in str(plain.value) and "set ssl-mode" in str(plain.value)
    with pytest.raises(DatabaseUnreachable) as no_ca:   # verified against the system's CAs only
        connect(parse_mysql_dsn(f"{tls_user}?ssl-mode=verify-identity"))
    assert "TLS certificate was not accepted: not signed by ssl-ca" in str(no_ca.value)
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(tmp_path / "other-key.pem"), "-out", str(other_ca)], check=True, capture_output=True)
    with pytest.raises(DatabaseUnreachable) as untrusted:
        connect(parse_mysql_dsn(f"{tls_user}?ssl-ca={other_ca}"))
    assert "TLS certificate was not accepted: not signed by ssl-ca" in str(untrusted.value)
    for error in (plain.value, no_ca.value, untrusted.value):
        assert PASSWORD not in str(error) and quote(PASSWORD, safe="") not in str(error)


def test_the_cli_runs_over_tls_and_refuses_in_one_line_without_it(stack_config, tls_user, conn):
    query(conn, f"CREATE TABLE IF NOT EXISTS {DB}.items (id INT PRIMARY KEY)")
    args = [sys.executable, "-m", "cli.main", "migrate", "--table", f"{DB}.items", "--alter", "ADD COLUMN x INT",
            "--dry-run"]

    def run(dsn: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                              env={**os.environ, "STREAM_OSC_MYSQL_DSN": dsn})
    served = run(f"{tls_user}?ssl-ca={ca_file(stack_config)}")
    assert served.returncode == 0, served.stderr
    refused = run(f"{tls_user}?ssl-mode=verify-identity")   # without the CA: the system's CAs do not vouch
    assert refused.returncode == 2
    assert [line for line in refused.stderr.splitlines() if "error" in line.lower() or "Traceback" in line] == [
        f"stream-osc: error: cannot connect to MySQL at {stack_config.host}:{stack_config.mysql_port} as "
        f"'{USER}' (error 2003: the server's TLS certificate was not accepted: not signed by ssl-ca, or not "
        "issued for this host name)"]
    assert PASSWORD not in refused.stdout + refused.stderr


def test_a_plain_dsn_is_encrypted_when_offered_and_disabled_means_clear_text(endpoints):
    assert endpoints.mysql.ssl_mode == "preferred"
    assert cipher(endpoints.mysql_dsn)
    assert cipher(f"{endpoints.mysql_dsn}?ssl-mode=disabled") == ""


def test_sessions_of_one_dsn_share_one_tls_context_until_its_files_change(stack_config, tls_user, tmp_path):
    """A session does not load a CA store of its own (26 ms of CPU each): sessions of one DSN share a context,
    still encrypted, and a CA file replaced on disk is read again by the next session."""
    ca = tmp_path / "ca.pem"
    ca.write_bytes(ca_file(stack_config).read_bytes())
    plain, verified = stack_config.env()["STREAM_OSC_MYSQL_DSN"], f"{tls_user}?ssl-mode=verify-ca&ssl-ca={ca}"
    sessions: list = []
    try:
        for dsn in (plain, plain, verified, verified):
            sessions.append(connect(parse_mysql_dsn(dsn)))
        assert all(query(s, "SHOW SESSION STATUS LIKE 'Ssl_cipher'")[0][1] for s in sessions)
        assert sessions[0].ctx is sessions[1].ctx
        assert sessions[2].ctx is sessions[3].ctx and sessions[2].ctx is not sessions[0].ctx
        os.utime(ca, ns=(0, 0))
        renewed = connect(parse_mysql_dsn(verified))
        sessions.append(renewed)
        assert renewed.ctx is not sessions[2].ctx
    finally:
        for session in sessions:
            session.close()
