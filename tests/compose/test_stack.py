"""The reference deployment end to end: one compose stack (redis, creator, worker, cleaner,
prometheus) built from this checkout, driven through scaling, SIGKILLed workers and a Redis
restart, and checked from Redis, from the setqueue CLI and from Prometheus.

The tests share one stack and run in file order, as a story: the creator makes CREATE_TOTAL jobs
(about a minute at CREATE_RATE) while the tests look at the live stack; at the end every job
must be in done. Waiting is bounded by deadlines; no test asserts how fast anything is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from python_on_whales import DockerClient

from tests.compose.observability import (
    alert_rules,
    dashboard_queries,
    is_filter,
    load_dashboard,
    metric_names,
    substitute_grafana_variables,
)
from tests.compose.stack import EVERY_JOB_ENDS_IN_DONE, Stack, image_overrides, running_stack

pytestmark = pytest.mark.compose

CREATE_TOTAL = 3000
WORKERS = 4
SETTINGS = {
    **EVERY_JOB_ENDS_IN_DONE,
    "CREATE_RATE": "50",  # 3000 jobs take the creator about a minute
    "CREATE_TOTAL": str(CREATE_TOTAL),
    "WORK_SECONDS": "0.1",
    "LOG_LEVEL": "INFO",
    "AUDIT": "true",  # the dashboard's "Nothing lost" row needs the cleaner's audit
    "AUDIT_INTERVAL": "5",
    "REDIS_SERVICE_PASSWORD": "services-test-password",  # the ACL user the services log in as
}


@pytest.fixture(scope="module")
def stack(docker: DockerClient) -> Iterator[Stack]:
    with running_stack(docker, {**image_overrides(), **SETTINGS}, queue_name="compose-test") as s:
        yield s


def creator_running(stack: Stack) -> bool:
    return bool(stack.containers("creator"))


# -- the stack as deployed ----------------------------------------------------------------------


def test_every_service_is_healthy_and_scraped(stack: Stack) -> None:
    # `compose up --wait` returned, so every container passed its healthcheck; Prometheus must
    # also find and scrape one target per service through Docker's DNS.
    stack.wait(
        lambda: stack.by_label('count by (job) (up{job=~"creator|worker|cleaner"} == 1)', "job"),
        lambda up: up == {"creator": 1, "worker": 1, "cleaner": 1},
        "one healthy scrape target per service",
    )
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
    """redis-cli in the redis container as the services' ACL user."""
    password = SETTINGS["REDIS_SERVICE_PASSWORD"]
    line = " ".join(["REDISCLI_AUTH=", "redis-cli", "--no-auth-warning", "--user", "setqueue", "--pass", password])
    out = stack.docker.compose.execute("redis", ["sh", "-c", f"{line} {' '.join(command)}"], tty=False)
    return (out or "").strip()


def test_the_services_log_in_as_the_acl_user_which_may_do_nothing_else(stack: Stack) -> None:
    """The services' connections are the ACL user setqueue's (setqueue acl-rule); it may not touch a
    key outside setqueue:* nor read the server's configuration (its passwords)."""
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
    # Every service read the eviction policy (INFO, which the rule grants): noeviction.
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


# -- monitoring against the live stack (while the creator still creates) ---------------------


def test_every_dashboard_query_is_valid_and_returns_data(stack: Stack) -> None:
    assert creator_running(stack), "the creator already finished: raise CREATE_TOTAL so it outlives this test"
    queries = [(where, substitute_grafana_variables(expr)) for where, expr in dashboard_queries(load_dashboard())]
    assert queries

    def problems() -> list[str]:
        found = []
        for where, expr in queries:
            answer = stack.query(expr)
            if answer["status"] != "success":
                found.append(f"{where}: {answer.get('errorType')}: {answer.get('error')}")
            elif not answer["data"]["result"]:
                if not is_filter(expr):
                    found.append(f"{where}: no data for {expr}")
                else:  # a condition may filter everything out; what it looks at must exist
                    found.extend(
                        f"{where}: no series {name}"
                        for name in metric_names(expr)
                        if not stack.values(f"count({name})")
                    )
        return found

    # Rates need two scrapes and the histograms a job or two; give the stack a moment.
    stack.wait(problems, lambda p: not p, "every dashboard query to return data", timeout=60)


def test_queue_wait_p99_tracks_the_oldest_pending_age_under_a_growing_backlog(stack: Stack) -> None:
    """One worker finishes fewer jobs than the creator makes, so the backlog grows. Claims take the
    oldest job first, so the jobs claimed now waited about as long as the oldest one still waiting:
    the dashboard's queue-wait p99 (its own query) stays close to the oldest pending age. With a
    random draw it would not (some jobs wait far longer than their turn)."""
    assert creator_running(stack), "the creator already finished: raise CREATE_TOTAL so it outlives this test"
    panel = next(p for p in load_dashboard()["panels"] if p.get("title") == "Queue wait")
    p99 = substitute_grafana_variables(next(t["expr"] for t in panel["targets"] if t["legendFormat"] == "p99"))
    oldest = "max(setqueue_oldest_pending_age_seconds)"
    stack.wait(lambda: stack.scalar(oldest), lambda age: (age or 0) >= 8, "the backlog's oldest job to wait 8 s")

    def both() -> tuple[float, float]:
        return stack.scalar(p99) or 0.0, stack.scalar(oldest) or 0.0

    # Within the histogram's resolution (buckets 1.5x apart) and a scrape or two of lag.
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

    for rule in rules:
        expr = rule["expr"]
        answer = stack.query(expr)
        assert answer["status"] == "success", f"{rule['alert']}: {answer.get('error')}"
        if not answer["data"]["result"]:  # healthy: the condition filters everything out
            assert is_filter(expr), f"{rule['alert']}: empty result, yet it is no condition"
            for name in metric_names(expr):
                assert stack.values(f"count({name})"), f"{rule['alert']} looks at {name}, which has no series"

    firing = stack.values('count(ALERTS{alertstate="firing"})')
    assert not firing, "alerts fire on a healthy stack: " + json.dumps(stack.query('ALERTS{alertstate="firing"}'))


