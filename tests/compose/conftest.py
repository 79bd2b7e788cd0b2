"""The compose tests' Docker client: ``scripts/test -m compose``. Without Docker they skip (fail under CI)."""

from __future__ import annotations

import pytest
from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from tests.support import need


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "compose: drives the docker compose stack (needs Docker; run alone with -m compose)"
    )


@pytest.fixture(scope="session")
def docker() -> DockerClient:
    client = DockerClient()
    try:
        client.info()
        if not client.compose.is_installed():
            need("Docker Compose v2", "`docker compose` is not installed")
    except (DockerException, OSError) as exc:
        need("Docker", f"{type(exc).__name__}: {str(exc).strip()[:300]}")
    return client
