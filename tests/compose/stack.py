"""A compose project of the reference deployment, driven with python-on-whales: built and started
under a unique project name, looked into (Redis, Prometheus, containers), always torn down.

Plain Python, no pytest: the compose tests (through ``conftest.py``) and the chaos driver
(``scripts/chaos``, ``tests/compose/chaos.py``) both use it. On a machine without registry access
set PYTHON_IMAGE, REDIS_IMAGE and PROMETHEUS_IMAGE to local images (see
../shared/offline-docker/README.md); they are passed through to Compose. COMPOSE_TEST_LOGS=<file>
keeps the stack's logs there before it is torn down.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from tests.compose.observability import COMPOSE_FILE, REPO
from tests.support import free_port

T = TypeVar("T")

# The stack the tests start; grafana has no image on offline machines and is checked statically.
SERVICES = ["redis", "creator", "worker", "cleaner", "prometheus"]
# The demo settings of a stack test in which every job must end in done, whatever befalls it.
EVERY_JOB_ENDS_IN_DONE = {
    "CREATE_BATCH": "10",
    "CLAIM_BATCH": "5",  # a worker holds up to 5 jobs, so a killed one takes jobs with it
    "WORK_JITTER": "0.5",
    "FAIL_RATE": "0.05",  # failures are retried...
    "MAX_ATTEMPTS": "25",  # ...and never run out of attempts, so every job must end in done
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
}


class WaitTimeout(AssertionError):
    """A wait ran past its deadline (an AssertionError, so that a test using it simply fails)."""


def wait_for(
    probe: Callable[[], T],
    ok: Callable[[T], bool],
    what: str,
    *,
    timeout: float = 90.0,
    interval: float = 1.0,
    diagnostics: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe()`` until ``ok(result)``; raise WaitTimeout with the last result (and
    diagnostics) at the deadline. Deadlines bound waiting for behaviour; they never assert speed."""
    deadline = time.monotonic() + timeout
    last: Any = None
    error: Exception | None = None
    while True:
        try:
            last = probe()
            error = None
            if ok(last):
                return last  # type: ignore[no-any-return]
        except Exception as exc:  # a probe may fail while a service restarts; retry until the deadline
            error = exc
        if time.monotonic() >= deadline:
            detail = f"last result: {last!r}" + (f"; last error: {error!r}" if error else "")
            extra = f"\n{diagnostics()}" if diagnostics else ""
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; {detail}{extra}")
        time.sleep(interval)


@dataclass
class Stack:
    """A running compose project and ways to look into it."""

    docker: DockerClient
    project: str
    settings: dict[str, str]
    prometheus_url: str
    queue_name: str
    redis_service: str = "redis"  # the service redis() runs redis-cli in
    notes: list[str] = field(default_factory=list)

    # -- Prometheus -------------------------------------------------------------------------

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
        """The raw /api/v1/query answer (status, data, error)."""
        return self.prom_api("/api/v1/query", query=expr)

    def values(self, expr: str) -> list[float]:
        answer = self.query(expr)
        assert answer["status"] == "success", f"{expr}: {answer.get('error')}"
        return [float(sample["value"][1]) for sample in answer["data"]["result"]]

    def by_label(self, expr: str, label: str) -> dict[str, float]:
        """An instant query's values by the value of ``label``."""
        answer = self.query(expr)
        assert answer["status"] == "success", f"{expr}: {answer.get('error')}"
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in answer["data"]["result"]}

    def scalar(self, expr: str) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        found = self.values(expr)
        assert len(found) <= 1, f"{expr} returned {len(found)} series"
        return found[0] if found else None

    # -- Redis ------------------------------------------------------------------------------

    def key(self, state: str) -> str:
        return f"setqueue:{{{self.queue_name}}}:{state}"

    def redis(self, *args: str, service: str | None = None) -> str:
        """A redis-cli command in the redis container, or ``service``'s (REDISCLI_AUTH there
        carries the password)."""
        where = service or self.redis_service
        out = self.docker.compose.execute(where, ["redis-cli", "--no-auth-warning", *args], tty=False)
        return (out or "").strip()

    def counts(self) -> dict[str, int]:
        """The size of each of the six states, straight from Redis (one redis-cli call)."""
        script = "return {" + ", ".join(f"redis.call('{c}', KEYS[{i}])" for i, c in enumerate(STATE_KEYS.values(), 1))
        keys = [self.key(state) for state in STATE_KEYS]
        out = self.redis("EVAL", script + "}", str(len(keys)), *keys)
        return dict(zip(STATE_KEYS, (int(n) for n in out.split()), strict=True))

    # -- containers -------------------------------------------------------------------------

    def containers(self, service: str) -> list[Any]:
        return [c for c in self.docker.compose.ps(services=[service]) if c.state.running]

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
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the duration, then the environment as it was."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


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
    """Build and start ``services`` of ``compose_file`` with ``settings`` as Compose variables;
    always tear down."""
    project = f"{project_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    port = free_port()
    env = {"QUEUE_NAME": queue_name, "PROMETHEUS_PORT": str(port), **settings}
    client = DockerClient(
        compose_files=[compose_file],
        compose_project_name=project,
        compose_project_directory=REPO,
    )
    stack = Stack(client, project, env, f"http://127.0.0.1:{port}", queue_name, redis_service)
    # Compose reads variables from the process environment (which beats any .env file); set ours
    # for the life of the stack so every compose call (up, scale, restart) sees the same values.
    with environment(env):
        try:
            client.compose.up(services=list(services), build=True, detach=True, wait=True, wait_timeout=240, quiet=True)
            yield stack
        finally:
            logs_to = os.environ.get("COMPOSE_TEST_LOGS")  # a file to keep the stack's logs in
            if logs_to:
                with contextlib.suppress(DockerException, OSError), open(logs_to, "w", encoding="utf-8") as f:
                    f.write(client.compose.logs(timestamps=True) or "")
            try:
                client.compose.down(volumes=True, remove_orphans=True, remove_images="local", timeout=10, quiet=True)
            except DockerException as exc:  # report, but do not hide the test's own failure
                print(f"compose down of {project} failed: {exc}")


def image_overrides() -> dict[str, str]:
    """PYTHON_IMAGE / REDIS_IMAGE / PROMETHEUS_IMAGE as set in the environment (offline stand-ins)."""
    return {name: os.environ[name] for name in IMAGE_VARIABLES if os.environ.get(name)}
