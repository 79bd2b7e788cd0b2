"""The systems under test: how each enqueues and starts its workers. The peers are imported only in their
own methods: setqueue and naive run without them (the smoke test's venv)."""

# ruff: noqa: PLC0415  (peers are imported lazily)
import asyncio
import contextlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from common import CURRENT, QUEUE, WORKERS_DIR, CodeTree, Command

from tests.support import free_port

sys.path.insert(0, str(WORKERS_DIR))  # the peers' producers import their job modules
BIN = Path(sys.executable).parent  # the peers' console scripts


@dataclass
class System:
    """``io_seconds``: the job's wait before its INCR; ``concurrency``: jobs at once per worker process
    (None: the system's default)."""

    name: str
    url: str
    concurrency: int | None = None
    io_seconds: float = 0.0
    noop: bool = False  # the no-op job
    state: dict[str, Any] = field(default_factory=dict)  # clients and processes, made on first use
    package = ""  # the distribution whose version the settings name
    enqueue_how = ""
    default = 1  # jobs at once per worker process
    unit = ""

    def made(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.state:
            self.state[key] = make()
        return self.state[key]

    def env(self, tree: CodeTree = CURRENT) -> dict[str, str]:
        env = {**tree.env([str(WORKERS_DIR)]), "BENCH_REDIS_URL": self.url, "PYTHONUNBUFFERED": "1"}
        if self.io_seconds:
            env["BENCH_IO_SECONDS"] = repr(self.io_seconds)
        if self.noop:
            env["BENCH_NOOP"] = "1"
        if self.concurrency is not None:
            env["BENCH_CONCURRENCY"] = str(self.concurrency)  # arq and saq read it
        return env

    def describe(self) -> str:
        """Its workers' command at W=2 and how it enqueues, for the summary."""
        cmds = self.commands(2)
        argv = " ".join(cmds[0].argv).replace(f"{BIN}/", "").replace(f"{WORKERS_DIR}/", "").replace(self.url, "$URL")
        how = f"({self.package} {version(self.package)}, {self.per_process()} jobs at once per process)"
        return f"W=2: {len(cmds)} x `{argv}` {how}; enqueue: {self.enqueue_how}"

    def per_process(self) -> str:
        return f"{self.concurrency or self.default}{self.unit}" + ("" if self.concurrency else " (default)")

    def prepare(self) -> None:  # before the timed enqueue
        pass

    def enqueue(self, ids: list[str]) -> None:
        raise NotImplementedError

    def argv(self) -> list[str]:
        raise NotImplementedError

    def commands(self, workers: int) -> list[Command]:
        return [Command(self.argv(), self.env())] * workers

    def queue_servers(self) -> dict[str, redis.Redis]:
        """Servers holding the queue besides the bench's own (a cluster's nodes), whose costs count too."""
        return {}

    def after_drain(self) -> dict[str, Any]:  # added to a trial's result once every job ran
        return {}

    def close(self) -> None:
        if "client" in self.state:
            self.state.pop("client").close()


@dataclass
class SetQueue(System):
    """`python -m worker` run from ``code``: this checkout, or a baseline worktree whose Queue then runs in
    a producer process of that tree (bench_sq_producer.py)."""

    claim_batch: int = 100
    asynchronous: bool = False  # an async def handler on one event loop
    code: CodeTree = CURRENT
    queue: str = QUEUE
    shards: int = 1  # QUEUE_SHARDS
    wait_replicas: int = 0  # WAIT_REPLICAS: every write waits for that many replicas
    groups: int = 0  # job i in job group i mod groups
    results: bool = False  # the handler returns a small result, kept (RESULT_TTL_SECONDS's default)
    processes: str = ""  # PROCESSES ("": its default)
    tasks: bool = False  # JOB_HANDLER: the registry of workers/bench_sq_tasks.py, each job a call of its task
    envelope: bool = False  # each job carries that call's envelope as its payload (with tasks too)
    beside: str = ""  # the system it takes turns with, trial by trial (matrices/one_server.py)

    def worker_settings(self) -> dict[str, str]:
        settings = {
            "REDIS_URL": self.url,
            "QUEUE_NAME": self.queue,
            "JOB_HANDLER": "bench_sq_tasks:tasks" if self.tasks else f"bench_sq_handler:{self.handler()}",
            "CONCURRENCY": str(self.concurrency or 1),
            "CLAIM_BATCH": str(self.claim_batch),
            "LOG_LEVEL": "WARNING",
        }
        if self.processes:
            settings["PROCESSES"] = self.processes
        if self.shards > 1 or self.wait_replicas:
            settings.update(QUEUE_SHARDS=str(self.shards), WAIT_REPLICAS=str(self.wait_replicas))
        return settings

    def handler(self) -> str:
        return "handle_async" if self.asynchronous else "handle_result" if self.results else "handle"

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.worker_settings().items() if k != "REDIS_URL")
        tree = "" if self.code.is_current else f"; the code of {self.code.ref} ({self.code.sha[:12]})"
        grouped = f"; the jobs in {self.groups:,} job groups (one enqueue call a group)" if self.groups else ""
        if self.tasks or self.envelope:
            grouped += f", each job's payload the envelope of a call of the task bench.noop, `{self.payload()}`"
        return (
            f"W x `python -m worker`, {settings}, METRICS_PORT on; enqueue: open_queue().enqueue, 500 a call"
            f"{grouped}{tree}"
        )

    def payload(self) -> str | None:
        """Every job's payload: what ``send(noop)`` writes (workers/bench_sq_tasks.py), or None."""
        if not (self.tasks or self.envelope):
            return None
        from bench_sq_tasks import ENVELOPE

        return str(ENVELOPE)

    def runs_on(self, tree: CodeTree) -> bool:
        """Whether ``tree`` can run this system (a tree before tasks by name cannot serve the registry)."""
        return not self.tasks or (tree.root / "shared" / "setqueue" / "tasks.py").exists()

    def per_process(self) -> str:
        return f"{self.concurrency or 1} ({'async tasks' if self.asynchronous else 'threads'})"

    def client(self) -> Any:
        from setqueue import open_queue

        return self.made(
            "client", lambda: open_queue(self.url, self.queue, shards=self.shards, wait_replicas=self.wait_replicas)
        )

    def prepare(self) -> None:
        """After a FLUSHALL: the queue's layout key is gone, and a queue records it once, so the producer
        opens the queue afresh (or the workers would find keys written without one)."""
        if self.code.is_current:
            if "client" in self.state:
                self.state.pop("client").close()
        elif "producer" not in self.state:
            argv = [sys.executable, str(WORKERS_DIR / "bench_sq_producer.py"), self.queue]
            how: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
            self.state["producer"] = subprocess.Popen(argv, env=self.env(self.code), cwd=self.code.root, **how)
            self.state["producer"].stdout.readline()  # it has imported setqueue: ready
        else:
            self.state["producer"].stdin.write("reset\n")
            self.state["producer"].stdin.flush()
            self.state["producer"].stdout.readline()

    def enqueue(self, ids: list[str]) -> None:
        payload = self.payload()
        calls = [(ids[g :: self.groups], f"tenant-{g}") for g in range(self.groups)] if self.groups else [(ids, None)]
        if not self.code.is_current:  # the same calls, in the baseline tree's producer
            self.prepare()
            proc = self.state["producer"]
            proc.stdin.write(json.dumps([[*call, payload] for call in calls]) + "\n")
            proc.stdin.flush()
            if not proc.stdout.readline():
                raise RuntimeError(f"{self.name}: the producer exited (exit code {proc.wait()})")
            return
        for some, group in calls:
            self.client().enqueue(some if payload is None else dict.fromkeys(some, payload), group=group)

    def commands(self, workers: int) -> list[Command]:
        env = {**self.env(self.code), **self.worker_settings()}
        argv = [sys.executable, "-m", "worker"]
        return [Command(argv, {**env, "METRICS_PORT": str(free_port())}, self.code.root) for _ in range(workers)]

    def close(self) -> None:
        super().close()
        if "producer" in self.state:
            proc = self.state.pop("producer")
            proc.stdin.close()  # it exits at the end of its input
            proc.wait(10)