# -- operations -----------------------------------------------------------------------------------


def test_redis_restart_mid_run_loses_nothing(stack: Stack) -> None:
    assert stack.redis("ACL", "LOG") == "", "Redis refused the services' ACL user a command"  # a restart clears it
    before = stack.counts()
    assert before["todos"] + before["in_progress"] > 0, f"no work left to test with ({before}); raise CREATE_TOTAL"
    # While the creator is (most likely) still creating and the one worker has a backlog.
    stack.docker.compose.restart("redis")
    stack.wait(lambda: stack.redis("PING"), lambda pong: pong == "PONG", "Redis to answer again")
    after = stack.counts()
    assert after["done"] >= before["done"], f"done shrank across the restart: {before} -> {after}"
    stack.wait(stack.counts, lambda c: c["done"] > after["done"], "the services to reconnect and carry on")
    stack.wait(lambda: stack.scalar("min(setqueue_redis_up)"), lambda v: v == 1, "every service to report Redis up")


def test_redis_outage_is_visible_and_survived(stack: Stack) -> None:
    # A restart takes Redis away for well under a second; a stopped Redis stays away until the
    # services notice: setqueue_redis_up drops to 0, then every service recovers on its own.
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
    stack.wait(lambda: stack.redis("PING"), lambda pong: pong == "PONG", "Redis to answer again")
    before = stack.counts()["done"]
    stack.wait(stack.counts, lambda c: c["done"] > before, "the services to reconnect and carry on")
    stack.wait(lambda: stack.scalar("min(setqueue_redis_up)"), lambda v: v == 1, "every service to report Redis up")


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

    # Their leases expire (LEASE_SECONDS) and the cleaner puts their jobs back into todos.
    stack.wait(
        lambda: stack.scalar("sum(setqueue_cleaner_requeued_total)"),
        bool,
        "the cleaner to requeue the killed workers' jobs",
        timeout=60,
    )
    before = stack.counts()["done"]
    stack.wait(stack.counts, lambda c: c["done"] > before, "the surviving workers to carry on")
    stack.scale_workers(WORKERS)  # start the killed ones again for the rest of the run


# -- the end: every job done exactly once ------------------------------------------------------------


def test_every_created_job_ends_in_done(stack: Stack) -> None:
    final = stack.wait(
        stack.counts,
        lambda c: c["todos"] == c["in_progress"] == c["scheduled"] == 0 and c["done"] + c["failed"] >= CREATE_TOTAL,
        f"all {CREATE_TOTAL} jobs to finish",
        timeout=300,
    )
    assert final == {"todos": 0, "in_progress": 0, "done": CREATE_TOTAL, "failed": 0, "scheduled": 0, "cancelled": 0}

    # The creator stopped by itself after CREATE_TOTAL and was not restarted into a second run.
    (creator,) = stack.docker.compose.ps(services=["creator"], all=True)
    assert not creator.state.running
    assert creator.state.exit_code == 0
    assert creator.restart_count == 0


def test_cli_stats_and_metrics_agree_with_redis(stack: Stack) -> None:
    counts = stack.counts()
    cli = json.loads(stack.docker.compose.execute("cleaner", ["setqueue", "stats", "--json"], tty=False) or "{}")
    assert {k: cli.get(k) for k in counts} == counts

    # Prometheus saw the creator count up to at most CREATE_TOTAL. (It exits right after its last
    # batch, so the increments after its last scrape are never scraped; done == CREATE_TOTAL in
    # Redis is the exact check.)
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
    # FAIL_RATE made some attempts fail; they were retried, not lost.
    assert (stack.scalar("sum(setqueue_jobs_retried_total)") or 0) > 0
    assert (stack.scalar('sum(setqueue_jobs_completed_total{outcome="success"})') or 0) > 0


def test_the_cleaner_audit_knows_every_job_and_finds_none_lost(stack: Stack) -> None:
    # Through the workers killed, Redis restarted and stopped above: every id the creator made is
    # in exactly one state, and a job that ran twice had lost its lease.
    findings = ("created", "lost", "in_two_states", "unexplained_duplicates")
    stack.wait(
        lambda: {name: stack.scalar(f"max(setqueue_audit_{name})") for name in findings},
        lambda seen: seen == {"created": CREATE_TOTAL, "lost": 0, "in_two_states": 0, "unexplained_duplicates": 0},
        "the cleaner's audit of all the jobs, as Prometheus scraped it",
        timeout=60,
    )


def test_redis_refused_the_services_nothing(stack: Stack) -> None:
    """Since Redis last started (its ACL LOG starts empty), no command of a service or of the CLI
    was refused to the ACL user."""
    assert stack.redis("ACL", "LOG") == ""
