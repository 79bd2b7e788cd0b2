"""docker-compose.cluster.yml end to end: six Redis nodes made into a cluster by the init service,
the creator, worker(s) and cleaner on one queue of six shards (QUEUE_SHARDS=6, REDIS_URL naming
one node), Prometheus scraping them. Checked from the nodes (redis-cli), the setqueue CLI and
Prometheus.

The tests share one stack and run in file order: the creator makes CREATE_TOTAL jobs while they
look at the live stack; at the end every job must be in done. Deadlines bound the waits; nothing
asserts how fast anything is.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from python_on_whales import DockerClient

from tests.compose.observability import CLUSTER_COMPOSE_FILE
from tests.compose.stack import EVERY_JOB_ENDS_IN_DONE, Stack, image_overrides, running_stack

pytestmark = pytest.mark.compose

NODES = [f"redis-{n}" for n in range(1, 7)]
INIT = "redis-cluster-init"
INIT_DONE = "cluster ok on every node"  # what the init prints last
SHARDS = 6  # QUEUE_SHARDS in docker-compose.cluster.yml
QUEUE = "cluster-test"  # its shards' hash tags {cluster-test~0..5} fall in every third of the slots
CREATE_TOTAL = 1500
WORKERS = 3
SETTINGS = {
    **EVERY_JOB_ENDS_IN_DONE,
    "CREATE_RATE": "30",  # 1500 jobs take the creator about 50 s
    "CREATE_TOTAL": str(CREATE_TOTAL),
    "WORK_SECONDS": "0.05",
}


@pytest.fixture(scope="module")
def stack(docker: DockerClient) -> Iterator[Stack]:
    with running_stack(
        docker,
        {**image_overrides(), **SETTINGS},
        queue_name=QUEUE,
        services=[*NODES, INIT, "creator", "worker", "cleaner", "prometheus"],
        project_prefix="setqueue-cluster-test",
        compose_file=CLUSTER_COMPOSE_FILE,
        redis_service="redis-1",
    ) as s:
        yield s


@dataclass(frozen=True)
class Node:
    """One line of CLUSTER NODES."""

    id: str
    hostname: str
    flags: set[str]
    master_id: str  # "-" for a master
    link: str
    slots: list[str]


def cluster_nodes(stack: Stack) -> list[Node]:
    nodes = []
    for line in stack.redis("CLUSTER", "NODES").splitlines():
        node_id, address, flags, master_id, _ping, _pong, _epoch, link, *slots = line.split()
        hostname = address.partition(",")[2]  # ip:port@bus,hostname
        nodes.append(Node(node_id, hostname, set(flags.split(",")), master_id, link, slots))
    return nodes


def stats(stack: Stack) -> dict[str, Any]:
    """`setqueue stats --json` in the cleaner (its REDIS_URL, QUEUE_NAME and QUEUE_SHARDS): the
    sums, and each shard's own under "shards"."""
    out = stack.docker.compose.execute("cleaner", ["setqueue", "stats", "--json"], tty=False)
    result: dict[str, Any] = json.loads(out or "{}")
    return result


def shard_tags_on(stack: Stack, service: str) -> set[str]:
    """The hash tags ({QUEUE~i}) of the queue's keys that the node of ``service`` holds."""
    out = stack.redis("--scan", "--pattern", f"setqueue:{{{QUEUE}~*", service=service)
    return {key[key.index("{") : key.index("}") + 1] for key in out.split()}


def creator_running(stack: Stack) -> bool:
    return bool(stack.containers("creator"))


def test_the_cluster_has_three_masters_each_with_a_replica(stack: Stack) -> None:
    nodes = cluster_nodes(stack)
    assert sorted(n.hostname for n in nodes) == NODES, "every node announces its service name"
    masters = {n.id: n for n in nodes if "master" in n.flags}
    replicas = [n for n in nodes if "slave" in n.flags]
    assert len(masters) == 3
    assert len(replicas) == 3
    assert sorted(r.master_id for r in replicas) == sorted(masters), "one replica per master"
    assert all(n.link == "connected" and "fail" not in n.flags for n in nodes)
    assert all(m.slots for m in masters.values())
    for node in NODES:
        info = stack.redis("CLUSTER", "INFO", service=node)
        assert "cluster_state:ok" in info, node
        assert "cluster_slots_assigned:16384" in info, node


def test_every_service_is_healthy_and_scraped(stack: Stack) -> None:
    stack.wait(
        lambda: stack.by_label('count by (job) (up{job=~"creator|worker|cleaner"} == 1)', "job"),
        lambda up: up == {"creator": 1, "worker": 1, "cleaner": 1},
        "one healthy scrape target per service",
    )
    stack.wait(lambda: stack.scalar("min(setqueue_redis_up)"), lambda v: v == 1, "every service to report Redis up")


