"""setqueue.testing, the pytest plugin for users' own tests: its example (examples/shop's tests) runs
as a user runs it, in a pytest of its own, on the embedded server with real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples.shop import tasks as shop_tasks
from setqueue.runtime.settings import SETTINGS
from setqueue.testing import handler_spec
from tests.support import REPO_ROOT
from tests.support.embedded import embedded_binary


def test_the_plugins_example_passes_as_a_user_runs_it() -> None:
    embedded_binary()  # fail under CI, else skip, without the embedded extra
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/shop", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("4 passed"), run.stdout


def test_a_worker_that_cannot_start_fails_the_test_with_its_own_line(tmp_path: Path) -> None:
    embedded_binary()
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["setqueue.testing"]\n')
    (tmp_path / "test_mine.py").write_text(
        "def test_mine(setqueue_worker):\n    setqueue_worker('no_such_module:handle')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
        cwd=tmp_path,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the worker exited with code 2:" in run.stdout, run.stdout
    assert "JOB_HANDLER" in run.stdout and "no_such_module" in run.stdout, run.stdout


def user_env() -> dict[str, str]:
    """This environment without any setqueue setting."""
    names = {setting.name for setting in SETTINGS}
    return {k: v for k, v in os.environ.items() if k not in names}


def test_a_handler_is_named_as_job_handler_takes_it() -> None:
    assert handler_spec("myapp.jobs:handle") == "myapp.jobs:handle"
    assert handler_spec(shop_tasks.tasks) == "examples.shop.tasks:tasks"  # not this module, which imports it
    assert handler_spec(shop_tasks.send_email.func) == "examples.shop.tasks:send_email"
    with pytest.raises(TypeError, match="give it as 'module:attribute'"):
        handler_spec(lambda lease: None)
