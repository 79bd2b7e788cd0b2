"""The HTTP server of a service: ``/metrics`` and ``/healthz`` (200 or 503 with the health callable's
``(healthy, body)``, body as JSON)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Health = Callable[[], tuple[bool, dict[str, Any]]]


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/health"):
            ok, body = self.server.health()
            self._send(200 if ok else 503, (json.dumps(body) + "\n").encode(), "application/json")
        else:
            self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log: Prometheus scrapes every few seconds


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, port: int, registry: CollectorRegistry, health: Health, host: str = "", sock: socket.socket | None = None
    ) -> None:
        """``sock``: already listening (a supervisor binds its children's, so no one takes the port between)."""
        self.registry = registry
        self.health = health
        if sock is not None:
            self.address_family = sock.family
            super().__init__(sock.getsockname()[:2], _Handler, bind_and_activate=False)
            self.socket.close()
            self.socket = sock
            return
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)

    def start(self) -> MetricsServer:
        threading.Thread(target=self.serve_forever, name="metrics-http", daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
