"""promtool (the stack's Prometheus image) checks the config and rules and runs alerts.test.yml."""

from __future__ import annotations

import os

import pytest
from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from tests.compose.observability import GRAFANA

pytestmark = pytest.mark.compose

PROMETHEUS_IMAGE = os.environ.get("PROMETHEUS_IMAGE") or "prom/prometheus:v2.55.1"


def promtool(docker: DockerClient, *args: str) -> str:
    try:
        out = docker.run(
            PROMETHEUS_IMAGE,
            list(args),
            entrypoint="promtool",
            volumes=[(str(GRAFANA), "/etc/prometheus", "ro")],
            workdir="/etc/prometheus",
            remove=True,
        )
    except DockerException as exc:
        hint = "" if os.environ.get("PROMETHEUS_IMAGE") else " (offline? set PROMETHEUS_IMAGE to a local image)"
        pytest.fail(f"promtool {' '.join(args)} in {PROMETHEUS_IMAGE} failed{hint}:\n{exc}")
    return str(out)


def test_prometheus_config_is_valid(docker: DockerClient) -> None:
    out = promtool(docker, "check", "config", "/etc/prometheus/prometheus.yml")
    assert "SUCCESS" in out


def test_alert_rules_are_valid(docker: DockerClient) -> None:
    out = promtool(docker, "check", "rules", "/etc/prometheus/alerts.yml")
    assert "SUCCESS" in out


def test_alert_rules_pass_their_unit_tests(docker: DockerClient) -> None:
    out = promtool(docker, "test", "rules", "/etc/prometheus/alerts.test.yml")
    assert "SUCCESS" in out