class Naive(System):
    """The seed design (workers/bench_naive_worker.py)."""

    package, enqueue_how = "redis", "SADD, 500 ids a call"

    def enqueue(self, ids: list[str]) -> None:
        r = self.made("client", lambda: redis.Redis.from_url(self.url))
        for i in range(0, len(ids), 500):
            r.sadd("naive:todos", *ids[i : i + 500])

    def argv(self) -> list[str]:
        return [sys.executable, str(WORKERS_DIR / "bench_naive_worker.py")]


class RQ(System):
    package, enqueue_how = "rq", "Queue.enqueue_many, 500 jobs a pipeline"
    worker_class = "rq.worker.Worker"  # forks a work horse per job

    def enqueue(self, ids: list[str]) -> None:
        from bench_common import run_job
        from rq import Queue

        q = self.made("queue", lambda: Queue(QUEUE, connection=redis.Redis.from_url(self.url)))
        for i in range(0, len(ids), 500):
            with q.connection.pipeline() as pipe:
                q.enqueue_many([Queue.prepare_data(run_job, (a,)) for a in ids[i : i + 500]], pipeline=pipe)
                pipe.execute()

    def argv(self) -> list[str]:
        return [str(BIN / "rq"), "worker", "-u", self.url, "-w", self.worker_class, "-q", QUEUE]


