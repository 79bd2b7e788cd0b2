"""A 75-second chaos run (tests/compose/chaos.py) with every kind of fault, chains and fan-ins made
beside them: its audit must pass."""

from __future__ import annotations

import subprocess
import sys

import pytest
from python_on_whales import DockerClient

from tests.compose.chaos import FAULTS, Plan, run
from tests.support import REPO_ROOT

pytestmark = pytest.mark.compose


def test_a_short_chaos_run_loses_nothing(docker: DockerClient) -> None:
    plan = Plan(minutes=1.25, gap_seconds=(2.0, 5.0))
    verdict = run(plan, docker)
    print(verdict.markdown())  # shown when the test fails
    assert set(verdict.faults) == set(FAULTS), "every kind of fault, at least once"
    final = verdict.final
    assert verdict.drained
    assert verdict.workflow_batches > 0, "chains and fan-ins ran beside the faults"
    assert final.created == verdict.expected_ids
    assert final.lost == 0, final.lost_ids
    assert final.in_two_states == 0, final.two_state_ids
    assert final.unexplained_duplicates == 0, final.unexplained_ids
    assert final.states["done"] + final.states["failed"] == verdict.expected_ids
    assert final.dependents_released == final.dependents_expected > 0, final.workflow_ids
    assert final.callbacks_ran == final.callbacks_expected > 0, final.workflow_ids
    assert final.dependents_released_twice == final.callbacks_ran_twice == 0
    assert final.successful_runs >= final.states["done"]
    assert verdict.cleaner_samples > 0, "the cleaner's continuous audit was never seen"
    assert verdict.passed, verdict.problems


def test_the_chaos_driver_runs_without_pytest() -> None:
    code = "import sys, tests.compose.chaos; assert 'pytest' not in sys.modules, 'pytest imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
