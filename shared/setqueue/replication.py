"""Writes confirmed by replicas (WAIT_REPLICAS; docs/guide.md#what-a-failover-costs-and-wait_replicas).

``WAIT`` counts the writes made *on its connection*, so the script and a WAIT go together on one
connection to the slot's master. A call not confirmed in time raises :class:`NotReplicated`:
applied, but counted as not made; callers resend it (scripts are safe to resend)."""

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
    ResponseError,
    TryAgainError,
)

from setqueue.script_cache import SCRIPT_LOAD_ATTEMPTS, is_noscript

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
        """Run ``script`` and WAIT on one connection to the master of ``keys``' slot; its reply, or NotReplicated."""
        cluster = _cluster_of(client)
        if cluster is None:
            return self._send(client, name, script, keys, args)
        for attempt in range(1, ROUTING_ATTEMPTS + 1):
            try:
                node = cluster.get_redis_connection(cluster.get_node_from_key(keys[0]))
                return self._send(node, name, script, keys, args)
            except (AskError, TryAgainError, ClusterDownError, redis.ConnectionError, RedisClusterException) as exc:
                # MOVED, a dead node or a masterless slot: the slot table is stale; relearn and resend.
                if attempt == ROUTING_ATTEMPTS:
                    raise redis.ConnectionError(f"{name}: the master of its slot is not reachable: {exc}") from exc
                time.sleep(0.05 * attempt)
                # Nothing answering yet: the next attempt fails alike, then the caller waits it out.
                with contextlib.suppress(redis.RedisError, RedisClusterException):
                    cluster.nodes_manager.initialize()
        raise AssertionError("unreachable")

    def _send(self, node: redis.Redis, name: str, script: RedisScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        for _ in range(SCRIPT_LOAD_ATTEMPTS):
            pipe = node.pipeline(transaction=False)  # one connection: WAIT covers the script's writes
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.wait(self.replicas, self.timeout_ms)
            try:
                reply, confirmed = pipe.execute()
            except ResponseError as exc:  # NOSCRIPT: a node lost it or never saw it (restart, failover)
                if not is_noscript(exc):
                    raise
                node.script_load(script.script)
                continue
            if confirmed < self.replicas:
                raise NotReplicated(name, self.replicas, confirmed, self.timeout_ms)
            return reply
        raise NoScriptError(f"{name}: the script is not loaded after SCRIPT LOAD")


def _cluster_of(client: redis.Redis) -> Any:
    """The RedisCluster behind ``client``, else None."""
    cluster_client = getattr(client, "cluster_client", None)
    return cluster_client() if cluster_client is not None else None