class RQSimple(RQ):
    worker_class = "rq.worker.SimpleWorker"  # runs the job in the worker process, no fork


def job_module(system: System, name: str) -> Any:
    """A peer's job module made afresh on ``system``'s server: Dramatiq's broker and Celery's app connect at
    import, to the BENCH_REDIS_URL of the moment, and each matrix has a server of its own."""
    os.environ["BENCH_REDIS_URL"] = system.url
    return system.made("module", lambda: importlib.reload(importlib.import_module(name)))


class Dramatiq(System):
    package, enqueue_how, default, unit = "dramatiq", "actor.send per job (no batch API)", 8, " threads"

    def enqueue(self, ids: list[str]) -> None:
        actor = job_module(self, "bench_dramatiq_jobs").job
        for job_id in ids:
            actor.send(job_id)

    def commands(self, workers: int) -> list[Command]:
        argv = [str(BIN / "dramatiq"), "bench_dramatiq_jobs", "--processes", str(workers)]
        return [Command([*argv, "--threads", str(self.concurrency or self.default)], self.env())]


class Celery(System):
    """By default one worker of W prefork processes, the usual way; at a concurrency, W worker processes of
    that many threads each, as setqueue's."""

    package, enqueue_how = "celery", "task.apply_async per job, one producer"

    def per_process(self) -> str:
        return f"{self.concurrency} threads" if self.concurrency else "1 (prefork: W processes, default)"

    def enqueue(self, ids: list[str]) -> None:
        task = job_module(self, "bench_celery_jobs").job
        with task.app.producer_or_acquire() as producer:
            for job_id in ids:
                task.apply_async((job_id,), producer=producer)

    def commands(self, workers: int) -> list[Command]:
        base = [str(BIN / "celery"), "-A", "bench_celery_jobs", "worker", "-l", "WARNING", "-Q", QUEUE]
        if self.concurrency:
            threads = ["-P", "threads", "-c", str(self.concurrency)]
            return [Command([*base, *threads, "-n", f"bench{i}@%h"], self.env()) for i in range(workers)]
        return [Command([*base, "-P", "prefork", "--concurrency", str(workers)], self.env())]


class AsyncPeer(System):
    """arq and saq: asyncio workers."""

    default, enqueue_how = 10, "one call per job, 50 at a time"
    worker: tuple[str, ...] = ()  # after the console script

    def argv(self) -> list[str]:
        return [str(BIN / self.package), *self.worker]

    async def connect(self) -> Any:
        raise NotImplementedError

    async def send(self, client: Any, job_id: str) -> None:
        raise NotImplementedError

    def enqueue(self, ids: list[str]) -> None:
        loop = self.made("loop", asyncio.new_event_loop)
        client = self.made("peer", lambda: loop.run_until_complete(self.connect()))

        async def send_all() -> None:
            for i in range(0, len(ids), 50):
                await asyncio.gather(*(self.send(client, a) for a in ids[i : i + 50]))

        loop.run_until_complete(send_all())

    def close(self) -> None:
        if "peer" in self.state:
            client = self.state.pop("peer")
            self.state["loop"].run_until_complete(client.aclose() if hasattr(client, "aclose") else client.disconnect())
            self.state.pop("loop").close()


class Arq(AsyncPeer):
    package, worker = "arq", ("bench_arq_jobs.WorkerSettings",)

    async def connect(self) -> Any:
        from arq import create_pool
        from arq.connections import RedisSettings

        return await create_pool(RedisSettings.from_dsn(self.url))

    async def send(self, client: Any, job_id: str) -> None:
        await client.enqueue_job("job", job_id)


class Saq(AsyncPeer):
    package, worker = "saq", ("bench_saq_jobs.settings", "--quiet")

    async def connect(self) -> Any:
        from saq import Queue

        queue = Queue.from_url(self.url, name=QUEUE)
        await queue.connect()
        return queue

    async def send(self, client: Any, job_id: str) -> None:
        await client.enqueue("job", arg=job_id)


def close_all(systems: list[Any]) -> None:
    for s in systems:
        with contextlib.suppress(Exception):
            s.close()


PEERS: dict[str, type[System]] = {"naive": Naive, "rq": RQ, "rq-simple": RQSimple, "dramatiq": Dramatiq}
PEERS |= {"celery": Celery, "arq": Arq, "saq": Saq}
