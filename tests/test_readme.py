"""The README is the front door: keep its commands, settings and metrics true."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from setqueue.keys import QueueKeys
from setqueue.runtime.metrics import CleanerMetrics, CreatorMetrics, WorkerMetrics
from setqueue.runtime.settings import SETTINGS
from tests.support import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table_with_its_default() -> None:
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default else "(empty)"
        assert re.search(rf"^\| `{setting.name}` \| {re.escape(default)} \|", README, re.M), setting.name


def test_every_metric_is_in_the_metrics_table() -> None:
    names = set()
    for role in (CreatorMetrics, WorkerMetrics, lambda registry: CleanerMetrics(registry, audit=True)):
        registry = CollectorRegistry()
        role(registry)
        for metric in registry.collect():
            names.add(metric.name + ("_total" if metric.type == "counter" else ""))
    for name in names:
        assert f"`{name}" in README, name


def test_every_key_of_the_layout_is_documented() -> None:
    keys = QueueKeys("Q")
    for attribute in (
        "todos",
        "in_progress",
        "done",
        "failed",
        "pending",
        "attempts",
        "payloads",
        "errors",
        "done_log",
        "wake",
        "owners",
        "finished",
        "scheduled",
        "periodic",
        "audit_created",
        "audit_successes",
        "audit_failures",
        "audit_lease_lost",
    ):
        assert f"`{getattr(keys, attribute)}`" in README, attribute
    assert f"`{keys.lock('<token>')}`" in README
    assert f"`{keys.request('<request id>')}`" in README
    assert f"`{keys.audit_run('<token>', '<id>')}`" in README


def test_the_two_commands() -> None:
    assert "docker compose up --build\n" in README
    assert "scripts/test\n" in README
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("exec scripts/test")
