"""The benchmark script runs end to end on a tiny workload: setqueue and the naive reference only,
so the peers (rq, dramatiq, celery, arq, saq) need not be installed. Both matrices run: the
CPU-trivial one (setqueue, naive) and the I/O-bound one (setqueue's threaded and async handlers).
No timing is asserted. The cluster matrix runs on its own, on a tiny workload too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT, need

JOBS = 200


@pytest.mark.slow
def test_bench_runs_and_every_job_ran(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if not shutil.which("redis-server"):
        need("redis-server", "the benchmark starts its own")
    cmd = [sys.executable, str(REPO_ROOT / "bench" / "run.py"), "--jobs", str(JOBS), "--io-jobs", str(JOBS)]
    cmd += ["--workers", "1", "--io-max-seconds", "60"]
    cmd += ["--systems", "setqueue,naive", "--latency-jobs", "10", "--no-ceiling", "--out", str(tmp_path)]
    cmd += ["--due-jobs", "50"]  # scheduled jobs: due time -> start
    cmd += ["--max-seconds", "60", "--trials", "2", "--cell-seconds", "60"]  # two trials per cell, both checked
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "latest.md").is_file()
    assert "50/50 ran" in (tmp_path / "due-latency.md").read_text()
    data = json.loads((tmp_path / "latest.json").read_text())
    assert sorted((r["matrix"], r["system"], r["trial"]) for r in data["runs"]) == [
        ("cpu", "naive", 0),
        ("cpu", "naive", 1),
        ("cpu", "setqueue", 0),
        ("cpu", "setqueue", 1),
        ("io", "setqueue-async", 0),
        ("io", "setqueue-async", 1),
        ("io", "setqueue-threads", 0),
        ("io", "setqueue-threads", 1),
    ]
    for run in data["runs"]:
        assert run["complete"], run
        assert run["executed"] == JOBS and run["missing"] == 0 and run["duplicates"] == 0, run
    assert {lat["system"] for lat in data["latency"]} == {"setqueue", "naive", "setqueue-threads", "setqueue-async"}
    assert all(lat.get("ran") == 10 for lat in data["latency"]), data["latency"]


@pytest.mark.slow
def test_the_cluster_bench_runs_and_every_job_ran(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`--matrix cluster` on a tiny workload: a 3-master cluster, one and three shards, each with and without
    WAIT_REPLICAS=1, one trial each."""
    for binary in ("redis-server", "redis-cli"):
        if not shutil.which(binary):
            need(binary, "the cluster benchmark starts its own cluster")
    cmd = [
        sys.executable,
        str(REPO_ROOT / "bench" / "run.py"),
        "--matrix",
        "cluster",
        "--shards",
        "1,3",
        "--wait-replicas",
        "0,1",
    ]
    # Enough jobs that the drain spans many samples (5 ms apart), whatever the load: the per-node figures
    # are measured from the first job executed to the last, and 200 can all be done within one sample.
    jobs = 2000
    cmd += ["--cluster-jobs", str(jobs), "--cluster-trials", "1", "--max-seconds", "60", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "cluster.json").read_text())
    assert [r["system"] for r in data["runs"]] == ["shards=1", "shards=1 wait=1", "shards=3", "shards=3 wait=1"]
    for run in data["runs"]:
        assert run["complete"] and run["executed"] == jobs and not run["duplicates"], run
        assert len(run["nodes"]) == 6 and sum(run["done_per_shard"]) == jobs, run
    report = (tmp_path / "cluster.md").read_text()
    assert "shards=3: Redis commands per master within 10% of an even split" in report
    assert "## Projection: what N masters give" in report and "## The cost of WAIT_REPLICAS" in report
