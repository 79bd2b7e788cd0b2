"""promtool (the stack's Prometheus image) checks the config and rules and runs alerts.test.yml."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from setqueue.runtime.metrics import OTHER_TASK, PROCESSING_BUCKETS, WorkerMetrics
from tests.compose.observability import GRAFANA, load_dashboard, row_panels, substitute_grafana_variables

pytestmark = pytest.mark.compose

PROMETHEUS_IMAGE = os.environ.get("PROMETHEUS_IMAGE") or "prom/prometheus:v2.55.1"
SCRAPED = {"job": "worker", "instance": "10.0.0.5:8000"}  # what Prometheus adds to a worker's samples


def promtool(docker: DockerClient, *args: str, mount: Path = GRAFANA) -> str:
    """promtool ``args``, ``mount`` (grafana/) at /etc/prometheus."""
    try:
        out = docker.run(
            PROMETHEUS_IMAGE,
            list(args),
            entrypoint="promtool",
            volumes=[(str(mount), "/etc/prometheus", "ro")],
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


def test_the_tasks_row_shows_each_task_from_a_registry_workers_series(docker: DockerClient, tmp_path: Path) -> None:
    """The stack's worker serves a plain handler, so its Prometheus has no series by task (test_stack lets
    the Tasks row show no data there). Here promtool evaluates the row's queries on the series a worker
    serving a registry exports, as WorkerMetrics writes them: jobs per second by task and outcome, and
    run time p50 and p99 by task."""
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry, ["orders"], tasks=["charge", "email"])
    per_minute = {
        ("charge", "success"): 30,
        ("charge", "failure"): 6,
        ("email", "success"): 60,
        (OTHER_TASK, "failure"): 3,
    }
    for (task, outcome), n in per_minute.items():
        metrics.task_jobs.labels("orders", task, outcome).inc(n)
    runs = {"email": (0.02, 0.01, 0.025, 60), "charge": (3.0, 2.5, 5.0, 36)}  # seconds, its bucket, runs a minute
    for task, (seconds, lower, upper, n) in runs.items():
        assert {lower, upper} <= set(PROCESSING_BUCKETS)
        metrics.task_run_seconds.observe_many([seconds] * n, "orders", task)
    # Each sample grows by its figure every minute, scraped every 15 s.
    series = [
        {"series": sample.name + _labels({**sample.labels, **SCRAPED}), "values": f"0+{sample.value / 4!r}x40"}
        for family in registry.collect()
        if family.name.startswith("setqueue_task_")
        for sample in family.samples
        if not sample.name.endswith("_created")
    ]
    jobs, run_time = row_panels(load_dashboard(), "Tasks")
    expr_tests: list[dict[str, Any]] = [
        {
            "expr": substitute_grafana_variables(jobs["targets"][0]["expr"]),
            "eval_time": "5m",
            "exp_samples": [
                {
                    "labels": _labels({"task": task, "outcome": outcome}),
                    "value": per_minute.get((task, outcome), 0) / 60,
                }
                for task in ("charge", "email", OTHER_TASK)
                for outcome in ("success", "failure")
            ],
        }
    ]
    for target, q in zip(run_time["targets"], (0.5, 0.99), strict=True):
        expr_tests.append(
            {
                "expr": substitute_grafana_variables(target["expr"]),
                "eval_time": "5m",
                "exp_samples": [  # every run in one bucket: the quantile interpolates within it
                    {"labels": _labels({"task": task}), "value": lower + (upper - lower) * q}
                    for task, (_, lower, upper, _) in runs.items()
                ],
            }
        )
    unit_tests = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": expr_tests}],
    }
    (tmp_path / "tasks.test.yml").write_text(yaml.safe_dump(unit_tests, sort_keys=False))
    out = promtool(docker, "test", "rules", "/etc/prometheus/tasks.test.yml", mount=tmp_path)
    assert "SUCCESS" in out


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{name}="{value}"' for name, value in labels.items()) + "}"
