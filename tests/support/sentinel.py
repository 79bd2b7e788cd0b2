"""A master, a replica and three sentinels (Debian's redis-server and redis-sentinel) on free loopback
ports, with fast failover settings: a failover in about two seconds. The master and replica require a
password, the sentinels another, so a URL must give both."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Self

import redis

from tests.support.redis_server import RedisServer, free_port, need
from tests.support.waits import wait_until

MASTER_NAME = "setqueue-master"
PASSWORD = "master-secret"
SENTINEL_PASSWORD = "sentinel-secret"
# A master silent this long is down for a sentinel; two of three agreeing start a failover.
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 2000
QUORUM = 2


def redis_sentinel_binary() -> str:
    binary = os.environ.get("REDIS_SENTINEL") or shutil.which("redis-sentinel")
    if not binary:
        need("redis-sentinel", "not on PATH and REDIS_SENTINEL is not set (the test command installs it)")
    return binary  # type: ignore[return-value]


class SentinelProcess:
    """One redis-sentinel on a free port; its config file (which it rewrites) in a folder of its own."""

    def __init__(self, binary: str, master_port: int, replica_port: int, port: int, peers: dict[int, str]) -> None:
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="setqueue-sentinel-")
        self.config = Path(self.dir) / "sentinel.conf"
        self.config.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    "protected-mode no",
                    f"dir {self.dir}",
                    "loglevel warning",
                    f"requirepass {SENTINEL_PASSWORD}",
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {QUORUM}",
                    f"sentinel auth-pass {MASTER_NAME} {PASSWORD}",
                    f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {MASTER_NAME} 1",
                    # Told up front what hello messages and INFO would find in seconds: settled at once.
                    f"sentinel myid {peers[port]}",
                    f"sentinel known-replica {MASTER_NAME} 127.0.0.1 {replica_port}",
                    *(
                        f"sentinel known-sentinel {MASTER_NAME} 127.0.0.1 {other} {run_id}"
                        for other, run_id in peers.items()
                        if other != port
                    ),
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [binary, str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.client = redis.Redis(
            port=self.port, password=SENTINEL_PASSWORD, socket_timeout=2, socket_connect_timeout=0.5
        )

    def master(self) -> dict[str, Any]:
        """What this sentinel says of the master (SENTINEL MASTER), or {} when it cannot say."""
        try:
            return dict(self.client.sentinel_master(MASTER_NAME))  # type: ignore[arg-type]
        except redis.RedisError:
            return {}

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelSetup:
    """A master, its replica, three sentinels watching them. ``url()``: a Sentinel URL for them."""

    def __init__(self) -> None:
        self.sentinel_binary = redis_sentinel_binary()
        # The password is set once a node answers (RedisServer.start pings without one); a replica
        # syncs at once rather than after a diskless sync's default 5 s wait.
        args = ["--masterauth", PASSWORD, "--repl-diskless-sync-delay", "0"]
        self.nodes = [RedisServer(args=args)]
        self.nodes.append(RedisServer(args=[*args, "--replicaof", "127.0.0.1", str(self.nodes[0].port)]))
        self.sentinels: list[SentinelProcess] = []

    def start(self) -> Self:
        for node in self.nodes:
            self._start(node)
        peers = {free_port(): os.urandom(20).hex() for _ in range(3)}  # port: the sentinel's run id
        master, replica = (node.port for node in self.nodes)
        self.sentinels = [SentinelProcess(self.sentinel_binary, master, replica, port, peers) for port in peers]
        self.wait_settled(self.nodes[0].port)
        return self

    def _start(self, node: RedisServer) -> None:
        node.start()
        with redis.Redis(port=node.port, socket_timeout=2) as client:
            client.config_set("requirepass", PASSWORD)

    def url(self, db: int = 0, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"{scheme}://:{PASSWORD}@{hosts}/{MASTER_NAME}/{db}?sentinel_password={SENTINEL_PASSWORD}"

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, password=PASSWORD, socket_timeout=2, decode_responses=True)

    def master_port(self) -> int | None:
        """The master's port as a majority of the sentinels tell it, or None."""
        said = [int(m["port"]) for m in (s.master() for s in self.sentinels) if m.get("port")]
        for port in set(said):
            if said.count(port) >= QUORUM:
                return port
        return None

    def wait_settled(self, master: int, timeout: float = 30) -> None:
        """Until every sentinel names ``master``, sees the others and a replica in sync: a failover can start."""

        def settled() -> bool:
            states = [s.master() for s in self.sentinels]
            if not all(
                int(m.get("port", 0)) == master
                and int(m.get("num-other-sentinels", 0)) == len(self.sentinels) - 1
                and int(m.get("num-slaves", 0)) >= 1
                and not m.get("is_sdown")
                and not m.get("is_odown")
                for m in states
            ):
                return False
            with self.client(master) as c:
                replication = c.info("replication")
            replicas = [v for k, v in replication.items() if k.startswith("slave") and isinstance(v, dict)]
            return any(r.get("state") == "online" for r in replicas)

        wait_until(settled, timeout, f"sentinels settled on the master at {master} with a replica in sync", 0.1)

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port``: no goodbye to its replica or clients."""
        node = self.node(port)
        assert node.process is not None
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(10)
        node.process = None

    def wait_failover(self, old: int, timeout: float = 30) -> int:
        """Until a majority of the sentinels names a master other than ``old``; its port."""

        def promoted() -> int | None:
            port = self.master_port()
            return port if port is not None and port != old else None

        port = wait_until(promoted, timeout, "a new master", 0.02)
        assert port is not None
        return port

    def restart(self, port: int) -> None:
        """The killed node back on its port, empty; the sentinels make it the new master's replica."""
        self._start(self.node(port))

    def cleanup(self) -> None:
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
