"""The reference deployment end to end, built from this checkout: scaled, workers SIGKILLed, Redis
restarted, checked from Redis, the CLI and Prometheus. The tests share one stack and run in file
order: the creator makes CREATE_TOTAL jobs while they look; at the end every job must be in done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from python_on_whales import DockerClient

from tests.compose.observability import (
    TASK_REGISTRY_ONLY,
    alert_rules,
    dashboard_queries,
    is_filter,
    load_dashboard,
    metric_names,
    substitute_grafana_variables,
)
from tests.compose.stack import EVERY_JOB_ENDS_IN_DONE, Stack, running_stack

pytestmark = pytest.mark.compose

CREATE_TOTAL = 3000
WORKERS = 4
SETTINGS = {
    **EVERY_JOB_ENDS_IN_DONE,
    "CREATE_RATE": "50",  # about a minute
    "CREATE_TOTAL": str(CREATE_TOTAL),
    "WORK_SECONDS": "0.1",
    "LOG_LEVEL": "INFO",
    "AUDIT": "true",  # for the dashboard's "Nothing lost" row
    "AUDIT_INTERVAL": "5",
    "REDIS_SERVICE_PASSWORD": "services-test-password",  # the services' ACL user's
}
CREATOR_DONE_TOO_SOON = "the creator already finished: raise CREATE_TOTAL so it outlives this test"


@pytest.fixture(scope="module")
def stack(docker: DockerClient) -> Iterator[Stack]:
    with running_stack(docker, SETTINGS, queue_name="compose-test") as s:
        yield s


def test_every_service_is_healthy_and_scraped(stack: Stack) -> None:
    # `up --wait` saw every healthcheck pass; Prometheus must find each service through Docker's DNS.
    stack.wait_scraped(creator=1, worker=1, cleaner=1)
    assert stack.scalar("min(setqueue_redis_up)") == 1


def test_only_prometheus_is_published_and_only_on_loopback(stack: Stack) -> None:
    for container in stack.docker.compose.ps():
        ports = container.network_settings.ports or {}
        published = {port: bindings for port, bindings in ports.items() if bindings}
        if container.name.endswith("-prometheus-1"):
            assert set(published) == {"9090/tcp"}
            assert all(b["HostIp"] == "127.0.0.1" for b in published["9090/tcp"])
        else:
            assert not published, f"{container.name} publishes {published}"


def test_services_run_as_the_unprivileged_user(stack: Stack) -> None:
    for service in ("creator", "worker", "cleaner"):
        uid = stack.docker.compose.execute(service, ["id", "-u"], tty=False)
        assert (uid or "").strip() == "10001", service


def test_redis_requires_the_password_and_keeps_an_append_only_file(stack: Stack) -> None:
    anonymous = stack.docker.compose.execute("redis", ["sh", "-c", "REDISCLI_AUTH= redis-cli PING"], tty=False)
    assert "NOAUTH" in (anonymous or "")
    assert "appendonly\nyes" in stack.redis("CONFIG", "GET", "appendonly")
    assert "maxmemory-policy\nnoeviction" in stack.redis("CONFIG", "GET", "maxmemory-policy")


def _as_service_user(stack: Stack, *command: str) -> str:
    password = SETTINGS["REDIS_SERVICE_PASSWORD"]
    line = " ".join(["REDISCLI_AUTH=", "redis-cli", "--no-auth-warning", "--user", "setqueue", "--pass", password])
    out = stack.docker.compose.execute("redis", ["sh", "-c", f"{line} {' '.join(command)}"], tty=False)
    return (out or "").strip()


def test_the_services_log_in_as_the_acl_user_which_may_do_nothing_else(stack: Stack) -> None:
    """The services log in as ACL user setqueue, which may not touch other keys nor read the config."""
    clients = stack.redis("CLIENT", "LIST")
    users = {
        field.split("=", 1)[1] for line in clients.splitlines() for field in line.split() if field.startswith("user=")
    }
    assert "setqueue" in users, clients
    assert _as_service_user(stack, "PING") == "PONG"
    assert "NOPERM" in _as_service_user(stack, "SET", "elsewhere", "1")
    assert "NOPERM" in _as_service_user(stack, "CONFIG", "GET", "requirepass")
    assert "NOPERM" in _as_service_user(stack, "FLUSHALL")
    stack.redis("ACL", "LOG", "RESET")  # those three were ours: from here on, nothing may be refused
    # Every service read the eviction policy (INFO, granted).
    stack.wait(
        lambda: stack.by_label("setqueue_redis_noeviction", "job"),
        lambda seen: seen == {"creator": 1.0, "worker": 1.0, "cleaner": 1.0},
        "every service to report noeviction",
    )


def test_jobs_flow_from_creator_to_done(stack: Stack) -> None:
    first = stack.wait(stack.counts, lambda c: c["done"] > 0, "the first jobs in done")
    stack.wait(stack.counts, lambda c: c["done"] > first["done"], "done to keep growing")
    created = stack.wait(lambda: stack.scalar("sum(setqueue_jobs_created_total)"), bool, "created jobs in Prometheus")
    assert created is not None
    assert 0 < created <= CREATE_TOTAL


# -- monitoring, while the creator still creates


def problems(stack: Stack, queries: list[tuple[str, str]]) -> list[str]:
    """What is wrong with each (where, PromQL): an error, or no data unless it is a condition (which may
    filter everything out) whose series exist, or it reads only series of a task registry's worker and
    the stack has none (its demo worker serves a plain handler; test_promtool runs those on data)."""
    found = []
    for where, expr in queries:
        answer = stack.query(expr)
        if answer["status"] != "success":
            found.append(f"{where}: {answer.get('errorType')}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            names = metric_names(expr)
            if names and names <= TASK_REGISTRY_ONLY and not any(stack.values(f"count({n})") for n in names):
                continue
            if not is_filter(expr):
                found.append(f"{where}: no data for {expr}")
            else:
                found += [f"{where}: no series {n}" for n in metric_names(expr) if not stack.values(f"count({n})")]
    return found


def test_every_dashboard_query_is_valid_and_returns_data(stack: Stack) -> None:
    assert stack.creator_running(), CREATOR_DONE_TOO_SOON
    queries = [(where, substitute_grafana_variables(expr)) for where, expr in dashboard_queries(load_dashboard())]
    assert queries
    # Rates need two scrapes, the histograms a job or two.
    stack.wait(lambda: problems(stack, queries), lambda p: not p, "every dashboard query to return data", timeout=60)


def test_queue_wait_p99_tracks_the_oldest_pending_age_under_a_growing_backlog(stack: Stack) -> None:
    """One worker falls behind the creator. Claims take the oldest job first, so the dashboard's
    queue-wait p99 stays close to the oldest pending age (a random draw would not)."""
    assert stack.creator_running(), CREATOR_DONE_TOO_SOON
    panel = next(p for p in load_dashboard()["panels"] if p.get("title") == "Queue wait")
    p99 = substitute_grafana_variables(next(t["expr"] for t in panel["targets"] if t["legendFormat"] == "p99"))
    oldest = "max(setqueue_oldest_pending_age_seconds)"
    stack.wait(lambda: stack.scalar(oldest), lambda age: (age or 0) >= 8, "the backlog's oldest job to wait 8 s")

    def both() -> tuple[float, float]:
        return stack.scalar(p99) or 0.0, stack.scalar(oldest) or 0.0

    # Within the buckets' resolution (1.5x apart) and a scrape or two of lag.
    stack.wait(both, lambda pair: 0.6 * pair[1] <= pair[0] <= 1.6 * pair[1], "queue-wait p99 close to the oldest age")


def test_every_alert_rule_is_loaded_evaluates_and_parses(stack: Stack) -> None:
    rules = alert_rules()

    def loaded() -> dict[str, dict[str, Any]]:
        groups = stack.prom_api("/api/v1/rules")["data"]["groups"]
        return {r["name"]: r for g in groups for r in g["rules"] if r["type"] == "alerting"}

    evaluated = stack.wait(
        loaded,
        lambda got: (
            set(got) == {r["alert"] for r in rules}
            and all(
                r.get("health") == "ok" and not r.get("lastEvaluation", "0001").startswith("0001") for r in got.values()
            )
        ),
        "Prometheus to load and evaluate every rule of alerts.yml",
        timeout=60,
    )
    assert all(r["health"] == "ok" for r in evaluated.values()), evaluated

    assert not problems(stack, [(rule["alert"], rule["expr"]) for rule in rules])  # healthy: conditions filter all out
    firing = stack.values('count(ALERTS{alertstate="firing"})')
    assert not firing, "alerts fire on a healthy stack: " + json.dumps(stack.query('ALERTS{alertstate="firing"}'))


# -- operations


def carries_on(stack: Stack, done: int) -> None:
    stack.wait(stack.counts, lambda c: c["done"] > done, "the services to reconnect and carry on")
    stack.wait_redis_up()


def test_redis_restart_mid_run_loses_nothing(stack: Stack) -> None:
    assert stack.redis("ACL", "LOG") == "", "Redis refused the services' ACL user a command"  # a restart clears it
    before = stack.counts()
    assert before["todos"] + before["in_progress"] > 0, f"no work left to test with ({before}); raise CREATE_TOTAL"
    stack.docker.compose.restart("redis")
    stack.wait_for_redis()
    after = stack.counts()
    assert after["done"] >= before["done"], f"done shrank across the restart: {before} -> {after}"
    carries_on(stack, after["done"])


def test_redis_outage_is_visible_and_survived(stack: Stack) -> None:
    # Unlike a restart (well under a second), a stopped Redis stays away until the services notice.
    stack.docker.compose.stop("redis")
    try:
        stack.wait(
            lambda: stack.scalar("min(setqueue_redis_up)"),
            lambda v: v == 0,
            "Prometheus to see a service report Redis down",
            timeout=60,
        )
    finally:
        stack.docker.compose.start("redis")
    stack.wait_for_redis()
    carries_on(stack, stack.counts()["done"])


def test_scaling_workers_adds_scrape_targets_that_share_the_work(stack: Stack) -> None:
    stack.scale_workers(WORKERS)
    assert len(stack.containers("worker")) == WORKERS
    stack.wait_for_workers_scraped_and_working(WORKERS)


def test_sigkilled_workers_lose_no_job(stack: Stack) -> None:
    stack.scale_workers(WORKERS)
    counts = stack.counts()
    assert counts["todos"] > 0, f"no backlog left to test with ({counts}); raise CREATE_TOTAL"
    victims = stack.containers("worker")[:2]
    stack.docker.kill(victims, signal="SIGKILL")
    for victim in victims:
        victim.reload()
        assert not victim.state.running

    stack.wait(
        lambda: stack.scalar("sum(setqueue_cleaner_requeued_total)"),
        bool,
        "the cleaner to requeue the killed workers' jobs",
        timeout=60,
    )
    before = stack.counts()["done"]
    stack.wait(stack.counts, lambda c: c["done"] > before, "the surviving workers to carry on")
    stack.scale_workers(WORKERS)  # the killed ones again, for the rest of the run


# -- the end: every job done exactly once


def test_every_created_job_ends_in_done(stack: Stack) -> None:
    final = stack.wait(
        stack.counts,
        lambda c: c["todos"] == c["in_progress"] == c["scheduled"] == 0 and c["done"] + c["failed"] >= CREATE_TOTAL,
        f"all {CREATE_TOTAL} jobs to finish",
        timeout=300,
    )
    assert final == {
        "todos": 0,
        "in_progress": 0,
        "done": CREATE_TOTAL,
        "failed": 0,
        "scheduled": 0,
        "cancelled": 0,
        "waiting": 0,
    }
    stack.assert_creator_ended_once()


def test_cli_stats_and_metrics_agree_with_redis(stack: Stack) -> None:
    counts = stack.counts()
    cli = json.loads(stack.docker.compose.execute("cleaner", ["setqueue", "stats", "--json"], tty=False) or "{}")
    assert {k: cli.get(k) for k in counts} == counts

    # At most CREATE_TOTAL: it exits right after its last batch, whose increments may go unscraped.
    created = stack.scalar("sum(last_over_time(setqueue_jobs_created_total[30m]))")
    assert created is not None
    assert 0 < created <= CREATE_TOTAL == counts["done"] + counts["failed"]

    # The cleaner's gauges catch up with Redis within a sweep and a scrape.
    stack.wait(
        lambda: stack.by_label("setqueue_queue_depth", "state"),
        lambda depth: depth == {state: float(n) for state, n in counts.items()},
        "setqueue_queue_depth to match Redis",
        timeout=60,
    )
    assert stack.scalar("max(setqueue_oldest_pending_age_seconds)") == 0
    assert (stack.scalar("sum(setqueue_jobs_retried_total)") or 0) > 0
    assert (stack.scalar('sum(setqueue_jobs_completed_total{outcome="success"})') or 0) > 0


def test_the_cleaner_audit_knows_every_job_and_finds_none_lost(stack: Stack) -> None:
    # Through all of the above: every id in exactly one state, and a job that ran twice had lost its lease.
    findings = ("created", "lost", "in_two_states", "unexplained_duplicates")
    stack.wait(
        lambda: {name: stack.scalar(f"max(setqueue_audit_{name})") for name in findings},
        lambda seen: seen == {"created": CREATE_TOTAL, "lost": 0, "in_two_states": 0, "unexplained_duplicates": 0},
        "the cleaner's audit of all the jobs, as Prometheus scraped it",
        timeout=60,
    )


def test_redis_refused_the_services_nothing(stack: Stack) -> None:
    """Since Redis last started (which empties its ACL LOG)."""
    assert stack.redis("ACL", "LOG") == ""
