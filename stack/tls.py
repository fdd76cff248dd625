"""The embedded MariaDB's TLS certificate: a local CA and a server certificate for the stack's host,
made once with openssl, so that the tool's TLS options are tested against a real server."""
from __future__ import annotations

import subprocess
from pathlib import Path

from stack.base import require_binary
from stack.config import StackConfig
from stack.process import StackError

DAYS = "3650"


def tls_dir(config: StackConfig) -> Path:
    return config.run_dir / "mariadb" / "tls"


def ca_file(config: StackConfig) -> Path:
    """The CA a client gives as ssl-ca to verify the stack's MariaDB."""
    return tls_dir(config) / "ca.pem"


def server_files(config: StackConfig) -> tuple[Path, Path]:
    """(certificate, key) of the server."""
    return tls_dir(config) / "server-cert.pem", tls_dir(config) / "server-key.pem"


def ensure_certificates(config: StackConfig) -> None:
    """Make the CA and the server certificate (for the stack's host, as IP and name) unless present."""
    cert, key = server_files(config)
    if cert.exists() and key.exists() and ca_file(config).exists():
        return
    folder = tls_dir(config)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    openssl = require_binary("openssl", "openssl")
    ca_key, request = folder / "ca-key.pem", folder / "server.csr"
    extensions = folder / "server.ext"
    extensions.write_text(f"subjectAltName=IP:{config.host},DNS:localhost\n")
    steps = [
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS, "-subj", "/CN=stream-osc local CA",
         "-keyout", str(ca_key), "-out", str(ca_file(config))],
        [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={config.host}", "-keyout", str(key),
         "-out", str(request)],
        [openssl, "x509", "-req", "-in", str(request), "-CA", str(ca_file(config)), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", DAYS, "-extfile", str(extensions), "-out", str(cert)],
    ]
    for step in steps:
        result = subprocess.run(step, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"mariadb: making the TLS certificate failed ({step[1]}): {result.stderr.strip()[-500:]}")
