"""The systems under test: how each one enqueues and how its workers are started.

Peers (rq, dramatiq, celery, arq, saq) are imported only inside their own methods, so the
benchmark runs with setqueue and naive alone in an environment that lacks them (the smoke test
does).

A System carries the job it runs (``io_seconds``: 0 for the CPU-trivial job, 0.01 for the I/O
matrix's job) and its concurrency per worker process (``concurrency``: None = the system's own
default; setqueue always gets one). setqueue also carries the code tree it runs (``code``: this
checkout, or a baseline git worktree with --baseline; see baseline.py).
"""

# ruff: noqa: PLC0415  (peers are imported lazily: the smoke test runs without them)
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from baseline import CURRENT, REPO, CodeTree

WORKERS_DIR = REPO / "bench" / "workers"
QUEUE = "bench"
# The checkout this file sits in is the one measured (its worker/ and shared/setqueue), producer
# and workers alike, even when the venv has another checkout installed editable: the editable
# finder comes after sys.path, so these win. (A baseline's processes get its tree instead.)
CODE_PATH = CURRENT.python_path()
for _p in reversed(CODE_PATH):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool(name: str) -> str:
    """A console script of the running interpreter's environment (bench/.venv/bin/NAME)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def base_env(url: str, code: CodeTree = CURRENT) -> dict[str, str]:
    """A worker's environment: the job modules (bench/workers), then ``code``'s setqueue and worker."""
    env = code.env([str(WORKERS_DIR)])
    env["BENCH_REDIS_URL"] = url
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]
    cwd: Path = REPO  # `python -m worker` imports worker/ from here


@dataclass
class System:
    name: str
    url: str
    claim_batch: int = 100
    state: dict[str, Any] = field(default_factory=dict)
    concurrency: int | None = None  # jobs at once per worker process; None = the system's default
    io_seconds: float = 0.0  # the job waits this long before its INCR (the I/O-bound matrix)

    def __post_init__(self) -> None:
        pass

    def tree(self) -> CodeTree:
        """The setqueue code on the workers' path: this checkout's, except for a baseline."""
        return CURRENT

    def env(self) -> dict[str, str]:
        """The workers' environment: the job's wait and, for peers configured from the
        environment (arq, saq), the concurrency."""
        env = base_env(self.url, self.tree())
        if self.io_seconds:
            env["BENCH_IO_SECONDS"] = repr(self.io_seconds)
        if self.concurrency is not None:
            env["BENCH_CONCURRENCY"] = str(self.concurrency)
        return env

    # -- what the report says about the settings --------------------------------------------
    def settings(self, workers: int | str) -> str:
        raise NotImplementedError

    def per_process(self) -> str:
        """Jobs one worker process runs at once, for the report."""
        return "1"

    def enqueue_api(self) -> str:
        raise NotImplementedError

    # -- producers -----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Start what the producer needs beyond a client before its enqueue is timed (a baseline's
        producer process)."""

    def enqueue(self, args: list[str]) -> None:
        raise NotImplementedError

    def enqueue_one(self, arg: str) -> None:
        self.enqueue([arg])

    # -- workers ---------------------------------------------------------------------------------
    def commands(self, workers: int) -> list[Command]:
        raise NotImplementedError

    # -- what the run records beyond the bench's own redis-server --------------------------------
    def queue_servers(self) -> dict[str, redis.Redis]:
        """Redis servers that hold the queue when it is not on the bench's own server (a cluster's
        nodes), by name: a throughput run records each one's CPU and commands."""
        return {}

    def after_drain(self) -> dict[str, Any]:
        """What a throughput run adds to its result once the backlog is drained."""
        return {}

    def close(self) -> None:
        pass


