"""docker-compose.cluster.yml end to end: six nodes made a cluster by the init service, the services
on one queue of six shards through one node's URL. As in test_stack.py, the tests share one stack in
file order, and at the end every job must be in done."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from python_on_whales import DockerClient

from tests.compose.observability import CLUSTER_COMPOSE_FILE
from tests.compose.stack import EVERY_JOB_ENDS_IN_DONE, Stack, running_stack

pytestmark = pytest.mark.compose

NODES = [f"redis-{n}" for n in range(1, 7)]
INIT = "redis-cluster-init"
INIT_DONE = "cluster ok on every node"  # what the init prints last
SHARDS = 6  # QUEUE_SHARDS in docker-compose.cluster.yml
QUEUE = "cluster-test"  # its shards' hash tags fall in every third of the slots
CREATE_TOTAL = 1500
WORKERS = 3
SETTINGS = {
    **EVERY_JOB_ENDS_IN_DONE,
    "CREATE_RATE": "30",  # about 50 s
    "CREATE_TOTAL": str(CREATE_TOTAL),
    "WORK_SECONDS": "0.05",
}


@pytest.fixture(scope="module")
def stack(docker: DockerClient) -> Iterator[Stack]:
    with running_stack(
        docker,
        SETTINGS,
        queue_name=QUEUE,
        services=[*NODES, INIT, "creator", "worker", "cleaner", "prometheus"],
        project_prefix="setqueue-cluster-test",
        compose_file=CLUSTER_COMPOSE_FILE,
        redis_service="redis-1",
    ) as s:
        yield s


@dataclass(frozen=True)
class Node:
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
    """`setqueue stats --json` in the cleaner: the sums, and each shard's under "shards"."""
    out = stack.docker.compose.execute("cleaner", ["setqueue", "stats", "--json"], tty=False)
    result: dict[str, Any] = json.loads(out or "{}")
    return result


def shard_tags_on(stack: Stack, service: str) -> set[str]:
    out = stack.redis("--scan", "--pattern", f"setqueue:{{{QUEUE}~*", service=service)
    return {key[key.index("{") : key.index("}") + 1] for key in out.split()}


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
    stack.wait_scraped(creator=1, worker=1, cleaner=1)
    stack.wait_redis_up()


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
    # Each replica holds its master's shards (it may lag a moment behind).
    for replica in (n for n in nodes if "slave" in n.flags):
        master = by_id[replica.master_id].hostname
        stack.wait(
            functools.partial(shard_tags_on, stack, replica.hostname),
            held[master].__eq__,
            f"{replica.hostname} to hold what {master} holds",
        )


def test_scaled_workers_are_scraped_and_share_the_work(stack: Stack) -> None:
    assert stack.creator_running(), "the creator already finished: raise CREATE_TOTAL so it outlives this test"
    stack.scale_workers(WORKERS)
    assert len(stack.containers("worker")) == WORKERS
    stack.wait_for_workers_scraped_and_working(WORKERS)
    stack.wait_scraped(creator=1, worker=WORKERS, cleaner=1)


def test_the_cluster_survives_every_node_restarting(stack: Stack) -> None:
    """All six nodes stopped and up again (a host reboot): Docker may give them addresses their
    nodes.conf does not know. The init, run again by `up`, keeps the cluster as formed (same node ids)
    and tells each node where the others are; the services reconnect on their own."""
    before = cluster_nodes(stack)
    done = stats(stack)["done"]

    def init_runs() -> tuple[str, bool, int | None]:
        (init,) = stack.docker.compose.ps(services=[INIT], all=True)
        return stack.docker.compose.logs(services=[INIT]) or "", bool(init.state.running), init.state.exit_code

    # Every `up` runs the init again (the scaling above too): count its runs.
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
    stack.wait_redis_up()


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
    stack.assert_creator_ended_once()
    # FAIL_RATE made some attempts fail; they were retried, on whichever shard, not lost.
    assert (stack.scalar("sum(setqueue_jobs_retried_total)") or 0) > 0
