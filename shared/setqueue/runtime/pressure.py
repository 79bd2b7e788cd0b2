"""Redis under memory pressure: its eviction policy and how full it is (every master of a cluster).

With any ``maxmemory-policy`` but ``noeviction`` a full Redis drops keys, ``todos`` or ``in_progress``
among them, and jobs vanish without an error; with ``noeviction`` it refuses the writes that would
grow it (docs/guide.md says what each script does then). Read with ``INFO memory`` (allowed to a
least-privilege user; ``CONFIG GET`` would hand out passwords), falling back to ``CONFIG GET``; a
user allowed neither gets "unknown", never an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis import exceptions as rexc
from redis.cluster import RedisCluster

from setqueue.client import ClusterAwareRedis

NOEVICTION = "noeviction"

UNKNOWN = -1.0  # the gauges while nothing could be read


@dataclass(frozen=True)
class NodeMemory:
    """One Redis (one master of a cluster)."""

    node: str  # host:port
    policy: str
    counted: int | None  # used_memory less what eviction does not count; None from CONFIG GET
    maxmemory: int  # 0: no limit

    @property
    def ratio(self) -> float | None:
        """Counted / maxmemory (0 without one): 1 or more and Redis refuses writes that grow it."""
        if self.counted is None:
            return None
        return self.counted / self.maxmemory if self.maxmemory else 0.0

    @property
    def evicts(self) -> bool:
        return self.policy != NOEVICTION


@dataclass(frozen=True)
class MemoryReport:
    """``unknown``: why nothing could be read (no nodes then)."""

    nodes: tuple[NodeMemory, ...] = ()
    unknown: str | None = None

    @property
    def evicting(self) -> tuple[NodeMemory, ...]:
        return tuple(node for node in self.nodes if node.evicts)

    @property
    def noeviction(self) -> float:
        if self.unknown is not None or not self.nodes:
            return UNKNOWN
        return 0.0 if self.evicting else 1.0

    @property
    def used_ratio(self) -> float:
        ratios = [node.ratio for node in self.nodes]
        if self.unknown is not None or not ratios or None in ratios:
            return UNKNOWN
        return max(ratio for ratio in ratios if ratio is not None)

    @property
    def full(self) -> bool:
        return self.used_ratio >= 1

    def eviction_warning(self, where: str) -> str | None:
        """One line when a master evicts (or nobody could tell)."""
        if self.unknown is not None:
            return (
                f"cannot tell whether Redis at {where} evicts keys ({self.unknown}): make sure its "
                "maxmemory-policy is noeviction, or jobs can vanish when it is full"
            )
        evicting = self.evicting
        if not evicting:
            return None
        policies = ", ".join(f"{node.policy} on {node.node}" for node in evicting)
        return (
            f"Redis at {where} evicts keys when full (maxmemory-policy {policies}): it can drop queue "
            "keys and lose jobs without an error; set maxmemory-policy noeviction"
        )


def masters(client: Any) -> list[tuple[str, redis.Redis]]:
    """(host:port, client) of the Redis behind ``client``, or of each master."""
    cluster = client.cluster_client() if isinstance(client, ClusterAwareRedis) else None
    if cluster is None and isinstance(client, RedisCluster):
        cluster = client
    if cluster is None:
        kwargs = client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        return [(str(where), client)]
    masters = []
    for node in cluster.get_primaries():  # type: ignore[no-untyped-call]
        masters.append((f"{node.host}:{node.port}", cluster.get_redis_connection(node)))  # type: ignore[no-untyped-call]
    return masters


def _read_node(where: str, node: redis.Redis) -> NodeMemory:
    try:
        info: dict[str, Any] = node.info("memory")  # type: ignore[assignment]
        policy = str(info["maxmemory_policy"])
        used = int(info["used_memory"]) - int(info.get("mem_not_counted_for_evict", 0))
        return NodeMemory(where, policy, used, int(info.get("maxmemory", 0)))
    except rexc.NoPermissionError:
        config: dict[str, Any] = node.config_get("maxmemory*")  # type: ignore[assignment]
        return NodeMemory(where, str(config["maxmemory-policy"]), None, int(config.get("maxmemory", 0)))


def read_memory(client: Any) -> MemoryReport:
    """An unreachable Redis raises as any call does."""
    nodes = []
    for where, node in masters(client):
        try:
            nodes.append(_read_node(where, node))
        except rexc.NoPermissionError:
            return MemoryReport(unknown="this user may run neither INFO nor CONFIG GET")
    return MemoryReport(tuple(nodes))