@dataclass
class SetQueue(System):
    """setqueue's real worker service, from ``code``: this checkout, or a baseline worktree whose
    producer runs in a process of its own (bench_sq_producer.py) and whose workers start in it."""

    asynchronous = False  # SetQueueAsync: JOB_HANDLER=bench_sq_handler:handle_async (an async def)
    code: CodeTree = CURRENT

    def __post_init__(self) -> None:
        if self.concurrency is None:
            self.concurrency = 1  # one thread: what a user picks for CPU-trivial jobs

    def tree(self) -> CodeTree:
        return self.code

    def _queue(self) -> Any:
        if "queue" not in self.state:
            from setqueue import Queue

            self.state["queue"] = Queue.from_url(self.url, name=QUEUE)
        return self.state["queue"]

    def _producer(self) -> subprocess.Popen[str]:
        if "producer" not in self.state:
            proc = subprocess.Popen(
                [sys.executable, str(WORKERS_DIR / "bench_sq_producer.py"), QUEUE],
                env=self.env(),
                cwd=self.code.root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert proc.stdout is not None
            imported = json.loads(proc.stdout.readline() or "null")
            if not imported or not Path(imported).resolve().is_relative_to(self.code.root):
                proc.kill()
                raise RuntimeError(f"{self.name}: the producer imported setqueue from {imported}, not {self.code.root}")
            self.state["producer"] = proc
        producer: subprocess.Popen[str] = self.state["producer"]
        return producer

    def runner(self) -> str:
        return "python -m worker"

    def handler(self) -> str:
        return "bench_sq_handler:handle_async" if self.asynchronous else "bench_sq_handler:handle"

    def settings(self, workers: int | str) -> str:
        kind = "async def handler (one event loop)" if self.asynchronous else "plain handler (threads)"
        return (
            f"{workers} x `{self.runner()}`, JOB_HANDLER={self.handler()}, {kind}, CONCURRENCY={self.concurrency}, "
            f"CLAIM_BATCH={self.claim_batch}, METRICS_PORT on, lease renewal on (LEASE_SECONDS=30 default), "
            "LOG_LEVEL=WARNING" + ("" if self.code.is_current else f"; code: {self.code.describe()}")
        )

    def per_process(self) -> str:
        return f"{self.concurrency} ({'async tasks' if self.asynchronous else 'threads'})"

    def enqueue_api(self) -> str:
        if self.code.is_current:
            return "Queue.enqueue(ids) (500 ids per script call)"
        return (
            f"Queue.enqueue(ids) of {self.code.label} (500 ids per script call), in a producer process of that "
            "tree's code (bench_sq_producer.py; the ids reach it over a pipe)"
        )

    def prepare(self) -> None:
        if not self.code.is_current:
            self._producer()

    def enqueue(self, args: list[str]) -> None:
        if self.code.is_current:
            self._queue().enqueue(args)
            return
        proc = self._producer()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(args) + "\n")
        proc.stdin.flush()
        if not proc.stdout.readline():
            raise RuntimeError(f"{self.name}: the producer exited (exit code {proc.wait()})")

    def worker_settings(self) -> dict[str, str]:
        """The worker service's settings, as environment variables (METRICS_PORT aside: one per process)."""
        return {
            "REDIS_URL": self.url,
            "QUEUE_NAME": QUEUE,
            "JOB_HANDLER": self.handler(),
            "CONCURRENCY": str(self.concurrency),
            "CLAIM_BATCH": str(self.claim_batch),
            "LOG_LEVEL": "WARNING",
        }

    def commands(self, workers: int) -> list[Command]:
        cmds = []
        for _ in range(workers):
            env = self.env()
            env.update(self.worker_settings(), METRICS_PORT=str(free_port()))
            cmds.append(Command([sys.executable, "-m", "worker"], env, cwd=self.code.root))
        return cmds

    def close(self) -> None:
        if "queue" in self.state:
            self.state.pop("queue").close()
        if "producer" in self.state:
            proc = self.state.pop("producer")
            proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class SetQueueAsync(SetQueue):
    asynchronous = True


