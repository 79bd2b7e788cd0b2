"""Traces that follow a job (setqueue[otel], in-memory exporter): the enqueue's span and the job's
share one trace, claim and ack spans link to it; without OpenTelemetry nothing of it is loaded."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from setqueue import Lease, Queue, open_queue
from setqueue.jobs import job_options, parse_job_options, parse_trace_parent
from setqueue.runtime.settings import WorkerSettings
from setqueue.tracing import current_trace_parent, trace_id
from tests.support.otel import sdk_spans
from tests.support.procs import base_env
from tests.support.redis_server import REPO_ROOT
from tests.support.waits import wait_until, wait_until_leases_expire
from worker.service import WorkerService


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans this test ends (the SDK's provider is set once per process)."""
    exporter = sdk_spans()
    exporter.clear()
    yield exporter
    exporter.clear()


def run_worker(redis_url: str, queue_name: str, handler: Any, until: Any, **settings: Any) -> WorkerService:
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, IDLE_WAIT_SECONDS=0.05, **settings)
    service = WorkerService(WorkerSettings.from_env(env), handler=handler)
    assert service.tracing is not None, "OpenTelemetry (the dev extra) is installed"
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(service.run()))
    thread.start()
    try:
        wait_until(until, 30, "the jobs to finish")
    finally:
        service.request_stop()
        thread.join(30)
        service.close()
    assert codes == [0]
    return service


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_the_job_span_continues_the_trace_of_the_enqueue(
    spans: InMemorySpanExporter, redis_url: str, queue_name: str
) -> None:
    queue = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0, max_attempts=1)
    tracer = trace.get_tracer("web-app")
    with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER) as web:
        queue.enqueue({"order-1": {"total": 12}, "order-2": {"total": 30}}, max_attempts=3)
        parent = current_trace_parent()
    queue.enqueue(["untraced"])
    web_context = web.get_span_context()
    flags = int(web_context.trace_flags)
    assert parent == f"00-{web_context.trace_id:032x}-{web_context.span_id:016x}-{flags:02x}"
    info = queue.inspect("order-1")
    assert info is not None and info.trace_parent == parent and info.max_attempts == 3
    assert trace_id(info.trace_parent) == f"{web_context.trace_id:032x}"
    assert queue.inspect("untraced").trace_parent is None  # type: ignore[union-attr]

    seen: dict[str, str | None] = {}

    def handler(lease: Lease) -> None:
        seen[lease.id] = lease.trace_parent
        with trace.get_tracer("handler").start_as_current_span("charge card"):
            if lease.id == "order-2":
                raise ValueError("card declined")

    run_worker(redis_url, queue_name, handler, lambda: queue.stats()["done"] + queue.stats()["failed"] == 3)
    assert seen["order-1"] == parent and seen["untraced"] is None

    process = {s.attributes["messaging.message.id"]: s for s in named(spans, f"process {queue_name}")}  # type: ignore[index]
    assert set(process) == {"order-1", "order-2", "untraced"}
    job = process["order-1"]
    assert job.context.trace_id == web_context.trace_id, "the job's span is not in the enqueue's trace"
    assert job.parent is not None and job.parent.span_id == web_context.span_id
    assert job.kind is SpanKind.CONSUMER
    assert (
        dict(job.attributes or {}).items()
        >= {
            "messaging.system": "setqueue",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue_name,
            "messaging.message.id": "order-1",
            "setqueue.job.attempt": 1,
            "setqueue.job.outcome": "success",
        }.items()
    )
    failed = process["order-2"]
    assert failed.context.trace_id == web_context.trace_id
    assert failed.attributes["setqueue.job.outcome"] == "failure"  # type: ignore[index]
    assert failed.attributes["error.type"] == "ValueError"  # type: ignore[index]
    assert failed.status.status_code is trace.StatusCode.ERROR
    assert process["untraced"].context.trace_id != web_context.trace_id
    charges = [s for s in named(spans, "charge card") if s.context.trace_id == web_context.trace_id]
    assert job.context.span_id in {c.parent.span_id for c in charges if c.parent}
    assert len(charges) == 4  # order-1 once, order-2 three times (its own max_attempts)

    # The claim (receive) and ack (settle) spans link to the job's span.
    receives = named(spans, f"receive {queue_name}")
    assert receives and all(s.kind is SpanKind.CLIENT for s in receives)
    claimed = {link.context.span_id for link in job.links}
    assert claimed & {s.context.span_id for s in receives}, "the job's span has no link to its claim"
    settles = named(spans, f"settle {queue_name}")
    linked = {link.context.span_id for s in settles for link in s.links}
    assert job.context.span_id in linked, "no ack span links to the job's span"
    assert failed.context.span_id not in linked  # a failed job is not acked
    settle = next(s for s in settles if job.context.span_id in {link.context.span_id for link in s.links})
    assert settle.attributes["messaging.operation.type"] == "settle"  # type: ignore[index]
    assert settle.attributes["messaging.batch.message_count"] >= 1  # type: ignore[index, operator]


def test_a_sharded_queue_keeps_the_trace_too(spans: InMemorySpanExporter, redis_url: str, queue_name: str) -> None:
    queue = open_queue(redis_url, queue_name, shards=3)
    with trace.get_tracer("producer").start_as_current_span("batch") as span:
        queue.enqueue([f"x{i}" for i in range(9)])
    leases = queue.claim(9)
    assert len(leases) == 9
    expected = f"{span.get_span_context().trace_id:032x}"
    assert {trace_id(lease.trace_parent) for lease in leases} == {expected}


