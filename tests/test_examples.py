"""The example app runs end to end: a real worker serving its tasks, its asyncio producer as users run it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from tests.support import REPO_ROOT
from tests.support.procs import Proc, base_env


def test_the_shop_example_runs_end_to_end(start_worker: Callable[..., Proc], redis_url: str, queue_name: str) -> None:
    start_worker(queue_name, JOB_HANDLER="examples.shop.tasks:tasks")
    run = subprocess.run(
        [sys.executable, "-m", "examples.shop.producer"],
        env=base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "charged 4999 cents for order-1001 (sent twice: True)",
        "email to ada@example.com: sent",
        "resized img/0-640w.jpg, img/1-640w.jpg, img/2-640w.jpg",
        "welcome email: sent",
    ]
