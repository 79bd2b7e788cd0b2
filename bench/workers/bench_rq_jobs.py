from __future__ import annotations

from typing import Any

from bench_common import run_job


def job(arg: Any) -> None:
    run_job(arg)
