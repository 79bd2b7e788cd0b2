"""setqueue.testing, the pytest plugin for users' own tests: its example (examples/shop's tests) runs
as a user runs it, in a pytest of its own, on the embedded server with real workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from examples.shop import tasks as shop_tasks
from setqueue.runtime.settings import SETTINGS
from setqueue.testing import handler_spec
from tests.support import REPO_ROOT
from tests.support.embedded import embedded_binary


def test_the_plugins_example_passes_as_a_user_runs_it() -> None:
    embedded_binary()  # fail under CI, else skip, without the embedded extra
    names = {setting.name for setting in SETTINGS}
    env = {k: v for k, v in os.environ.items() if k not in names}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/shop", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("4 passed"), run.stdout


def test_a_handler_is_named_as_job_handler_takes_it() -> None:
    assert handler_spec("myapp.jobs:handle") == "myapp.jobs:handle"
    assert handler_spec(shop_tasks.tasks) == "examples.shop.tasks:tasks"  # not this module, which imports it
    assert handler_spec(shop_tasks.send_email.func) == "examples.shop.tasks:send_email"
    with pytest.raises(TypeError, match="give it as 'module:attribute'"):
        handler_spec(lambda lease: None)
