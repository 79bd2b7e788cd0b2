"""The dashboard, alert rules and their PromQL read as data (no Docker): for the static and live tests."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "setqueue.json"
ALERTS = GRAFANA / "alerts.yml"
ALERT_TESTS = GRAFANA / "alerts.test.yml"
PROMETHEUS_CONFIG = GRAFANA / "prometheus.yml"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "setqueue.yml"
COMPOSE_FILE = REPO / "docker-compose.yml"
CLUSTER_COMPOSE_FILE = REPO / "docker-compose.cluster.yml"

# The series only a worker serving a task registry (JOB_HANDLER=module:tasks) exports, which the Tasks
# row shows. The reference stack's demo worker serves a plain handler: there they are rightly absent,
# and tests/compose/test_promtool.py evaluates the row on a registry worker's series instead.
TASK_REGISTRY_ONLY = frozenset({"setqueue_task_jobs_total", "setqueue_task_run_seconds_bucket"})

DATASOURCE_UID = "setqueue-prometheus"
DASHBOARD_UID = "setqueue-overview"

# What Grafana substitutes, as for a 15-minute range scraped every 5 s ($__rate_interval >= 4 scrapes).
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "15s",
    "${__interval}": "15s",
    "$__range": "15m",
    "${__range}": "15m",
    "$queue": ".*",  # the dashboard's queue variable, All selected
}


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_dashboard() -> dict[str, Any]:
    with DASHBOARD.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def data_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dashboard) if p.get("type") != "row"]


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(``panel title / refId``, PromQL) of every target of every panel."""
    return [
        (f"{panel.get('title')} / {target.get('refId')}", target["expr"])
        for panel in data_panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def row_panels(dashboard: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels under the (expanded) row titled ``title``, up to the next row."""
    top: list[dict[str, Any]] = dashboard["panels"]
    row = next(i for i, p in enumerate(top) if p["type"] == "row" and p["title"] == title)
    after = top[row + 1 :]
    return after[: next((i for i, p in enumerate(after) if p["type"] == "row"), len(after))]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"] if "alert" in rule]


def substitute_grafana_variables(expr: str) -> str:
    for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_COMPARISON = re.compile(r"==|!=|>=|<=|>|<")
_METRIC = re.compile(r"\b(setqueue_[A-Za-z0-9_]+|up)\s*(?=\{|\[|\)|$|\s)")
_RANGE = re.compile(r"\[[^\]]*\]")


def is_filter(expr: str) -> bool:
    """It may rightly return nothing: it compares (filters series out) or asks for absent()."""
    bare = _MATCHERS.sub("", _STRING.sub('""', expr))
    return bool(_COMPARISON.search(bare)) or "absent(" in bare


def metric_names(expr: str) -> set[str]:
    bare = _RANGE.sub("", _MATCHERS.sub("", _STRING.sub('""', expr)))
    return set(_METRIC.findall(bare))


def fixed_range_windows(expr: str) -> list[str]:
    """rate()/increase()/irate() ranges with a fixed window, not a variable."""
    found = []
    for match in re.finditer(r"\b(rate|irate|increase)\s*\((.*?)\[([^\]]+)\]", expr):
        window = match.group(3).strip()
        if not window.startswith("$"):
            found.append(f"{match.group(1)}(...[{window}])")
    return found
