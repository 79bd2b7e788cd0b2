"""Job handlers (JOB_HANDLER=tests.support.jobs:handle, or :handle_async) logging their runs. The id
says what the job does:

    sleep-<seconds>-<n>   waits that long (time.sleep, or asyncio.sleep in the async handler)
    spin-<n>              never returns, in Python code (a JobTimeout raised in it lands)
    stuck-<n>             never returns, in C code (time.sleep: a JobTimeout never lands)
    fail-<n>              raises ValueError (always from the same line)
    gate-<n>              waits until the file $GATE exists (the test opens the gate)
    value-<n>             returns {"id": <id>, "pid": <pid>} (a result to keep)
    big-<bytes>-<n>       returns a string of that many x
    odd-<n>               returns an object that is neither bytes nor JSON
    progress-<n>          reports progress 0.5 "halfway", then waits 30 s
    permanent-<n>         raises PermanentJobError
    json-<n>              returns lease.json(), its payload read as JSON
    loads-<n>             returns json.loads(lease.payload): the handler reads the JSON itself
    reply-<n>             reads a reply that is not JSON (an upstream's error page, not its payload)
    anything else         returns at once

Each run appends ``start|end|cancelled <id> <pid> <time>`` lines to $EXEC_LOG (an O_APPEND write of
a line is atomic).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from setqueue import JobCancelled, PermanentJobError


def _log(event: str, job_id: str) -> None:
    line = f"{event} {job_id} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ["EXEC_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def handle(lease: Any) -> Any:
    _log("start", lease.id)
    kind = lease.id.split("-")[0]
    try:
        if kind == "sleep":
            time.sleep(float(lease.id.split("-")[1]))
        elif kind == "spin":
            while True:
                sum(range(1000))
        elif kind == "stuck":
            time.sleep(3600)
        elif kind == "fail":
            raise ValueError(f"job {lease.id} fails, as its name says")
        elif kind == "gate":
            while not os.path.exists(os.environ["GATE"]):
                time.sleep(0.02)
        elif kind == "progress":
            lease.progress(0.5, "halfway")
            for _ in range(3000):
                time.sleep(0.01)
        elif kind == "permanent":
            raise PermanentJobError(f"job {lease.id} can never succeed")
    except JobCancelled:
        _log("cancelled", lease.id)
        raise
    value = _returned(lease)
    _log("end", lease.id)
    return value


def _returned(lease: Any) -> Any:
    kind = lease.id.split("-")[0]
    if kind in ("json", "loads", "reply"):
        return _decoded(lease, kind)
    if kind == "value":
        return {"id": lease.id, "pid": os.getpid()}
    if kind == "big":
        return "x" * int(lease.id.split("-")[1])
    if kind == "odd":
        return object()
    return None


def _decoded(lease: Any, kind: str) -> Any:
    if kind == "json":
        return lease.json()
    return json.loads(lease.payload if kind == "loads" else "<html>502 Bad Gateway</html>")


async def handle_async(lease: Any) -> Any:
    _log("start", lease.id)
    kind = lease.id.split("-")[0]
    try:
        if kind == "sleep":
            await asyncio.sleep(float(lease.id.split("-")[1]))
        elif kind in ("spin", "stuck"):
            await asyncio.sleep(3600)
        elif kind == "gate":
            while not os.path.exists(os.environ["GATE"]):
                await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        _log("cancelled", lease.id)
        raise
    value = _returned(lease)
    _log("end", lease.id)
    return value


class ExecutionLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[tuple[str, str, int, float]]:
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            event, job_id, pid, at = line.split(" ")
            rows.append((event, job_id, int(pid), float(at)))
        return rows

    def starts(self) -> Counter[str]:
        return Counter(job_id for event, job_id, _, _ in self.events() if event == "start")

    def ends(self) -> Counter[str]:
        return Counter(job_id for event, job_id, _, _ in self.events() if event == "end")

    def most_at_once(self) -> int:
        running = best = 0
        for event, *_ in sorted(self.events(), key=lambda row: (row[3], row[0] == "start")):
            running += 1 if event == "start" else -1
            best = max(best, running)
        return best

    def pids(self, job_id: str) -> set[int]:
        return {pid for event, i, pid, _ in self.events() if i == job_id and event == "start"}
