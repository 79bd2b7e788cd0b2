"""Static checks of the Grafana side of the reference deployment: the dashboard JSON and the
provisioning files agree with each other and with docker-compose.yml. No Docker needed; the live
check that every panel's PromQL returns data is tests/compose/test_stack.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setqueue.runtime.metrics import CleanerMetrics, CreatorMetrics, SupervisorMetrics, WorkerMetrics
from tests.compose.observability import (
    COMPOSE_FILE,
    DASHBOARD,
    DASHBOARD_PROVIDERS,
    DASHBOARD_UID,
    DATASOURCE_UID,
    DATASOURCES,
    TASK_REGISTRY_ONLY,
    dashboard_queries,
    data_panels,
    fixed_range_windows,
    load_dashboard,
    load_yaml,
    metric_names,
    panels,
    row_panels,
)

EXPECTED_DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return load_dashboard()


def test_dashboard_is_self_contained_with_a_fixed_uid(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == DASHBOARD_UID
    assert "__inputs" not in dashboard, "an exported-for-sharing dashboard needs import inputs; provision it plainly"
    assert "__requires" not in dashboard
    assert "${DS_" not in DASHBOARD.read_text(encoding="utf-8"), "datasource placeholders left from an export"
    assert dashboard.get("id") is None, "a provisioned dashboard must not carry a database id"
    assert dashboard["title"]


def test_dashboard_refreshes_and_shows_recent_data(dashboard: dict[str, Any]) -> None:
    assert dashboard["refresh"] == "5s"
    assert dashboard["time"] == {"from": "now-15m", "to": "now"}


def test_every_panel_has_title_description_unit_and_the_fixed_datasource(dashboard: dict[str, Any]) -> None:
    problems = []
    for panel in data_panels(dashboard):
        name = panel.get("title") or f"panel id {panel.get('id')}"
        if not panel.get("title"):
            problems.append(f"{name}: no title")
        if not panel.get("description"):
            problems.append(f"{name}: no description")
        if not panel.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{name}: no unit (fieldConfig.defaults.unit)")
        if panel.get("datasource") != EXPECTED_DATASOURCE:
            problems.append(f"{name}: datasource {panel.get('datasource')!r}")
        if not panel.get("targets"):
            problems.append(f"{name}: no query")
        for target in panel.get("targets", []):  # a target without one uses the panel's
            if target.get("datasource", EXPECTED_DATASOURCE) != EXPECTED_DATASOURCE:
                problems.append(f"{name} / {target.get('refId')}: datasource {target.get('datasource')!r}")
            if not target.get("expr"):
                problems.append(f"{name} / {target.get('refId')}: empty expr")
    assert not problems, "\n".join(problems)


def test_panel_ids_unique_and_layout_fits_the_grid(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in panels(dashboard):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']} overflows the 24-column grid"


def test_rates_use_the_rate_interval_variable(dashboard: dict[str, Any]) -> None:
    problems = [f"{where}: {w}" for where, expr in dashboard_queries(dashboard) for w in fixed_range_windows(expr)]
    assert not problems, "use [$__rate_interval], not a fixed window:\n" + "\n".join(problems)


def test_dashboard_shows_what_operators_need(dashboard: dict[str, Any]) -> None:
    exprs = "\n".join(expr for _, expr in dashboard_queries(dashboard))
    titles = {p["title"] for p in data_panels(dashboard)}
    assert {"Workers up", "Backlog", "In flight", "Completed / s", "Failure %", "Dead letters", "Oldest wait"} <= titles
    mine = 'queue=~"$queue"'  # every queue-labelled series is filtered by the dashboard's queue variable
    assert (
        f'sum by (instance) (rate(setqueue_jobs_completed_total{{{mine}, outcome="success"}}[$__rate_interval]))'
        in exprs
    )
    for histogram in ("setqueue_job_processing_seconds", "setqueue_job_queue_wait_seconds"):
        for q in ("0.5", "0.95", "0.99"):
            expected = f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{mine}}}[$__rate_interval])))"
            assert expected in exprs
    for metric in (
        "setqueue_jobs_created_total",
        "setqueue_cleaner_requeued_total",
        "setqueue_last_sweep_timestamp_seconds",
        "setqueue_oldest_pending_age_seconds",
        f'setqueue_queue_depth{{{mine}, state="in_progress"}}',
        f'setqueue_queue_depth{{{mine}, state="failed"}}',
        "sum by (instance) (setqueue_jobs_running) / sum by (instance) (setqueue_worker_slots)",
        "setqueue_job_timeouts_total",
        "setqueue_worker_zombie_threads",
    ):
        assert metric in exprs, metric
    assert any("drain" in t.lower() for t in titles)
    [variable] = dashboard["templating"]["list"]
    assert variable["name"] == "queue" and variable["includeAll"] and variable["multi"]
    for expr in exprs.splitlines():  # nothing about a queue shows every queue regardless of the choice
        for name in ("setqueue_queue_depth", "setqueue_jobs_completed_total", "setqueue_job_queue_wait_seconds"):
            assert name not in expr or mine in expr, expr


def test_the_nothing_lost_row_shows_the_audit(dashboard: dict[str, Any]) -> None:
    shown = row_panels(dashboard, "Nothing lost")
    exprs = {p["title"]: p["targets"][0]["expr"] for p in shown}
    for title, gauge in (
        ("Lost", "setqueue_audit_lost"),
        ("In two states", "setqueue_audit_in_two_states"),
        ("Executions > 1", "setqueue_audit_duplicates"),
        ("Unexplained duplicates", "setqueue_audit_unexplained_duplicates"),
        ("Last audit age", "setqueue_audit_last_timestamp_seconds"),
    ):
        assert gauge in exprs.get(title, ""), title
    must_be_zero = [p for p in shown if p["title"] in ("Lost", "In two states", "Unexplained duplicates")]
    for panel in must_be_zero:  # any finding at all is red
        assert panel["fieldConfig"]["defaults"]["thresholds"]["steps"][1] == {"color": "red", "value": 1}


def exported(*roles: Any) -> set[str]:
    """The names of the series these roles' metrics export (a histogram's three, a counter's _total)."""
    names = set()
    for role in roles:
        registry = CollectorRegistry()
        role(registry)
        for metric in registry.collect():
            if metric.type == "histogram":
                names |= {f"{metric.name}_bucket", f"{metric.name}_sum", f"{metric.name}_count"}
            else:
                names.add(metric.name + ("_total" if metric.type == "counter" else ""))
    return names