@dataclass
class ClusterSetQueue(SetQueue):
    """setqueue's real worker service on a Redis Cluster (bench/cluster.py): ``url`` names one node,
    queue ``queue`` has ``shards`` shards (QUEUE_SHARDS) and every write waits for ``wait_replicas``
    replicas (WAIT_REPLICAS). The job's INCR goes to ``counter_url``, a Redis outside the cluster, so
    that what the nodes do is the queue's work alone. ``nodes``: every node's port, ``masters``: the
    masters' (flushed before each run)."""

    counter_url: str = ""
    queue: str = QUEUE
    shards: int = 1
    wait_replicas: int = 0
    nodes: tuple[int, ...] = ()
    masters: tuple[int, ...] = ()

    def env(self) -> dict[str, str]:
        env = super().env()
        env["BENCH_REDIS_URL"] = self.counter_url
        return env

    def worker_settings(self) -> dict[str, str]:
        settings = super().worker_settings()
        settings.update(QUEUE_NAME=self.queue, QUEUE_SHARDS=str(self.shards), WAIT_REPLICAS=str(self.wait_replicas))
        return settings

    def _queue(self) -> Any:
        if "queue" not in self.state:
            from setqueue import open_queue

            self.state["queue"] = open_queue(self.url, self.queue, shards=self.shards, wait_replicas=self.wait_replicas)
        return self.state["queue"]

    def settings(self, workers: int | str) -> str:
        return (
            f"{workers} x `{self.runner()}` with REDIS_URL naming one node of the cluster, QUEUE_NAME={self.queue}, "
            f"QUEUE_SHARDS={self.shards}, WAIT_REPLICAS={self.wait_replicas}, JOB_HANDLER={self.handler()}, "
            f"CONCURRENCY={self.concurrency}, CLAIM_BATCH={self.claim_batch}, METRICS_PORT on, LOG_LEVEL=WARNING; "
            "the job's INCR on a redis-server outside the cluster"
        )

    def enqueue_api(self) -> str:
        how = "ShardedQueue.enqueue (500 ids per script call and shard)" if self.shards > 1 else "Queue.enqueue"
        return f"{how}, wait_replicas={self.wait_replicas}"

    def queue_servers(self) -> dict[str, redis.Redis]:
        if "nodes" not in self.state:
            self.state["nodes"] = {str(p): redis.Redis(port=p, decode_responses=True) for p in self.nodes}
        servers: dict[str, redis.Redis] = self.state["nodes"]
        return servers

    def prepare(self) -> None:
        super().prepare()
        for port in self.masters:  # replicas follow their masters
            self.queue_servers()[str(port)].flushall()

    def after_drain(self) -> dict[str, Any]:
        """Jobs done in each shard (done keeps every id: DONE_MAX_COUNT is 1,000,000)."""
        stats = self._queue().stats()
        return {"done_per_shard": [s["done"] for s in stats.get("shards", [stats])]}

    def close(self) -> None:
        for client in self.state.pop("nodes", {}).values():
            client.close()
        super().close()


class Naive(System):
    def _redis(self) -> redis.Redis:
        if "r" not in self.state:
            self.state["r"] = redis.Redis.from_url(self.url)
        return self.state["r"]

    def settings(self, workers: int | str) -> str:
        return (
            f"{workers} x bench/workers/bench_naive_worker.py: SRANDMEMBER, SMOVE, SETEX, job, SMOVE, DEL "
            "(one job per claim, each its own round trip), idle poll 1 ms"
        )

    def enqueue_api(self) -> str:
        return "SADD todos (500 ids per call)"

    def enqueue(self, args: list[str]) -> None:
        r = self._redis()
        for i in range(0, len(args), 500):
            r.sadd("naive:todos", *args[i : i + 500])

    def commands(self, workers: int) -> list[Command]:
        return [Command([sys.executable, str(WORKERS_DIR / "bench_naive_worker.py")], self.env())] * workers

    def close(self) -> None:
        if "r" in self.state:
            self.state.pop("r").close()