def test_jobs_flow_to_done_on_every_shard(stack: Stack) -> None:
    first = stack.wait(
        lambda: stats(stack),
        lambda s: len(s["shards"]) == SHARDS and all(shard["done"] > 0 for shard in s["shards"]),
        "jobs in done on every shard",
    )
    stack.wait(lambda: stats(stack), lambda s: s["done"] > first["done"], "done to keep growing")


def test_every_master_holds_a_share_of_the_shards(stack: Stack) -> None:
    nodes = cluster_nodes(stack)
    by_id = {n.id: n for n in nodes}
    held = {n.hostname: shard_tags_on(stack, n.hostname) for n in nodes if "master" in n.flags}
    everything = {f"{{{QUEUE}~{i}}}" for i in range(SHARDS)}
    assert all(held.values()), f"a master holds none of the shards: {held}"
    assert set().union(*held.values()) == everything
    assert sum(len(tags) for tags in held.values()) == SHARDS, f"a shard on two masters: {held}"
    # Each replica holds its master's shards (replication; it may lag a moment behind).
    for replica in (n for n in nodes if "slave" in n.flags):
        master = by_id[replica.master_id].hostname
        stack.wait(
            functools.partial(shard_tags_on, stack, replica.hostname),
            held[master].__eq__,
            f"{replica.hostname} to hold what {master} holds",
        )


def test_scaled_workers_are_scraped_and_share_the_work(stack: Stack) -> None:
    assert creator_running(stack), "the creator already finished: raise CREATE_TOTAL so it outlives this test"
    stack.scale_workers(WORKERS)
    assert len(stack.containers("worker")) == WORKERS
    stack.wait_for_workers_scraped_and_working(WORKERS)
    stack.wait(
        lambda: stack.by_label('count by (job) (up{job=~"creator|worker|cleaner"} == 1)', "job"),
        lambda up: up == {"creator": 1, "worker": WORKERS, "cleaner": 1},
        "Prometheus to scrape every replica of every service",
    )


def test_the_cluster_survives_every_node_restarting(stack: Stack) -> None:
    """All six nodes stopped and brought up again (what a host reboot does): Docker may give them
    other addresses (here it gave most of them new ones), which their nodes.conf does not know.
    The init service, run again by `up`, leaves the cluster as formed (same node ids, no new
    create) and tells each node where the others are now; the services reconnect on their own."""
    before = cluster_nodes(stack)
    done = stats(stack)["done"]

    def init_runs() -> tuple[str, bool, int | None]:
        (init,) = stack.docker.compose.ps(services=[INIT], all=True)
        return stack.docker.compose.logs(services=[INIT]) or "", bool(init.state.running), init.state.exit_code

    # Every `up` runs the init again (so did the scaling above): count its runs.
    runs = init_runs()[0].count(INIT_DONE)
    stack.docker.compose.stop(NODES)
    # As `up` does: the nodes until healthy, then the init. (Not --wait: it calls an exited one-shot a failure.)
    stack.docker.compose.up(services=[*NODES, INIT], detach=True, quiet=True)
    log, _, exit_code = stack.wait(
        init_runs,
        lambda run: run[0].count(INIT_DONE) == runs + 1 and not run[1],
        "the init's run to finish",
    )
    assert exit_code == 0
    assert "cluster formed earlier" in log.split(INIT_DONE)[runs], "a later run must not create a cluster"
    after = cluster_nodes(stack)
    assert {n.id for n in after} == {n.id for n in before}
    assert all(n.link == "connected" and "fail" not in n.flags for n in after)
    stack.wait(lambda: stats(stack)["done"], lambda now: now > done, "the services to reconnect and carry on")
    stack.wait(lambda: stack.scalar("min(setqueue_redis_up)"), lambda v: v == 1, "every service to report Redis up")


def test_every_created_job_ends_in_done(stack: Stack) -> None:
    final = stack.wait(
        lambda: stats(stack),
        lambda s: s["todos"] == s["in_progress"] == s["scheduled"] == 0 and s["done"] + s["failed"] >= CREATE_TOTAL,
        f"all {CREATE_TOTAL} jobs to finish",
        timeout=300,
    )
    assert (final["done"], final["failed"]) == (CREATE_TOTAL, 0)
    assert sum(shard["done"] for shard in final["shards"]) == CREATE_TOTAL
    assert all(shard["done"] > 0 for shard in final["shards"])

    # The creator stopped by itself after CREATE_TOTAL and was not restarted into a second run.
    (creator,) = stack.docker.compose.ps(services=["creator"], all=True)
    assert not creator.state.running
    assert creator.state.exit_code == 0
    assert creator.restart_count == 0
    # FAIL_RATE made some attempts fail; they were retried, on whichever shard, not lost.
    assert (stack.scalar("sum(setqueue_jobs_retried_total)") or 0) > 0
