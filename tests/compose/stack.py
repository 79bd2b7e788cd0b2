"""A compose project of the reference deployment (python-on-whales) under a unique name, looked into,
always torn down. Plain Python: the compose tests and scripts/chaos use it. Offline, set PYTHON_IMAGE,
REDIS_IMAGE and PROMETHEUS_IMAGE to local images (../shared/offline-docker/README.md);
COMPOSE_TEST_LOGS=<file> keeps the stack's logs."""

from __future__ import annotations

import contextlib
import json
import os
import time
import unittest.mock
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from tests.compose.observability import COMPOSE_FILE, REPO
from tests.support import free_port

T = TypeVar("T")

SERVICES = ["redis", "creator", "worker", "cleaner", "prometheus"]  # grafana: no image offline
EVERY_JOB_ENDS_IN_DONE = {
    "CREATE_BATCH": "10",
    "CLAIM_BATCH": "5",  # a killed worker takes jobs with it
    "WORK_JITTER": "0.5",
    "FAIL_RATE": "0.05",
    "MAX_ATTEMPTS": "25",  # failures never run out of attempts: every job must end in done
    "LEASE_SECONDS": "3",
    "SWEEP_INTERVAL": "1",
}
IMAGE_VARIABLES = ("PYTHON_IMAGE", "REDIS_IMAGE", "PROMETHEUS_IMAGE")
STATE_KEYS = {
    "todos": "ZCARD",
    "in_progress": "ZCARD",
    "done": "SCARD",
    "failed": "SCARD",
    "scheduled": "ZCARD",
    "cancelled": "SCARD",
    "waiting": "ZCARD",
}


class WaitTimeout(AssertionError):
    """A wait past its deadline: an AssertionError, so a test simply fails."""


def wait_for(
    probe: Callable[[], T],
    ok: Callable[[T], bool],
    what: str,
    *,
    timeout: float = 90.0,
    interval: float = 1.0,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe()`` until ``ok(result)``, else WaitTimeout with the last result and diagnostics."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: Exception | None = None
    while True:
        try:
            last = probe()
            error = None
            if ok(last):
                return last  # type: ignore[no-any-return]
        except Exception as exc:  # a probe may fail while a service restarts
            error = exc
        if time.monotonic() >= deadline:
            detail = f"last result: {last!r}" + (f"; last error: {error!r}" if error else "")
            extra = f"\n{diagnostics()}" if diagnostics else ""
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; {detail}{extra}")
        time.sleep(interval)


@dataclass
class Stack:
    docker: DockerClient
    project: str
    settings: dict[str, str]
    prometheus_url: str
    queue_name: str
    redis_service: str = "redis"  # the service redis() runs redis-cli in

    def prom_api(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.prometheus_url}{path}"
        data = urllib.parse.urlencode(params).encode() if params else None
        try:
            with urllib.request.urlopen(url, data=data, timeout=10) as response:
                body: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422 carry the PromQL error as JSON
            body = json.load(exc)
        return body

    def query(self, expr: str) -> dict[str, Any]:
        return self.prom_api("/api/v1/query", query=expr)

    def values(self, expr: str) -> list[float]:
        answer = self.query(expr)
        assert answer["status"] == "success", f"{expr}: {answer.get('error')}"
        return [float(sample["value"][1]) for sample in answer["data"]["result"]]

    def by_label(self, expr: str, label: str) -> dict[str, float]:
        answer = self.query(expr)
        assert answer["status"] == "success", f"{expr}: {answer.get('error')}"
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in answer["data"]["result"]}

    def scalar(self, expr: str) -> float | None:
        found = self.values(expr)
        assert len(found) <= 1, f"{expr} returned {len(found)} series"
        return found[0] if found else None

    def wait_scraped(self, **up: int) -> None:
        """Prometheus scrapes ``up`` healthy targets of each service."""
        self.wait(
            lambda: self.by_label('count by (job) (up{job=~"creator|worker|cleaner"} == 1)', "job"),
            lambda found: found == up,
            "healthy scrape targets " + str(up),
        )

    def wait_redis_up(self) -> None:
        self.wait(lambda: self.scalar("min(setqueue_redis_up)"), lambda v: v == 1, "every service to report Redis up")

    def key(self, state: str) -> str:
        return f"setqueue:{{{self.queue_name}}}:{state}"

    def redis(self, *args: str, service: str | None = None) -> str:
        """redis-cli in the redis container or ``service`` (its REDISCLI_AUTH has the password)."""
        where = service or self.redis_service
        out = self.docker.compose.execute(where, ["redis-cli", "--no-auth-warning", *args], tty=False)
        return (out or "").strip()

    def wait_for_redis(self, timeout: float = 90.0) -> None:
        self.wait(lambda: self.redis("PING"), lambda pong: pong == "PONG", "Redis to answer", timeout)

    def counts(self) -> dict[str, int]:
        script = "return {" + ", ".join(f"redis.call('{c}', KEYS[{i}])" for i, c in enumerate(STATE_KEYS.values(), 1))
        keys = [self.key(state) for state in STATE_KEYS]
        out = self.redis("EVAL", script + "}", str(len(keys)), *keys)
        return dict(zip(STATE_KEYS, (int(n) for n in out.split()), strict=True))

    def containers(self, service: str) -> list[Any]:
        return [c for c in self.docker.compose.ps(services=[service]) if c.state.running]

    def creator_running(self) -> bool:
        return bool(self.containers("creator"))

    def assert_creator_ended_once(self) -> None:
        """The creator stopped by itself after CREATE_TOTAL and was not restarted into a second run."""
        (creator,) = self.docker.compose.ps(services=["creator"], all=True)
        assert not creator.state.running
        assert creator.state.exit_code == 0
        assert creator.restart_count == 0

    def scale_workers(self, n: int) -> None:
        self.docker.compose.up(services=["worker"], scales={"worker": n}, detach=True, wait=True, quiet=True)

    def wait_for_workers_scraped_and_working(self, n: int) -> None:
        """Prometheus finds ``n`` worker targets (through DNS) and each of them completes jobs."""
        self.wait(
            lambda: self.scalar('count(up{job="worker"} == 1)'),
            lambda found: found == n,
            f"Prometheus to discover {n} worker targets",
        )
        self.wait(
            lambda: self.scalar(
                'count(sum by (instance) (rate(setqueue_jobs_completed_total{outcome="success"}[30s])) > 0)'
            ),
            lambda found: found == n,
            "every worker replica to complete jobs",
        )

    def diagnostics(self) -> str:
        lines = ["--- compose ps"]
        try:
            for c in self.docker.compose.ps(all=True):
                health = c.state.health.status if c.state.health else "-"
                lines.append(f"{c.name}: {c.state.status} health={health} exit={c.state.exit_code}")
            lines.append("--- last log lines")
            lines.append(self.docker.compose.logs(tail="15", timestamps=False) or "")
        except DockerException as exc:
            lines.append(f"(could not read the stack: {exc})")
        return "\n".join(lines)

    def wait(self, probe: Callable[[], T], ok: Callable[[T], bool], what: str, timeout: float = 90.0) -> T:
        return wait_for(probe, ok, what, timeout=timeout, diagnostics=self.diagnostics)


