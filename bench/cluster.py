"""The cluster benchmark: `bash bench/run --matrix cluster` (bench/README.md, "The cluster matrix").

setqueue alone, on a local Redis Cluster (``--masters`` masters with one replica each,
redis-server processes on loopback, started by tests/cluster_support.py as the cluster tests do).
One queue at each QUEUE_SHARDS of ``--shards`` (and each WAIT_REPLICAS of ``--wait-replicas``):
a backlog of ``--cluster-jobs`` enqueued, then drained by ``--cluster-workers`` real worker
services (``python -m worker``, REDIS_URL naming one node). Every cell's queue has a name whose
shards fall evenly on the masters (when the count allows it), so the split measured is the ids'
(crc32) and the claims', not CRC16's luck. The job's INCR goes to a redis-server outside the
cluster, so what the nodes do is the queue's work alone. The cells take turns trial by trial.

Recorded per trial, from the first job executed to the end: every node's CPU seconds and commands
(INFO deltas), the workers' CPU; after the drain, the jobs done in each shard. report.py turns them
into results/cluster.md (the split over the masters, Redis CPU per job and node, the projection)
and cluster-throughput.png.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from baseline import checkout_state
from report import write_cluster_markdown, write_cluster_plot
from run import Server, cell_trials, log, machine
from systems import ClusterSetQueue

from tests.support.cluster import RedisClusterNodes


def values(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def cell_name(shards: int, wait_replicas: int) -> str:
    return f"shards={shards}" + (f" wait={wait_replicas}" if wait_replicas else "")


def queue_name(cluster: RedisClusterNodes, shards: int, masters: int) -> str:
    """A name whose shards fall evenly on the masters when they can (a multiple of the masters),
    else the first one: what an operator picking names would do."""
    if shards % masters == 0:
        return cluster.evenly_sharded_name(f"bench{shards}", shards)
    return f"bench{shards}-0"


def run_cluster(a: argparse.Namespace) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix="bench-cluster-logs-"))
    started = time.perf_counter()
    before = machine()
    counter = Server()
    cluster = RedisClusterNodes(masters=a.masters, replicas=1)
    systems: list[ClusterSetQueue] = []
    runs: list[dict[str, Any]] = []
    try:
        cluster.start()
        topology = cluster.topology()
        masters = sorted(topology)
        node = redis.Redis(port=masters[0], decode_responses=True)
        version = node.info("server")["redis_version"]
        node.close()
        placement: dict[int, dict[str, Any]] = {}
        for shards in values(a.shards):
            name = queue_name(cluster, shards, len(masters))
            placement[shards] = {"queue": name, "shard_masters": cluster.shard_masters(name, shards)}
            for wait in values(a.wait_replicas):
                systems.append(
                    ClusterSetQueue(
                        cell_name(shards, wait),
                        cluster.url(),
                        claim_batch=a.claim_batch,
                        concurrency=a.cpu_concurrency,
                        counter_url=counter.url,
                        queue=name,
                        shards=shards,
                        wait_replicas=wait,
                        nodes=tuple(cluster.ports),
                        masters=tuple(masters),
                    )
                )
        log(
            f"cluster of {len(masters)} masters {topology} (redis {version}); counter on {counter.port}; "
            f"cells {[s.name for s in systems]}; worker logs in {logdir}"
        )
        runs = cell_trials(
            counter,
            systems,
            a.cluster_workers,
            logdir,
            jobs=a.cluster_jobs,
            max_seconds=a.max_seconds,
            cell_seconds=float("inf"),  # exactly --cluster-trials each (fewer only past the time limit)
            trials=a.cluster_trials,
        )
        by_name = {s.name: s for s in systems}
        for res in runs:
            s = by_name[res["system"]]
            res.update(shards=s.shards, wait_replicas=s.wait_replicas, queue=s.queue, matrix="cluster")
    finally:
        for s in systems:
            s.close()
        cluster.cleanup()
        counter.stop()
    data = {
        "machine_before": before,
        "machine_after": machine(),
        "redis_version": version,
        "redis_py": redis.__version__,
        "args": vars(a),
        "matrices": ["cluster"],
        "topology": {str(m): r for m, r in topology.items()},
        "placement": {str(n): p for n, p in placement.items()},
        "settings": {s.name: {"workers": s.settings(a.cluster_workers), "enqueue": s.enqueue_api()} for s in systems},
        "runs": runs,
        "code": checkout_state(),
        "seconds": time.perf_counter() - started,
    }
    (out / f"{a.tag}.json").write_text(json.dumps(data, indent=1) + "\n")
    write_cluster_markdown(data, out / f"{a.tag}.md")
    write_cluster_plot(data, out / f"{a.tag}-throughput.png")
    log(f"wrote {out / (a.tag + '.md')} in {data['seconds']:.0f} s")
    bad = [r for r in runs if not r["complete"] or r["duplicates"] or r["missing"]]
    return 1 if bad else 0
