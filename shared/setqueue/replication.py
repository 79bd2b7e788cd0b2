"""Writes confirmed by replicas (WAIT_REPLICAS): Redis replicates asynchronously, so a master that
dies right after a write may take it with it, and the replica that takes over never saw it. Redis's
answer is ``WAIT n timeout``: it blocks until n replicas confirm every write made so far *on that
connection*. So a confirmed script call is the script and a WAIT sent together, on one connection
to the master of the script's slot (one round trip), and the call succeeds only when enough
replicas confirmed in time.

A call they did not confirm in time raises :class:`NotReplicated`. Its write was applied on the
master, but it counts as not made: the services wait it out like a connection error and send the
call again (every script is safe to resend: a resend returns the first result, or, for enqueue,
adds nothing new), which waits for the replicas again. So what a caller saw succeed is on
``replicas`` replicas, and survives a failover that promotes one of them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script as RedisScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)

# On a Redis Cluster, how often one confirmed call finds the slot's master again (after MOVED, a
# refused connection or a failover in progress) before it gives up with a ConnectionError.
ROUTING_ATTEMPTS = 3


class NotReplicated(redis.TimeoutError):
    """A write the master applied but fewer than WAIT_REPLICAS replicas confirmed in time. As
    transient as a timeout: send the call again (with the same request id, where it takes one)."""

    def __init__(self, script: str, wanted: int, confirmed: int, timeout_ms: int) -> None:
        super().__init__(
            f"{script}: {confirmed} of {wanted} replica(s) confirmed the write within {timeout_ms} ms "
            "(WAIT_REPLICAS): applied on the master, not yet safe from a failover; send the call again"
        )
        self.wanted = wanted
        self.confirmed = confirmed


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """Confirm each write script call on ``replicas`` replicas, waiting at most ``timeout_ms``."""

    replicas: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        if self.timeout_ms < 1:  # WAIT 0 would block forever
            raise ValueError(f"timeout_ms must be at least 1, got {self.timeout_ms}")

    def call(
        self, client: redis.Redis, name: str, script: RedisScript, keys: Sequence[str], args: Sequence[Any]
    ) -> Any:
        """Run ``script`` (named ``name``, for the error) and WAIT, on one connection to the master
        of ``keys``' slot; its reply, or NotReplicated."""
        cluster = _cluster_of(client)
        if cluster is None:
            return self._send(client, name, script, keys, args)
        for attempt in range(1, ROUTING_ATTEMPTS + 1):
            try:
                node = cluster.get_redis_connection(cluster.get_node_from_key(keys[0]))
                return self._send(node, name, script, keys, args)
            except (AskError, TryAgainError, ClusterDownError, redis.ConnectionError, RedisClusterException) as exc:
                # MOVED (an AskError), a dead node or a slot without a master: the slot table is out
                # of date. Learn it again and resend (the script is safe to resend).
                if attempt == ROUTING_ATTEMPTS:
                    raise redis.ConnectionError(f"{name}: the master of its slot is not reachable: {exc}") from exc
                time.sleep(0.05 * attempt)
                # No node answering yet: the next attempt fails alike, then the caller waits it out.
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    cluster.nodes_manager.initialize()
        raise AssertionError("unreachable")

    def _send(self, node: redis.Redis, name: str, script: RedisScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        for _ in range(2):
            pipe = node.pipeline(transaction=False)  # one connection: WAIT covers the script's writes
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.wait(self.replicas, self.timeout_ms)
            try:
                reply, confirmed = pipe.execute()
            except NoScriptError:  # a node that has not seen it yet (new, restarted, failed over)
                node.script_load(script.script)
                continue
            if confirmed < self.replicas:
                raise NotReplicated(name, self.replicas, confirmed, self.timeout_ms)
            return reply
        raise NoScriptError(f"{name}: the script is not loaded after SCRIPT LOAD")


def _cluster_of(client: redis.Redis) -> Any:
    """The RedisCluster behind ``client`` (a ClusterAwareRedis on a cluster node), else None."""
    cluster_client = getattr(client, "cluster_client", None)
    return cluster_client() if cluster_client is not None else None
