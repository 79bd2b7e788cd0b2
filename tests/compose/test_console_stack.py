"""The console in the compose stack finds its queue and lists its workers by container host name."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest
from python_on_whales import DockerClient

from tests.compose.stack import Stack, running_stack
from tests.support import free_port

pytestmark = pytest.mark.compose

SETTINGS = {"CREATE_TOTAL": "0", "CREATE_RATE": "5", "WORK_SECONDS": "0.05", "FAIL_RATE": "0"}  # creates on
WORKERS = 2


@pytest.fixture(scope="module")
def stack(docker: DockerClient) -> Iterator[Stack]:
    port = str(free_port())
    services = ["redis", "creator", "worker", "console"]
    with running_stack(docker, {**SETTINGS, "CONSOLE_PORT": port}, "compose-console", services=services) as s:
        yield s


def page(stack: Stack, path: str) -> str:
    port = stack.settings["CONSOLE_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        assert response.status == 200
        return str(response.read().decode())


def test_the_console_finds_the_stack_queue(stack: Stack) -> None:
    found = stack.wait(lambda: page(stack, "/"), lambda body: 'data-queue="compose-console"' in body, "the queue")
    assert "read-only" in found, "without CONSOLE_TOKEN the console only reads"


def test_the_workers_page_lists_the_stack_workers(stack: Stack) -> None:
    stack.scale_workers(WORKERS)
    hosts = {c.config.hostname for c in stack.containers("worker")}
    assert len(hosts) == WORKERS

    def listed() -> set[str]:
        body = page(stack, "/workers")
        return set(
            re.findall(r'<tr data-worker="[^"]*" data-pid="\d+">\s*<td><code>[^<]*</code></td><td>([^<]+)</td>', body)
        )

    stack.wait(listed, lambda found: found == hosts, f"the {WORKERS} workers on the console's workers page")
