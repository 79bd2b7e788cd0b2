"""The systems under test: how each one enqueues and how its workers are started.

Peers (rq, dramatiq, celery, arq) are imported only inside their own methods, so the benchmark
runs with setqueue and naive alone in an environment that lacks them (the smoke test does).
"""

# ruff: noqa: PLC0415  (peers are imported lazily: the smoke test runs without them)
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parent.parent
WORKERS_DIR = REPO / "bench" / "workers"
QUEUE = "bench"


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


def base_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["BENCH_REDIS_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(WORKERS_DIR), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]


@dataclass
class System:
    name: str
    url: str
    claim_batch: int = 100
    state: dict[str, Any] = field(default_factory=dict)

    # -- what the report says about the settings --------------------------------------------
    def settings(self, workers: int | str) -> str:
        raise NotImplementedError

    def enqueue_api(self) -> str:
        raise NotImplementedError

    # -- producers -----------------------------------------------------------------------------
    def enqueue(self, args: list[str]) -> None:
        raise NotImplementedError

    def enqueue_one(self, arg: str) -> None:
        self.enqueue([arg])

    # -- workers ---------------------------------------------------------------------------------
    def commands(self, workers: int) -> list[Command]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SetQueue(System):
    def _queue(self) -> Any:
        if "queue" not in self.state:
            from setqueue import Queue

            self.state["queue"] = Queue.from_url(self.url, name=QUEUE)
        return self.state["queue"]

    def runner(self) -> str:
        return "python -m worker"

    def settings(self, workers: int | str) -> str:
        return (
            f"{workers} x `{self.runner()}`, CLAIM_BATCH={self.claim_batch}, METRICS_PORT on, lease renewal on "
            f"(LEASE_SECONDS=30 default), LOG_LEVEL=WARNING"
        )

    def enqueue_api(self) -> str:
        return "Queue.enqueue(ids) (500 ids per script call)"

    def enqueue(self, args: list[str]) -> None:
        self._queue().enqueue(args)

    def commands(self, workers: int) -> list[Command]:
        cmds = []
        for _ in range(workers):
            env = base_env(self.url)
            env.update(
                REDIS_URL=self.url,
                QUEUE_NAME=QUEUE,
                JOB_HANDLER="bench_sq_handler:handle",
                CLAIM_BATCH=str(self.claim_batch),
                METRICS_PORT=str(free_port()),
                LOG_LEVEL="WARNING",
            )
            cmds.append(Command([sys.executable, "-m", "worker"], env))
        return cmds

    def close(self) -> None:
        if "queue" in self.state:
            self.state.pop("queue").close()


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
        return [Command([sys.executable, str(WORKERS_DIR / "bench_naive_worker.py")], base_env(self.url))] * workers

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
        return [Command(argv, base_env(self.url))] * workers


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

    def settings(self, workers: int | str) -> str:
        import dramatiq

        return (
            f"`dramatiq bench_dramatiq_jobs --processes {workers} --threads 8` "
            f"(dramatiq {dramatiq.__version__}; 8 threads is its default)"
        )

    def enqueue_api(self) -> str:
        return "actor.send per job (no batch API)"

    def enqueue(self, args: list[str]) -> None:
        actor = self._actor()
        for a in args:
            actor.send(a)

    def commands(self, workers: int) -> list[Command]:
        argv = [tool("dramatiq"), "bench_dramatiq_jobs", "--processes", str(workers), "--threads", "8"]
        return [Command(argv, base_env(self.url))]


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

        return (
            f"`celery worker -P prefork --concurrency {workers}` (celery {celery.__version__}; one worker with W "
            "pool processes, the usual way to run it; prefetch multiplier 4, acks early, mingle/gossip/heartbeat "
            "on: all defaults)"
        )

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
        argv = [tool("celery"), "-A", "bench_celery_jobs", "worker", "-P", "prefork", "--concurrency", str(workers)]
        argv += ["-l", "WARNING", "-Q", QUEUE]
        return [Command(argv, base_env(self.url))]


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

        return (
            f"{workers} x `arq bench_arq_jobs.WorkerSettings` "
            f"(arq {arq.version.VERSION}; defaults: max_jobs 10, poll_delay 0.5 s)"
        )

    def enqueue_api(self) -> str:
        return "pool.enqueue_job, 50 concurrent calls at a time"

    def enqueue(self, args: list[str]) -> None:
        loop, pool = self._loop_pool()

        async def go() -> None:
            for i in range(0, len(args), 50):
                await asyncio.gather(*(pool.enqueue_job("job", a) for a in args[i : i + 50]))

        loop.run_until_complete(go())

    def commands(self, workers: int) -> list[Command]:
        return [Command([tool("arq"), "bench_arq_jobs.WorkerSettings"], base_env(self.url))] * workers

    def close(self) -> None:
        if "pool" in self.state:
            loop, pool = self.state.pop("loop"), self.state.pop("pool")
            loop.run_until_complete(pool.aclose())
            loop.close()


SYSTEMS: dict[str, type[System]] = {
    "setqueue": SetQueue,
    "naive": Naive,
    "rq": RQ,
    "rq-simple": RQSimple,
    "dramatiq": Dramatiq,
    "celery": Celery,
    "arq": Arq,
}
PEERS = ("rq", "rq-simple", "dramatiq", "celery", "arq")