class RQ(System):
    worker_class = "rq.worker.Worker"

    def _queue(self) -> Any:
        if "q" not in self.state:
            from rq import Queue

            self.state["q"] = Queue(QUEUE, connection=redis.Redis.from_url(self.url))
        return self.state["q"]

    def settings(self, workers: int | str) -> str:
        import rq

        return f"{workers} x `rq worker -w {self.worker_class} -q` (rq {rq.__version__}; defaults otherwise)"

    def enqueue_api(self) -> str:
        return "Queue.enqueue_many (500 jobs per pipeline)"

    def enqueue(self, args: list[str]) -> None:
        from rq import Queue

        sys.path.insert(0, str(WORKERS_DIR))
        from bench_rq_jobs import job

        q = self._queue()
        for i in range(0, len(args), 500):
            with q.connection.pipeline() as pipe:
                q.enqueue_many([Queue.prepare_data(job, (a,)) for a in args[i : i + 500]], pipeline=pipe)
                pipe.execute()

    def enqueue_one(self, arg: str) -> None:
        sys.path.insert(0, str(WORKERS_DIR))
        from bench_rq_jobs import job

        self._queue().enqueue(job, arg)

    def commands(self, workers: int) -> list[Command]:
        argv = [tool("rq"), "worker", "-u", self.url, "-w", self.worker_class, "-q", QUEUE]
        return [Command(argv, self.env())] * workers


class RQSimple(RQ):
    worker_class = "rq.worker.SimpleWorker"


class Dramatiq(System):
    def _actor(self) -> Any:
        if "actor" not in self.state:
            os.environ["BENCH_REDIS_URL"] = self.url
            sys.path.insert(0, str(WORKERS_DIR))
            import bench_dramatiq_jobs

            self.state["actor"] = bench_dramatiq_jobs.job
        return self.state["actor"]

    def threads(self) -> int:
        return self.concurrency or 8  # 8 is Dramatiq's default

    def settings(self, workers: int | str) -> str:
        import dramatiq

        note = "8 threads is its default" if self.concurrency is None else "threads set to the shared concurrency"
        return (
            f"`dramatiq bench_dramatiq_jobs --processes {workers} --threads {self.threads()}` "
            f"(dramatiq {dramatiq.__version__}; {note})"
        )

    def per_process(self) -> str:
        return f"{self.threads()} threads" + (" (default)" if self.concurrency is None else "")

    def enqueue_api(self) -> str:
        return "actor.send per job (no batch API)"

    def enqueue(self, args: list[str]) -> None:
        actor = self._actor()
        for a in args:
            actor.send(a)

    def commands(self, workers: int) -> list[Command]:
        argv = [tool("dramatiq"), "bench_dramatiq_jobs", "--processes", str(workers), "--threads", str(self.threads())]
        return [Command(argv, self.env())]


class Celery(System):
    def _task(self) -> Any:
        if "task" not in self.state:
            os.environ["BENCH_REDIS_URL"] = self.url
            sys.path.insert(0, str(WORKERS_DIR))
            import bench_celery_jobs

            self.state["task"] = bench_celery_jobs.job
        return self.state["task"]

    def settings(self, workers: int | str) -> str:
        import celery

        if self.concurrency is not None:
            return (
                f"{workers} x `celery worker -P threads -c {self.concurrency} -n bench<i>@%h` (celery "
                f"{celery.__version__}; W worker processes with {self.concurrency} threads each, as setqueue's W "
                "processes; every other setting default)"
            )
        return (
            f"`celery worker -P prefork --concurrency {workers}` (celery {celery.__version__}; one worker with W "
            "pool processes, the usual way to run it; prefetch multiplier 4, acks early, mingle/gossip/heartbeat "
            "on: all defaults)"
        )

    def per_process(self) -> str:
        if self.concurrency is not None:
            return f"{self.concurrency} threads"
        return "1 (prefork: W pool processes, default)"

    def enqueue_api(self) -> str:
        return "task.apply_async per job on one producer"

    def enqueue(self, args: list[str]) -> None:
        task = self._task()
        with task.app.producer_or_acquire() as producer:
            for a in args:
                task.apply_async((a,), producer=producer)

    def enqueue_one(self, arg: str) -> None:
        self._task().apply_async((arg,))

    def commands(self, workers: int) -> list[Command]:
        base = [tool("celery"), "-A", "bench_celery_jobs", "worker", "-l", "WARNING", "-Q", QUEUE]
        if self.concurrency is not None:
            pool = ["-P", "threads", "-c", str(self.concurrency)]
            return [Command([*base, *pool, "-n", f"bench{i}@%h"], self.env()) for i in range(workers)]
        return [Command([*base, "-P", "prefork", "--concurrency", str(workers)], self.env())]


