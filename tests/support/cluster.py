"""A real Redis Cluster for the tests: masters and replicas as redis-server processes on loopback."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Self

import redis
from redis.crc import key_slot

from setqueue.keys import QueueKeys
from setqueue.sharded import shard_names
from tests.support import RedisServer, free_port, need
from tests.support.packets import dropped, replica_links, replication_rules

SLOTS = 16384


def redis_cli_binary() -> str:
    binary = os.environ.get("REDIS_CLI") or shutil.which("redis-cli")
    if not binary:
        need("redis-cli", "not on PATH and REDIS_CLI is not set (it comes with redis-server)")
    return binary  # type: ignore[return-value]


def cluster_port() -> int:
    """A free port redis-server takes in cluster mode: at most 55535 (it checks that port + 10000 fits)."""
    while True:
        port = free_port()
        if port <= 55535:
            return port


class RedisClusterNodes:
    """``masters`` masters with ``replicas`` replicas each; ``start()`` returns once the cluster is
    ``ready()``, ``cleanup()`` stops them all (also after a failed start)."""

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000) -> None:
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.cli = redis_cli_binary()
        self.nodes: list[RedisServer] = []

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def url(self, port: int | None = None) -> str:
        """Of one node (the first by default): any node is a way in."""
        return f"redis://127.0.0.1:{port or self.ports[0]}/0"

    def start(self) -> Self:
        try:
            ports: set[int] = set()
            for _ in range(self.masters * (1 + self.replicas)):
                port = cluster_port()
                while port in ports:
                    port = cluster_port()
                ports.add(port)
                args = ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
                args += ["--cluster-node-timeout", str(self.node_timeout_ms), "--cluster-config-file", "nodes.conf"]
                args += ["--repl-diskless-sync-delay", "0"]  # a replica's first sync at once
                self.nodes.append(RedisServer(port, args).start())
            create = [self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
            create += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            made = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
            if made.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{made.stdout}\n{made.stderr}")
            self.wait_ready()
        except BaseException:
            self.cleanup()
            raise
        return self

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, decode_responses=True, socket_timeout=5)

    def live_ports(self) -> list[int]:
        return [node.port for node in self.nodes if node.process is not None]

    def _ask(self, port: int, *command: str) -> Any:
        with self.client(port) as client:
            return client.execute_command(*command)  # type: ignore[no-untyped-call]

    def topology(self, port: int | None = None) -> dict[int, list[int]]:
        """master port -> its replicas' ports, as a live node sees them (failed nodes left out)."""
        seen = str(self._ask(port or self.live_ports()[0], "CLUSTER", "NODES"))
        rows = [line.split() for line in seen.splitlines() if line.strip()]
        ids = {row[0]: int(row[1].split("@")[0].rsplit(":", 1)[1]) for row in rows}
        topology: dict[int, list[int]] = {}
        for row in rows:
            flags = row[2].split(",")
            if "master" in flags and "fail" not in flags and "fail?" not in flags:
                topology[ids[row[0]]] = []
        for row in rows:
            flags = row[2].split(",")
            if "slave" in flags and "fail" not in flags and ids.get(row[3]) in topology:
                topology[ids[row[3]]].append(ids[row[0]])
        return topology

    def slot_ranges(self, port: int | None = None) -> list[tuple[int, int, int]]:
        """(first slot, last slot, master port) of every range, as a live node sees them."""
        ranges = self._ask(port or self.live_ports()[0], "CLUSTER", "SLOTS")
        return [(int(start), int(end), int(master[1])) for start, end, master, *_ in ranges]

    def master_of(self, slot: int, port: int | None = None, ranges: list[tuple[int, int, int]] | None = None) -> int:
        for start, end, master in self.slot_ranges(port) if ranges is None else ranges:
            if start <= slot <= end:
                return master
        raise AssertionError(f"no master serves slot {slot}")

    def ready(self) -> bool:
        """Every live node: cluster_state:ok, all slots served, every live node known; every
        replica's link to its master up and its sync done."""
        live = self.live_ports()
        for port in live:
            try:
                info = dict(
                    line.split(":", 1) for line in str(self._ask(port, "CLUSTER", "INFO")).splitlines() if ":" in line
                )
                if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != SLOTS:
                    return False
                if int(info.get("cluster_known_nodes", 0)) < len(live):
                    return False
                with self.client(port) as client:
                    replication: dict[str, Any] = client.info("replication")  # type: ignore[assignment]
            except redis.RedisError:
                return False
            if replication["role"] == "slave" and (
                replication["master_link_status"] != "up" or replication["master_sync_in_progress"]
            ):
                return False
        topology = self.topology()
        return len(topology) == self.masters and all(len(r) == self.replicas for r in topology.values())

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster on {self.ports} was not ready after {timeout}s")
            time.sleep(0.1)

    def kill(self, port: int) -> None:
        """SIGKILL: a crash, no goodbye to the others."""
        [node] = [n for n in self.nodes if n.port == port]
        assert node.process is not None
        node.process.kill()
        node.process.wait(10)
        node.process = None

    def restart(self, port: int) -> None:
        """As a supervisor would: it rejoins (its nodes.conf) as a replica of whoever took its slots."""
        [node] = [n for n in self.nodes if n.port == port]
        node.start()

    @contextlib.contextmanager
    def replication_cut(self, master: int) -> Iterator[None]:
        """Within, iptables drops what ``master`` sends its replicas while it serves clients and the
        bus: a failover in here promotes a replica that missed every write since. Needs root."""
        with self.client(master) as client:
            links = replica_links(client)
        assert links, f"{master} has no replica connected"
        with dropped(replication_rules(master, links), "a replication cut"):
            yield

    @contextlib.contextmanager
    def clients_cut(self, master: int) -> Iterator[None]:
        """Within, iptables drops every packet to and from ``master``'s client port but its replicas'
        links: clients time out, while the cluster bus and replication go on (no failover). Needs root."""
        with self.client(master) as client:
            ports = ",".join(map(str, replica_links(client))) or "0"
        rules = [
            ["OUTPUT", "-o", "lo", "-p", "tcp", "--dport", str(master), "-m", "multiport", "!", "--sports", ports],
            ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(master), "-m", "multiport", "!", "--dports", ports],
        ]
        with dropped([[*rule, "-j", "DROP"] for rule in rules], "cutting a node off its clients"):
            yield

    def wait_failover(self, dead: int, slot: int, timeout: float = 60) -> int:
        """Until a live node took ``slot`` over from ``dead`` and all report cluster_state:ok; its port."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                new = self.master_of(slot)
                live = self.live_ports()
                if new != dead and all(
                    "cluster_state:ok" in str(self._ask(port, "CLUSTER", "INFO")) and self.master_of(slot, port) == new
                    for port in live
                ):
                    return new
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no replica took over slot {slot} from {dead} within {timeout}s")
            time.sleep(0.1)

    def queue_slot(self, name: str) -> int:
        return int(key_slot(QueueKeys(name).todos.encode()))

    def queues_on_each_master(self, prefix: str) -> dict[int, str]:
        """master port -> a queue name <prefix>-<n> whose slot that master serves, one per master."""
        ranges = self.slot_ranges()
        found: dict[int, str] = {}
        n = 0
        while len(found) < len({master for _, _, master in ranges}):
            found.setdefault(self.master_of(self.queue_slot(f"{prefix}-{n}"), ranges=ranges), f"{prefix}-{n}")
            n += 1
        return found

    def shard_masters(self, name: str, shards: int) -> list[int]:
        """The master port of each shard of queue ``name``."""
        ranges = self.slot_ranges()
        return [self.master_of(self.queue_slot(queue), ranges=ranges) for queue in shard_names(name, shards)]

    def evenly_sharded_name(self, prefix: str, shards: int) -> str:
        """A queue name <prefix>-<n> whose shards fall evenly on the masters (not as CRC16 happens to)."""
        masters = {master for _, _, master in self.slot_ranges()}
        for n in range(10_000):
            name = f"{prefix}-{n}"
            held = self.shard_masters(name, shards)
            if len({held.count(master) for master in masters}) == 1:
                return name
        raise AssertionError(f"no name spreads {shards} shards evenly over {len(masters)} masters")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
