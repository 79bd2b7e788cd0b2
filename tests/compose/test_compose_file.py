"""docker-compose.yml as Compose resolves it with no .env file and no variables set: the defaults
a user gets from `docker compose up --build`. Needs the docker CLI with Compose v2, no engine."""

from __future__ import annotations

import os
from typing import Any

import pytest
from python_on_whales import DockerClient

from tests.compose.observability import COMPOSE_FILE, REPO

pytestmark = pytest.mark.compose

VARIABLES = [
    *("REDIS_PASSWORD", "GRAFANA_ADMIN_PASSWORD", "PROMETHEUS_PORT", "GRAFANA_PORT", "PROMETHEUS_RETENTION"),
    *("PYTHON_IMAGE", "REDIS_IMAGE", "PROMETHEUS_IMAGE", "QUEUE_NAME", "LOG_LEVEL", "LOG_FORMAT"),
    *("LEASE_SECONDS", "MAX_ATTEMPTS", "DONE_MAX_COUNT", "DONE_MAX_AGE_SECONDS"),
    *("CREATE_RATE", "CREATE_TOTAL", "CREATE_BATCH", "CREATE_ID_PREFIX"),
    *("CLAIM_BATCH", "CONCURRENCY", "JOB_TIMEOUT_SECONDS", "JOB_HANDLER", "IDLE_WAIT_SECONDS"),
    *("WORK_SECONDS", "WORK_JITTER", "FAIL_RATE"),
    *("SWEEP_INTERVAL", "SWEEP_BATCH", "AUDIT", "AUDIT_INTERVAL"),
]


@pytest.fixture(scope="module")
def config(docker: DockerClient) -> dict[str, Any]:
    client = DockerClient(compose_files=[COMPOSE_FILE], compose_project_directory=REPO, compose_env_files=[os.devnull])
    with pytest.MonkeyPatch.context() as mp:
        for name in VARIABLES:
            mp.delenv(name, raising=False)
        resolved = client.compose.config(return_json=True)
    assert isinstance(resolved, dict)
    return resolved


def test_all_services_defined(config: dict[str, Any]) -> None:
    assert set(config["services"]) == {"redis", "creator", "worker", "cleaner", "prometheus", "grafana"}
    assert "version" not in config


def test_defaults_work_without_an_env_file(config: dict[str, Any]) -> None:
    services = config["services"]
    assert services["redis"]["image"] == "redis:7.4-alpine"
    assert services["prometheus"]["image"] == "prom/prometheus:v2.55.1"
    assert "setqueue-change-me" in services["redis"]["command"]
    for name in ("creator", "worker", "cleaner"):
        env = services[name]["environment"]
        assert env["REDIS_URL"] == "redis://:setqueue-change-me@redis:6379/0"
        assert env["METRICS_PORT"] == "8000"
        assert services[name]["build"]["target"] == name
        assert services[name]["build"]["args"]["PYTHON_IMAGE"] == "python:3.12-slim"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["worker"]["environment"]["SHUTDOWN_GRACE_SECONDS"] == "20"
    assert services["creator"]["environment"]["CREATE_RATE"] == "20"
    assert {services[name]["environment"]["AUDIT"] for name in ("creator", "worker", "cleaner")} == {"false"}
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "admin-change-me"


def test_only_prometheus_and_grafana_publish_ports_on_loopback(config: dict[str, Any]) -> None:
    for name, service in config["services"].items():
        ports = service.get("ports", [])
        if name in ("prometheus", "grafana"):
            assert [p["host_ip"] for p in ports] == ["127.0.0.1"], name
        else:
            assert not ports, f"{name} publishes {ports}"


def test_workers_can_be_scaled(config: dict[str, Any]) -> None:
    worker = config["services"]["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports")
    assert worker["stop_grace_period"] == "25s"


def test_creator_is_not_restarted_after_finishing(config: dict[str, Any]) -> None:
    assert config["services"]["creator"]["restart"] == "on-failure"
    for name in ("redis", "worker", "cleaner", "prometheus", "grafana"):
        assert config["services"][name]["restart"] == "unless-stopped", name