class Arq(System):
    def _loop_pool(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        if "pool" not in self.state:
            from arq import create_pool
            from arq.connections import RedisSettings

            loop = asyncio.new_event_loop()
            self.state["loop"] = loop
            self.state["pool"] = loop.run_until_complete(create_pool(RedisSettings.from_dsn(self.url)))
        return self.state["loop"], self.state["pool"]

    def settings(self, workers: int | str) -> str:
        import arq.version

        if self.concurrency is not None:
            return (
                f"{workers} x `arq bench_arq_jobs.WorkerSettings` (arq {arq.version.VERSION}; "
                f"max_jobs={self.concurrency}, defaults otherwise: poll_delay 0.5 s)"
            )
        return (
            f"{workers} x `arq bench_arq_jobs.WorkerSettings` "
            f"(arq {arq.version.VERSION}; defaults: max_jobs 10, poll_delay 0.5 s)"
        )

    def per_process(self) -> str:
        return f"{self.concurrency} (max_jobs)" if self.concurrency is not None else "10 (max_jobs default)"

    def enqueue_api(self) -> str:
        return "pool.enqueue_job, 50 concurrent calls at a time"

    def enqueue(self, args: list[str]) -> None:
        loop, pool = self._loop_pool()

        async def go() -> None:
            for i in range(0, len(args), 50):
                await asyncio.gather(*(pool.enqueue_job("job", a) for a in args[i : i + 50]))

        loop.run_until_complete(go())

    def commands(self, workers: int) -> list[Command]:
        return [Command([tool("arq"), "bench_arq_jobs.WorkerSettings"], self.env())] * workers

    def close(self) -> None:
        if "pool" in self.state:
            loop, pool = self.state.pop("loop"), self.state.pop("pool")
            loop.run_until_complete(pool.aclose())
            loop.close()


class Saq(System):
    """saq, the asyncio peer: W x `saq bench_saq_jobs.settings` (one worker per process)."""

    def _loop_queue(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        if "queue" not in self.state:
            from saq import Queue

            loop = asyncio.new_event_loop()
            self.state["loop"] = loop
            self.state["queue"] = Queue.from_url(self.url, name=QUEUE)
            loop.run_until_complete(self.state["queue"].connect())
        return self.state["loop"], self.state["queue"]

    def settings(self, workers: int | str) -> str:
        from importlib.metadata import version

        conc = "concurrency 10 (its default)" if self.concurrency is None else f"concurrency={self.concurrency}"
        return f"{workers} x `saq bench_saq_jobs.settings` (saq {version('saq')}; {conc}, defaults otherwise)"

    def per_process(self) -> str:
        return f"{self.concurrency}" if self.concurrency is not None else "10 (default)"

    def enqueue_api(self) -> str:
        return "queue.enqueue per job, 50 concurrent calls at a time (no batch API)"

    def enqueue(self, args: list[str]) -> None:
        loop, queue = self._loop_queue()

        async def go() -> None:
            for i in range(0, len(args), 50):
                await asyncio.gather(*(queue.enqueue("job", arg=a) for a in args[i : i + 50]))

        loop.run_until_complete(go())

    def commands(self, workers: int) -> list[Command]:
        return [Command([tool("saq"), "bench_saq_jobs.settings", "--quiet"], self.env())] * workers

    def close(self) -> None:
        if "queue" in self.state:
            loop, queue = self.state.pop("loop"), self.state.pop("queue")
            loop.run_until_complete(queue.disconnect())
            loop.close()


SYSTEMS: dict[str, type[System]] = {
    "setqueue": SetQueue,
    "setqueue-async": SetQueueAsync,
    "naive": Naive,
    "rq": RQ,
    "rq-simple": RQSimple,
    "dramatiq": Dramatiq,
    "celery": Celery,
    "arq": Arq,
    "saq": Saq,
}
PEERS = ("rq", "rq-simple", "dramatiq", "celery", "arq", "saq")
