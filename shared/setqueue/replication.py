"""Writes confirmed by replicas (WAIT_REPLICAS; docs/guide.md#what-a-failover-costs-and-wait_replicas).

``WAIT`` counts the writes made *on its connection*, so the script and a WAIT go together on one
connection to the slot's master. A call not confirmed in time raises :class:`NotReplicated`:
applied, but counted as not made; callers resend it (scripts are safe to resend)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis
from redis.commands.core import Script as RedisScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)

from setqueue.script_cache import SCRIPT_LOAD_ATTEMPTS, is_noscript
from setqueue.steps import RunScript

# On a Cluster, how often one confirmed call looks for the slot's master again before a ConnectionError.
ROUTING_ATTEMPTS = 3


class NotReplicated(redis.TimeoutError):
    """Applied by the master but not confirmed by enough replicas in time. Transient: resend the call
    (with the same request id, where it takes one)."""

    def __init__(self, script: str, wanted: int, confirmed: int, timeout_ms: int) -> None:
        super().__init__(
            f"{script}: {confirmed} of {wanted} replica(s) confirmed the write within {timeout_ms} ms "
            "(WAIT_REPLICAS): applied on the master, not yet safe from a failover; send the call again"
        )
        self.wanted = wanted
        self.confirmed = confirmed


def confirmed_call(client: redis.Redis, step: RunScript, script: RedisScript) -> Any:
    """Run the script step ``step`` (``script``: its registered script) and its ``wait``'s WAIT on one
    connection to the master of its keys' slot; its reply, or NotReplicated."""
    cluster = _cluster_of(client)
    if cluster is None:
        return _send(client, step, script)
    for attempt in range(1, ROUTING_ATTEMPTS + 1):
        try:
            node = cluster.get_redis_connection(cluster.get_node_from_key(step.keys[0]))
            return _send(node, step, script)
        except (AskError, TryAgainError, ClusterDownError, redis.ConnectionError, RedisClusterException) as exc:
            # MOVED, a dead node or a masterless slot: the slot table is stale; relearn and resend.
            if attempt == ROUTING_ATTEMPTS:
                raise redis.ConnectionError(f"{step.name}: the master of its slot is not reachable: {exc}") from exc
            time.sleep(0.05 * attempt)
            # Nothing answering yet: the next attempt fails alike, then the caller waits it out.
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                cluster.nodes_manager.initialize()
    raise AssertionError("unreachable")


def _send(node: redis.Redis, step: RunScript, script: RedisScript) -> Any:
    wait = step.wait
    assert wait is not None  # confirmed_call is for steps that wait
    for _ in range(SCRIPT_LOAD_ATTEMPTS):
        pipe = node.pipeline(transaction=False)  # one connection: WAIT covers the script's writes
        pipe.evalsha(script.sha, len(step.keys), *step.keys, *step.args)
        pipe.wait(wait.replicas, wait.timeout_ms)
        try:
            reply, confirmed = pipe.execute()
        except ResponseError as exc:  # NOSCRIPT: a node lost it or never saw it (restart, failover)
            if not is_noscript(exc):
                raise
            node.script_load(script.script)
            continue
        if confirmed < wait.replicas:
            raise NotReplicated(step.name, wait.replicas, confirmed, wait.timeout_ms)
        return reply
    raise NoScriptError(f"{step.name}: the script is not loaded after SCRIPT LOAD")


def _cluster_of(client: redis.Redis) -> Any:
    """The RedisCluster behind ``client``, else None."""
    cluster_client = getattr(client, "cluster_client", None)
    return cluster_client() if cluster_client is not None else None
