"""A TCP relay the fault tests put between the tool and a service, so that the link can be cut at will.

The tool's endpoint names the relay's port; the relay forwards every connection to the service. `cut()`
closes every relayed connection and stops listening, so that reconnecting is refused, as when a network
path or a server goes away; `restore()` listens again. The stack's services keep their direct links.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 0.1   # how soon the accept loop notices a cut
CHUNK = 65536


class TcpRelay:
    """Relays 127.0.0.1:`port` to `upstream`; counts connections so a test can show the traffic passed here."""

    def __init__(self, port: int, upstream: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.port = port
        self.upstream = upstream
        self.host = host
        self.accepted = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._listening = threading.Event()

    def restore(self) -> None:
        """Listen (again): from now on connections are accepted and relayed."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # our cut left TIME_WAIT pairs behind
        listener.bind((self.host, self.port))
        listener.listen(128)
        listener.settimeout(ACCEPT_POLL_S)
        self._listener = listener
        self._listening.set()
        self._acceptor = threading.Thread(target=self._accept_loop, args=(listener,), daemon=True,
                                          name=f"relay-{self.port}")
        self._acceptor.start()

    def cut(self) -> int:
        """Stop listening (new connections are refused) and close every relayed connection; returns how many."""
        self._listening.clear()
        if self._acceptor is not None:
            self._acceptor.join()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            _shut(sock)   # wakes both pump threads; each closes its sockets as it ends
        log.info("relay %s cut: %d sockets closed", self.port, len(sockets))
        return len(sockets) // 2

    def open_connections(self) -> int:
        """Relayed connections now open."""
        with self._lock:
            return len(self._open) // 2

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listening.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()   # the service itself is down: the client sees its connection end
                continue
            server.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._open.update((client, server))
                self.accepted += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Copy one direction until it ends, then end the whole connection (both directions)."""
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        _shut(sink)
        _shut(source)
        with self._lock:
            self._open.discard(source)
            self._open.discard(sink)
        source.close()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def refuses(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing accepts connections on host:port."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def tcp_peer_ports(pid: int) -> list[int]:
    """Remote ports of the established TCP connections process `pid` holds (from /proc, Linux)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "01":   # 01: ESTABLISHED
                ports.append(int(fields[2].rsplit(":", 1)[1], 16))
    return ports
