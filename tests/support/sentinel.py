"""A master, a replica and three sentinels (Debian's redis-server and redis-sentinel) on free loopback
ports, with fast failover settings: a failover in about two seconds. The master and replica require a
password, the sentinels another, so a URL must give both."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import redis

from setqueue import Queue, open_queue
from setqueue.runtime.audit import Auditor
from tests.support.jobs import ExecutionLog
from tests.support.packets import dropped, replica_links, replication_rules
from tests.support.procs import Proc
from tests.support.redis_server import RedisServer, free_port, need
from tests.support.servers import url_query
from tests.support.tls import Pki
from tests.support.waits import wait_until

MASTER_NAME = "setqueue-master"
PASSWORD = "master-secret"
SENTINEL_PASSWORD = "sentinel-secret"
# A master silent this long is down for a sentinel; two of three agreeing start a failover.
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 2000
QUORUM = 2
# The password is set once a node answers (RedisServer.start pings without one); a replica syncs at
# once rather than after a diskless sync's default 5 s wait.
# The services follow a promotion within this of the kill (measured: about 2 s; the failover takes
# about 1.8 s of it, the services' backoff the rest; the margin is for a loaded machine).
FOLLOW_BOUND_SECONDS = 20
NODE_ARGS = ("--masterauth", PASSWORD, "--repl-diskless-sync-delay", "0")


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
        self.nodes = [RedisServer(args=NODE_ARGS)]
        self.nodes.append(RedisServer(args=[*NODE_ARGS, "--replicaof", "127.0.0.1", str(self.nodes[0].port)]))
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
        protocol = url_query().replace("?", "&")  # SETQUEUE_TEST_PROTOCOL's, as every test server's URL
        return f"{scheme}://:{PASSWORD}@{hosts}/{MASTER_NAME}/{db}?sentinel_password={SENTINEL_PASSWORD}{protocol}"

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
            return self.replica_in_sync(master)

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

    def restart(self, port: int, replica_of: int) -> None:
        """The killed node back on its port, empty, as the replica of ``replica_of`` (as a deployment
        that asks the sentinels for the master before it starts a node; else the sentinels would turn
        it into one on their next INFO, up to 10 s later)."""
        node = self.node(port)
        node.args = [*NODE_ARGS, "--replicaof", "127.0.0.1", str(replica_of)]
        self._start(node)

    def replica_in_sync(self, master: int) -> bool:
        """Whether ``master`` has a replica online."""
        with self.client(master) as c:
            replication = c.info("replication")
        return any(
            v.get("state") == "online" for k, v in replication.items() if k.startswith("slave") and isinstance(v, dict)
        )

    @contextlib.contextmanager
    def replication_cut(self, master: int) -> Iterator[None]:
        """Within, iptables drops what ``master`` sends its replica (sentinels and clients still reach
        both): a failover in here promotes a replica that missed every write since. Needs root."""
        with self.client(master) as client:
            links = replica_links(client)
        assert links, f"{master} has no replica connected"
        with dropped(replication_rules(master, links), "a replication cut"):
            yield

    def cleanup(self) -> None:
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


class TlsSentinel:
    """One redis-sentinel speaking only TLS (the certificates of ``pki``), to its clients and to the
    TLS-only master on ``master_port`` it monitors (quorum 1)."""

    def __init__(self, pki: Pki, master_port: int, folder: Path) -> None:
        self.port = free_port()
        config = folder / f"sentinel-tls-{self.port}.conf"
        tls = [f"tls-cert-file {pki.server_cert}", f"tls-key-file {pki.server_key}", f"tls-ca-cert-file {pki.ca}"]
        config.write_text(
            "\n".join(
                [
                    *("port 0", f"tls-port {self.port}", "bind 127.0.0.1", "protected-mode no", f"dir {folder}"),
                    *(*tls, "tls-auth-clients no", "tls-replication yes", "loglevel warning"),
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1",
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [redis_sentinel_binary(), str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(port=self.port, ssl=True, ssl_ca_certs=str(pki.ca), socket_connect_timeout=0.5)

        def answers() -> bool:
            try:
                return bool(client.sentinel_master(MASTER_NAME))
            except redis.RedisError:
                return False

        try:
            wait_until(answers, 10, "the TLS sentinel to name its master")
        finally:
            client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _service_settings(url: str, name: str, log: Path, wait_replicas: int) -> dict[str, Any]:
    return {
        "REDIS_URL": url,
        "QUEUE_NAME": name,
        "JOB_HANDLER": "tests.support.jobs:handle",
        "EXEC_LOG": str(log),
        "RETRY_BACKOFF_SECONDS": 0,
        "AUDIT": "true",  # the creator records what it made; the audit finds any id in no state
        "DONE_MAX_COUNT": 0,  # no retention: an id gone from done is lost, not trimmed
        "DONE_MAX_AGE_SECONDS": 0,
        # Leases outlast the failover, or jobs would run again for that reason alone.
        "LEASE_SECONDS": 10,
        "WAIT_REPLICAS": wait_replicas,
        "WAIT_TIMEOUT_SECONDS": 0.5,
    }


def failover_run(
    tmp_path: Path, procs: list[Proc], *, wait_replicas: int, cut: bool = False, total: int = 600, rate: float = 150
) -> dict[str, Any]:
    """A cleaner, two workers and a creator (``total`` jobs at ``rate``/s) through a Sentinel URL;
    the master SIGKILLed once a quarter is done (with ``cut``: after 1.5 s of its replica cut off),
    restarted (a replica again) once the sentinels name the new master; then the queue drained.
    Returns what it cost: ``promoted_seconds`` (kill to the sentinels naming the replica),
    ``followed_seconds`` (kill to the first ack on the new master), ``lost`` (created, in no state),
    ``run_twice``, and the audit's findings."""
    prefix = "sleep-0.01"
    name = f"failover-{os.urandom(4).hex()}"
    log = tmp_path / f"exec-{name}.log"
    setup = SentinelSetup().start()
    started: list[Proc] = []
    queue: Queue | None = None
    try:
        url = setup.url()
        settings = _service_settings(url, name, log, wait_replicas)
        queue = Queue.from_url(url, name)
        keys = queue.keys
        started.append(Proc.start("cleaner", tmp_path, name=f"cleaner-{name}", SWEEP_INTERVAL=0.2, **settings))
        for n in range(2):
            worker = Proc.start("worker", tmp_path, name=f"worker-{n}-{name}", CONCURRENCY=4, **settings)
            started.append(worker)
        creator = Proc.start(
            "creator",
            tmp_path,
            name=f"creator-{name}",
            CREATE_TOTAL=total,
            CREATE_RATE=rate,
            CREATE_ID_PREFIX=prefix,
            **settings,
        )
        started.append(creator)
        procs.extend(started)
        old = setup.nodes[0].port
        with setup.client(old) as master:
            wait_until(lambda: int(master.scard(keys.done)) >= total // 4, 60, "a quarter of the jobs done")
            done_before = int(master.scard(keys.done))
        # The cut lasts until the failover: the dead master's kernel would resend what it had sent.
        with setup.replication_cut(old) if cut else contextlib.nullcontext():
            if cut:
                time.sleep(1.5)  # writes go on that the replica never gets
            setup.kill(old)
            killed_at = time.monotonic()
            new = setup.wait_failover(old)
            promoted_seconds = time.monotonic() - killed_at
        setup.restart(old, replica_of=new)  # WAIT 1 needs a replica again
        with setup.client(new) as master:
            promoted_with = int(master.scard(keys.done))
            wait_until(
                lambda: int(master.scard(keys.done)) > promoted_with,
                FOLLOW_BOUND_SECONDS,
                f"an ack on the new master within {FOLLOW_BOUND_SECONDS} s of the kill",
                0.01,
            )
            followed_seconds = time.monotonic() - killed_at
            wait_until(lambda: setup.replica_in_sync(new), 60, "the killed node back as a replica", 0.01)
            replica_back_seconds = time.monotonic() - killed_at
        assert creator.wait(90) == 0, creator.log()

        def drained() -> bool:
            assert queue is not None
            stats = queue.stats()
            return bool(stats["todos"] == stats["in_progress"] == stats["scheduled"] == 0)

        wait_until(drained, 90, "the queue drained after the failover")
        created = {f"{prefix}-{n}" for n in range(1, total + 1)}
        done = set(queue.redis.smembers(keys.done))  # type: ignore[arg-type]
        failed = set(queue.redis.smembers(keys.failed))  # type: ignore[arg-type]
        runs = ExecutionLog(log).starts()
        lost_leases = queue.redis.hgetall(keys.audit_lease_lost)
        twice = sorted(job for job, count in runs.items() if count > 1)
        audit = Auditor(queue.redis, keys, retention=False).audit()
        alive = all(p.alive() for p in started if p is not creator)
        return {
            "wait_replicas": wait_replicas,
            "cut": cut,
            "done_before_kill": done_before,
            "promoted_seconds": round(promoted_seconds, 2),
            "followed_seconds": round(followed_seconds, 2),
            "replica_back_seconds": round(replica_back_seconds, 2),
            "done": len(done),
            "failed": len(failed),
            "lost": len(created - done - failed),
            "run_twice": len(twice),
            "run_twice_without_a_lost_lease": len([job for job in twice if job not in lost_leases]),
            "never_run_but_done": len(done - set(runs)),
            "audit_created": audit.created,
            "audit_lost": audit.lost,
            "audit_in_two_states": audit.in_two_states,
            "services_alive": alive,
            "backed_off": "redis unavailable" in "".join(p.log() for p in started if p is not creator),
        }
    finally:
        if queue is not None:
            queue.close()
        for p in started:  # before the servers go
            p.stop()
        setup.cleanup()


def switch_run(*, wait_replicas: int, seconds: float = 15) -> dict[str, Any]:
    """One blocking queue enqueuing one id at a time (every 10 ms) for ``seconds`` while SENTINEL
    FAILOVER switches the master (the old one alive, left to the sentinels to demote): how many
    acknowledged enqueues the new master lacks afterwards, and how many calls failed meanwhile."""
    setup = SentinelSetup().start()
    try:
        queue = open_queue(setup.url(), "switch", wait_replicas=wait_replicas, wait_timeout_seconds=0.5)
        acknowledged: list[str] = []
        refused = 0
        setup.sentinels[0].client.sentinel_failover(MASTER_NAME)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            job_id = f"job-{len(acknowledged) + refused}"
            try:
                if queue.enqueue([job_id]) == 1:
                    acknowledged.append(job_id)
            except redis.RedisError:  # NotReplicated among them
                refused += 1
            time.sleep(0.01)
        master = setup.master_port()
        assert master is not None
        with setup.client(master) as client:
            kept = set(client.zrange(queue.keys.todos, 0, -1))  # type: ignore[arg-type]
        queue.close()
        lost = [job_id for job_id in acknowledged if job_id not in kept]
        return {
            "wait_replicas": wait_replicas,
            "acknowledged": len(acknowledged),
            "refused": refused,
            "lost": len(lost),
        }
    finally:
        setup.cleanup()


def main() -> None:
    """``python -m tests.support.sentinel RUNS WAIT_REPLICAS kill|cut|switch [TOTAL RATE]``: the
    failover run (``switch_run`` for switch) that many times, a JSON line of figures each
    (docs/guide.md#redis-sentinel quotes them)."""
    runs, wait_replicas, cut = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "cut"
    total, rate = (int(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) > 5 else (600, 150.0)
    if sys.argv[3] == "switch":
        for _ in range(runs):
            print(json.dumps(switch_run(wait_replicas=wait_replicas)), flush=True)
        return
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="setqueue-failover-") as folder:
            procs: list[Proc] = []
            figures = failover_run(Path(folder), procs, wait_replicas=wait_replicas, cut=cut, total=total, rate=rate)
            print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
