"""Kafka Connect REST client: register, wait, status, offsets, removal."""
from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from core.endpoints import ConnectAccess, Endpoints


# Between two polls of a state Connect is changing: a connector is RUNNING or STOPPED within a few tenths of
# a second, and a 0.2 s pause added up to that much to every wait (measured: 0.21 s to RUNNING, 0.23 s to the
# first recorded offset, each at the start of every migration).
POLL_S = 0.05


class ConnectError(Exception):
    """Kafka Connect refused a request or is unreachable."""

    user_facing = True


class ConnectUnreachable(ConnectError):
    """Kafka Connect did not answer (down or restarting)."""


@dataclass(frozen=True)
class ConnectorState:
    """Connector and task states as Connect reports them."""

    connector: str
    tasks: list[str]
    trace: str | None

    @property
    def running(self) -> bool:
        return self.connector == "RUNNING" and bool(self.tasks) and all(t == "RUNNING" for t in self.tasks)

    @property
    def failed(self) -> bool:
        return self.connector == "FAILED" or any(t == "FAILED" for t in self.tasks)

    def error_line(self) -> str:
        """The first line of the failure trace (the connector's own error message)."""
        return (self.trace or "").strip().splitlines()[0] if self.trace else ""


def is_connect_answer(body: str) -> bool:
    """Whether an error body is Connect's own (`{"error_code": …, "message": …}`). While a worker starts, its web
    server answers every path 404 with a page of its own for a few seconds before the REST API is ready: taken
    for "no such connector", that answer would end a removal that never happened, leaving the connector."""
    try:
        return "error_code" in json.loads(body)
    except (ValueError, TypeError):
        return False


def connect_client(endpoints: Endpoints) -> "ConnectClient":
    """The client of the endpoints' Kafka Connect, with its basic auth and CA."""
    return ConnectClient(endpoints.connect_url, access=endpoints.connect)


class ConnectClient:
    """Thin client over the Connect REST API (basic auth and https with a CA when `access` gives them)."""

    def __init__(self, url: str, timeout: float = 15.0, access: ConnectAccess | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if access is not None and access.user:
            login = base64.b64encode(f"{access.user}:{access.password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {login}"
        self.tls = ssl.create_default_context(cafile=access.ca or None) if access is not None and access.ca else None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              ok_missing: bool = False) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.tls) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            if exc.code == 404 and not is_connect_answer(detail):
                raise ConnectUnreachable(f"Kafka Connect at {self.url} answered {method} {path} with a 404 page "
                                         "not its own: a worker still starting, or a URL that does not lead to "
                                         "Connect's REST API") from None
            if exc.code == 404 and ok_missing:
                return None
            if exc.code in (401, 403):   # the body is left out: a proxy may echo the request
                raise ConnectError(f"Kafka Connect at {self.url} refused the request ({exc.code}): check "
                                   "STREAM_OSC_CONNECT_USER and its password (docs/connectivity.md)") from None
            detail = detail[:500]
            try:
                detail = json.loads(detail).get("message", detail)
            except ValueError:
                pass
            raise ConnectError(f"Kafka Connect at {self.url} answered {exc.code} "
                               f"to {method} {path}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ConnectError(f"Kafka Connect at {self.url}: its TLS certificate was not accepted "
                                   f"({reason.verify_message}); give its CA as STREAM_OSC_CONNECT_CA") from None
            raise ConnectUnreachable(f"Kafka Connect at {self.url} is unreachable ({reason})") from None

    def check_reachable(self) -> None:
        self._call("GET", "/")

    def has_plugin(self, connector_class: str) -> bool:
        return any(p.get("class") == connector_class for p in self._call("GET", "/connector-plugins"))

    def names(self) -> list[str]:
        """Names of every connector on the Connect cluster."""
        return list(self._call("GET", "/connectors"))

    def exists(self, name: str) -> bool:
        return self._call("GET", f"/connectors/{name}", ok_missing=True) is not None

    def create(self, name: str, config: dict[str, str]) -> None:
        """Create or update the connector (PUT is idempotent)."""
        self._call("PUT", f"/connectors/{name}/config", config)

    def state(self, name: str) -> ConnectorState | None:
        doc = self._call("GET", f"/connectors/{name}/status", ok_missing=True)
        if doc is None:
            return None
        tasks = doc.get("tasks", [])
        trace = doc["connector"].get("trace") or next((t.get("trace") for t in tasks if t.get("trace")), None)
        return ConnectorState(doc["connector"]["state"], [t["state"] for t in tasks], trace)

    def wait_running(self, name: str, timeout: float = 60.0) -> ConnectorState:
        """Wait until connector and tasks are RUNNING; raise with the connector's error if it fails."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.state(name)
            if state and state.failed:
                raise ConnectError(f"connector {name} failed: {state.error_line()}")
            if state and state.running:
                return state
            time.sleep(POLL_S)
        raise ConnectError(f"connector {name} not running after {timeout:.0f} s (state: {state})")

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's committed source offsets (Connect 3.5+)."""
        doc = self._call("GET", f"/connectors/{name}/offsets", ok_missing=True)
        return (doc or {}).get("offsets", [])

    def stop(self, name: str) -> None:
        """Stop the connector and its tasks; its offsets are kept (Connect 3.5+)."""
        self._call("PUT", f"/connectors/{name}/stop")

    def resume(self, name: str) -> None:
        """Start a stopped or paused connector again from its offsets."""
        self._call("PUT", f"/connectors/{name}/resume")

    def restart_failed(self, name: str) -> None:
        """Restart the connector's failed instances and tasks; they resume from the committed offsets."""
        self._call("POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")

    def remove(self, name: str) -> None:
        """Stop the connector, delete its offsets, then delete it (no trace left in Connect)."""
        if not self.exists(name):
            return
        self.stop(name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = self.state(name)
            if state is None or state.connector == "STOPPED":
                break
            time.sleep(POLL_S)
        try:
            self._call("DELETE", f"/connectors/{name}/offsets", ok_missing=True)
        except ConnectError:
            pass  # offsets of a connector whose prefix is never reused are harmless
        self._call("DELETE", f"/connectors/{name}", ok_missing=True)