@contextlib.contextmanager
def running_stack(
    docker: DockerClient,
    settings: dict[str, str],
    queue_name: str,
    *,
    services: Sequence[str] = SERVICES,
    project_prefix: str = "setqueue-test",
    compose_file: Path = COMPOSE_FILE,
    redis_service: str = "redis",
) -> Iterator[Stack]:
    """Build and start ``services`` with ``settings`` (over image_overrides()) as Compose variables; always
    tear down."""
    project = f"{project_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    port = free_port()
    env = {"QUEUE_NAME": queue_name, "PROMETHEUS_PORT": str(port), **image_overrides(), **settings}
    client = DockerClient(
        compose_files=[compose_file],
        compose_project_name=project,
        compose_project_directory=REPO,
    )
    stack = Stack(client, project, env, f"http://127.0.0.1:{port}", queue_name, redis_service)
    # Compose reads the process environment (which beats any .env file): ours for the stack's life,
    # so every compose call (up, scale, restart) sees the same values.
    with unittest.mock.patch.dict(os.environ, env):
        try:
            client.compose.up(services=list(services), build=True, detach=True, wait=True, wait_timeout=240, quiet=True)
            yield stack
        finally:
            logs_to = os.environ.get("COMPOSE_TEST_LOGS")
            if logs_to:
                with contextlib.suppress(DockerException, OSError), open(logs_to, "w", encoding="utf-8") as f:
                    f.write(client.compose.logs(timestamps=True) or "")
            try:
                client.compose.down(volumes=True, remove_orphans=True, remove_images="local", timeout=10, quiet=True)
            except DockerException as exc:  # do not hide the test's own failure
                print(f"compose down of {project} failed: {exc}")


def image_overrides() -> dict[str, str]:
    return {name: os.environ[name] for name in IMAGE_VARIABLES if os.environ.get(name)}
