"""The tool talks to a Kafka Connect REST API behind basic auth and https (a proxy stood up here in front of
the real worker): it works with the user, password and CA; a wrong password or an unknown CA is one clear
error that never shows the password."""
from __future__ import annotations

import base64
import os
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from connectors.rest import ConnectClient, ConnectError
from core.db import query
from core.endpoints import ConnectAccess

pytestmark = pytest.mark.integration

DB = "connect_auth"
USER, PASSWORD = "osc-admin", "c0nnect:S3cret"


def make_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """(CA, server certificate, server key) for 127.0.0.1, made with openssl."""
    ca, ca_key, key, request, cert = (folder / n for n in ("ca.pem", "ca-key.pem", "key.pem", "req.csr", "cert.pem"))
    ext = folder / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for step in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
                  "-keyout", ca_key, "-out", ca],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", request],
                 ["x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
                  "-extfile", ext, "-out", cert]):
        subprocess.run(["openssl", *map(str, step)], check=True, capture_output=True)
    return ca, cert, key


@dataclass
class Proxy:
    url: str
    ca: Path
    refused: list[str]


@pytest.fixture
def secured_connect(endpoints, tmp_path) -> Iterator[Proxy]:
    """https://127.0.0.1:<port> requiring USER/PASSWORD, forwarding to the real Connect worker."""
    ca, cert, key = make_certificate(tmp_path)
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    refused: list[str] = []
    target = endpoints.connect_url.rstrip("/")

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if self.headers.get("Authorization") != expected:
                refused.append(self.path)
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="connect"')
                self.end_headers()
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            request = urllib.request.Request(target + self.path, data=body, method=self.command,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    status, payload = resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                status, payload = exc.code, exc.read()
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Proxy(f"https://127.0.0.1:{server.server_address[1]}", ca, refused)
    finally:
        server.shutdown()
        server.server_close()


def test_the_client_works_with_basic_auth_and_the_ca(secured_connect, endpoints):
    client = ConnectClient(secured_connect.url, access=ConnectAccess(secured_connect.url, USER, PASSWORD,
                                                                     str(secured_connect.ca)))
    client.check_reachable()
    assert client.has_plugin("io.debezium.connector.mariadb.MariaDbConnector")
    assert sorted(client.names()) == sorted(ConnectClient(endpoints.connect_url).names())
    assert secured_connect.refused == []


def test_a_wrong_password_or_an_unknown_ca_is_one_clear_error_without_the_password(secured_connect):
    wrong = ConnectClient(secured_connect.url, access=ConnectAccess(secured_connect.url, USER, "Wr0ng-pw",
                                                                    str(secured_connect.ca)))
    with pytest.raises(ConnectError, match=r"refused the request \(401\): check STREAM_OSC_CONNECT_USER") as refused:
        wrong.check_reachable()
    unknown_ca = ConnectClient(secured_connect.url, access=ConnectAccess(secured_connect.url, USER, PASSWORD))
    with pytest.raises(ConnectError, match="TLS certificate was not accepted.*STREAM_OSC_CONNECT_CA") as untrusted:
        unknown_ca.check_reachable()
    for error in (refused.value, untrusted.value):
        assert "Wr0ng-pw" not in str(error) and PASSWORD not in str(error)
    assert secured_connect.refused == ["/"]


def test_the_cli_goes_through_the_secured_api_with_the_password_from_a_file(secured_connect, stack_config, conn,
                                                                            tmp_path):
    if stack_config is None:
        pytest.skip("hands the embedded worker's secrets folder to the CLI")
    query(conn, f"CREATE TABLE IF NOT EXISTS {DB}.items (id INT PRIMARY KEY)")
    password_file = tmp_path / "connect-password"
    password_file.write_text(PASSWORD + "\n")
    env = {**os.environ, "STREAM_OSC_CONNECT_URL": secured_connect.url, "STREAM_OSC_CONNECT_USER": USER,
           "STREAM_OSC_CONNECT_PASSWORD_FILE": str(password_file), "STREAM_OSC_CONNECT_CA": str(secured_connect.ca),
           "STREAM_OSC_CONNECTOR_SECRETS_DIR": str(stack_config.connect_secrets_dir)}
    args = [sys.executable, "-m", "cli.main", "migrate", "--table", f"{DB}.items", "--alter", "ADD COLUMN x INT",
            "--dry-run"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)
    assert done.returncode == 0, done.stderr
    password_file.write_text("Wr0ng-pw\n")
    refused = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)
    assert refused.returncode == 2
    assert [line for line in refused.stderr.splitlines() if "error" in line.lower() or "Traceback" in line] == [
        f"stream-osc: error: Kafka Connect at {secured_connect.url} refused the request (401): check "
        "STREAM_OSC_CONNECT_USER and its password (docs/connectivity.md)"]
    assert "Wr0ng-pw" not in refused.stdout + refused.stderr