def test_every_metric_the_dashboard_queries_is_one_the_services_export(dashboard: dict[str, Any]) -> None:
    every_role = exported(CreatorMetrics, WorkerMetrics, SupervisorMetrics, lambda r: CleanerMetrics(r, audit=True))
    queried = {name for _, expr in dashboard_queries(dashboard) for name in metric_names(expr)}
    assert queried - {"up"} <= every_role, queried - every_role - {"up"}
    # What the live test lets be absent on a stack without a task registry: a worker's, and only those.
    assert TASK_REGISTRY_ONLY.issubset(exported(WorkerMetrics) - exported(CreatorMetrics, CleanerMetrics))


def test_the_tasks_row_shows_jobs_and_run_time_by_task(dashboard: dict[str, Any]) -> None:
    shown = row_panels(dashboard, "Tasks")
    exprs = {target["expr"] for panel in shown for target in panel["targets"]}
    mine = 'queue=~"$queue"'
    assert f"sum by (task, outcome) (rate(setqueue_task_jobs_total{{{mine}}}[$__rate_interval]))" in exprs
    buckets = f"rate(setqueue_task_run_seconds_bucket{{{mine}}}[$__rate_interval])"
    for q in ("0.5", "0.99"):
        assert f"histogram_quantile({q}, sum by (task, le) ({buckets}))" in exprs
    # The row queries a registry worker's series alone: the live test's allowance for them covers it all.
    assert {name for expr in exprs for name in metric_names(expr)} == TASK_REGISTRY_ONLY
    assert {p["fieldConfig"]["defaults"]["unit"] for p in shown} == {"suffix: jobs/s", "s"}


def test_stat_panels_have_thresholds(dashboard: dict[str, Any]) -> None:
    for panel in data_panels(dashboard):
        if panel["type"] == "stat":
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            assert steps and steps[0]["value"] is None, panel["title"]


def test_datasource_provisioning_matches_the_dashboard() -> None:
    sources = load_yaml(DATASOURCES)["datasources"]
    assert len(sources) == 1
    source = sources[0]
    assert source["uid"] == DATASOURCE_UID
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert source["isDefault"] is True


def test_dashboard_provider_reads_the_directory_compose_mounts() -> None:
    provider = load_yaml(DASHBOARD_PROVIDERS)["providers"][0]
    assert provider["type"] == "file"
    path = provider["options"]["path"]

    grafana = load_yaml(COMPOSE_FILE)["services"]["grafana"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"] if m.startswith("./")}
    assert mounts.get(path) == "./grafana/dashboards", f"{path} is not where compose mounts the dashboards"
    assert mounts.get("/etc/grafana/provisioning") == "./grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/{DASHBOARD.name}"
    assert re.fullmatch(r"grafana/grafana-oss:\d+\.\d+\.\d+", grafana["image"]), "pin the Grafana version"


def test_the_dashboard_links_to_the_console(dashboard: dict[str, Any]) -> None:
    """Grafana keeps the rates; questions about one queue or job go to the console, one click away,
    at the port docker-compose.yml publishes it on by default."""
    compose = load_yaml(COMPOSE_FILE)
    (published,) = compose["services"]["console"]["ports"]
    port = re.fullmatch(r"127\.0\.0\.1:\$\{CONSOLE_PORT:-(\d+)\}:8080", published)[1]  # type: ignore[index]
    links = [link for link in dashboard["links"] if link["title"] == "Operator console"]
    assert len(links) == 1
    assert links[0]["type"] == "link" and links[0]["url"] == f"http://127.0.0.1:{port}/"
    assert links[0]["targetBlank"] is True


def test_the_dependencies_row_shows_waiting_jobs_releases_and_failures(dashboard: dict[str, Any]) -> None:
    [panel] = row_panels(dashboard, "Dependencies")
    mine = 'queue=~"$queue"'
    assert [target["expr"] for target in panel["targets"]] == [
        f'sum(setqueue_queue_depth{{{mine}, state="waiting"}})',
        f"sum(rate(setqueue_dependents_released_total{{{mine}}}[$__rate_interval]))",
        f"sum(rate(setqueue_dependency_failures_total{{{mine}}}[$__rate_interval]))",
    ]
    # The rates on their own axis, in jobs/s, named as the overrides say.
    legends = [target["legendFormat"] for target in panel["targets"]]
    overridden = {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]}
    assert overridden == set(legends[1:])
