"""The services as real subprocesses, and their /metrics and /healthz."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from setqueue.runtime.settings import DEMO_HANDLER, SETTINGS
from tests.support.redis_server import REPO_ROOT, free_port
from tests.support.waits import wait_until

T = TypeVar("T")

SERVICE_VARS = [setting.name for setting in SETTINGS]


def base_env(**settings: Any) -> dict[str, str]:
    """None of the developer's settings, the demo handler (a worker needs one), then ``settings``."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    env["JOB_HANDLER"] = DEMO_HANDLER
    env.update({k: str(v) for k, v in settings.items()})
    return env


class Proc:
    """``python -m <module>``, its log in a file."""

    def __init__(self, module: str, log_dir: Path, env: Mapping[str, str], *, name: str | None = None) -> None:
        self.module = module
        self.name = name or module
        self.port = int(env.get("METRICS_PORT", "0"))
        self.log_path = log_dir / f"{self.name}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module],
            env=dict(env),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @classmethod
    def start(cls, module: str, log_dir: Path, *, name: str | None = None, **settings: Any) -> Proc:
        settings.setdefault("METRICS_PORT", free_port())
        settings.setdefault("LOG_LEVEL", "INFO")
        return cls(module, log_dir, base_env(**settings), name=name)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self._log.close()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def try_get(self, path: str) -> tuple[int, str] | None:
        try:
            return self.get(path)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def healthz(self) -> tuple[int, dict[str, Any]] | None:
        got = self.try_get("/healthz")
        return None if got is None else (got[0], json.loads(got[1]))

    def metrics(self) -> dict[str, float]:
        status, text = self.get("/metrics")
        assert status == 200
        return parse_metrics(text)

    def metric(self, name: str, default: float = 0.0) -> float:
        return self.metrics().get(name, default)

    def wait_ready(self, timeout: float = 15) -> None:
        wait_until(lambda: self.try_get("/metrics") is not None or not self.alive(), timeout, f"{self.name} up")
        assert self.alive(), f"{self.name} exited early:\n{self.log()}"


def parse_metrics(text: str) -> dict[str, float]:
    """``name`` or ``name{label="value",...}`` -> value; a sample with a ``queue`` label also counts
    towards the key without it."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
            if "queue" in sample.labels:
                rest = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()) if k != "queue")
                key = f"{sample.name}{{{rest}}}" if rest else sample.name
                samples[key] = samples.get(key, 0.0) + sample.value
    return samples


def run_to_exit(module: str, env: Mapping[str, object], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m <module>`` (which must stop on its own) to its end, its output kept."""
    return subprocess.run(
        [sys.executable, "-m", module],
        env=base_env(METRICS_PORT=0, **env),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