def test_the_options_string_keeps_its_numbers_with_a_trace_parent() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert job_options(None, None, parent) == f"||{parent}"
    assert job_options(4, 2.5, parent) == f"4|2500|{parent}"
    assert parse_job_options(f"4|2500|{parent}") == (4, 2.5)
    assert parse_job_options(f"||{parent}") == (None, None)
    assert parse_job_options("4|2500") == (4, 2.5)
    assert parse_trace_parent(f"4|2500|{parent}") == parent
    assert parse_trace_parent("4|2500") is None and parse_trace_parent(None) is None
    assert trace_id(parent) == "0af7651916cd43dd8448eb211c80319c" and trace_id("nonsense") is None


def test_a_job_traced_with_its_own_max_attempts_is_dead_lettered_on_time(
    spans: InMemorySpanExporter, redis_url: str, queue_name: str
) -> None:
    """fail.lua reads only the options' leading number: a traceparent after it changes nothing."""
    queue = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0, max_attempts=5)
    with trace.get_tracer("producer").start_as_current_span("enqueue"):
        queue.enqueue(["twice"], max_attempts=2)
    for _ in range(2):
        (lease,) = queue.claim(1)
        queue.fail(lease, "no")
    assert queue.inspect("twice").state == "failed"  # type: ignore[union-attr]


def test_a_traced_job_keeps_its_own_timeout_and_the_sweep_its_max_attempts(
    spans: InMemorySpanExporter, redis_url: str, queue_name: str
) -> None:
    """A traceparent after the options changes neither the worker's timeout nor sweep.lua's max attempts."""
    queue = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0, max_attempts=5)
    with trace.get_tracer("producer").start_as_current_span("enqueue"):
        queue.enqueue(["spin-1"], max_attempts=1, timeout=0.3)
        parent = current_trace_parent()
    seen: list[Lease] = []

    def handler(lease: Lease) -> None:
        seen.append(lease)
        while True:  # Python code: the worker's JobTimeout lands here
            sum(range(1000))

    run_worker(redis_url, queue_name, handler, lambda: queue.stats()["failed"] == 1, JOB_TIMEOUT_SECONDS=60)
    assert [(lease.timeout, lease.max_attempts, lease.trace_parent) for lease in seen] == [(0.3, 1, parent)]
    info = queue.inspect("spin-1")
    assert info is not None and info.state == "failed" and "its own timeout (0.3s)" in (info.error or "")
    (span,) = named(spans, f"process {queue_name}")
    assert span.attributes["setqueue.job.outcome"] == "timeout"  # type: ignore[index]

    short = Queue.from_url(redis_url, f"{queue_name}-swept", lease_seconds=0.2, max_attempts=5)
    with trace.get_tracer("producer").start_as_current_span("enqueue"):
        short.enqueue(["lost-1"], max_attempts=1)
    (lease,) = short.claim(1)
    assert lease.trace_parent is not None and lease.max_attempts == 1
    wait_until_leases_expire(short, [lease])  # never renewed
    assert short.sweep().dead_lettered == ["lost-1"]


def _loaded(code: str) -> list[str]:
    """The OpenTelemetry modules and setqueue's glue that ``code`` loads in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(repr(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    ).stdout
    return [m for m in eval(out) if m.startswith(("opentelemetry", "setqueue.otel"))]


# As without OpenTelemetry: a None in sys.modules blocks its import.
WITHOUT_OTEL = "sys.modules['opentelemetry'] = None"


def test_without_opentelemetry_the_library_and_the_worker_load_none_of_it(redis_url: str, queue_name: str) -> None:
    code = (
        f"{WITHOUT_OTEL}; from setqueue import Queue; q = Queue.from_url({redis_url!r}, {queue_name!r});"
        "q.enqueue(['a']); (lease,) = q.claim(1); assert lease.trace_parent is None; q.ack(lease);"
        "from worker.tracing import worker_tracing; assert worker_tracing() is None;"
        "from worker.service import WorkerService; from setqueue.runtime.settings import WorkerSettings;"
        f"s = WorkerSettings.from_env({{'REDIS_URL': {redis_url!r}, 'QUEUE_NAME': {queue_name!r}, "
        "'JOB_HANDLER': 'setqueue.runtime.demo:simulated_work', 'METRICS_PORT': '0'});"
        "w = WorkerService(s); assert w.tracing is None and w._claim == w.queue.claim; w.close()"
    )
    assert _loaded(code) == ["opentelemetry"]  # only the None that blocks it


def test_with_opentelemetry_installed_setqueue_adds_only_its_small_glue(redis_url: str, queue_name: str) -> None:
    """redis-py 8 imports OpenTelemetry itself when installed; enqueue adds only setqueue.otel_context."""
    before = set(_loaded("import redis"))
    code = f"from setqueue import Queue; q = Queue.from_url({redis_url!r}, {queue_name!r}); q.enqueue(['a'])"
    assert set(_loaded(code)) - before <= {"setqueue.otel_context"}


def test_with_the_api_alone_no_span_is_made_until_an_sdk_is_configured() -> None:
    """Without an SDK every span is a no-op costing a tenth of a no-op job: the worker's calls run bare."""
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from setqueue import Lease
from setqueue.otel import WorkerTracing
tracing = WorkerTracing()
calls = []
handler = tracing.wrap(lambda lease: calls.append(lease.id) or 42)
claim = tracing.claiming(lambda count, **o: [], "q")
lease = Lease(id="j1", token="t", attempt=1, payload=None, enqueued_at=None, claimed_at=0.0, queue="q")
assert not tracing.recording() and handler(lease) == 42 and claim(1) == []
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
import time
until = time.monotonic() + 5  # it looks for an SDK again each SDK_CHECK_SECONDS
while not tracing.recording() and time.monotonic() < until:
    time.sleep(0.05)
assert tracing.recording() and handler(lease) == 42 and calls == ["j1", "j1"]
assert [s.name for s in exporter.get_finished_spans()] == ["process q"]
"""
    run = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
