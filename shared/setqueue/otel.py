"""OpenTelemetry glue (extra ``setqueue[otel]``), imported only through ``setqueue.tracing`` when
installed: the worker's ``receive``, ``process`` and ``settle`` spans (docs/reference.md#traces-opentelemetry)."""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from setqueue.jobs import AckResult, JobTimeout, Lease, MoveTo, RetryLater
from setqueue.version import __version__

SYSTEM = "setqueue"
# Span contexts kept between a job's spans, oldest dropped first: a job never acked keeps none forever.
KEPT_CONTEXTS = 100_000

_PROPAGATOR = TraceContextTextMapPropagator()
_NO_SDK = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)  # the API's own: no span recorded
SDK_CHECK_SECONDS = 1.0


def is_async(function: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = getattr(function, "__call__", None)  # noqa: B004 - a callable object's async __call__ counts
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "success"
    if isinstance(error, JobTimeout):
        return "timeout"
    if isinstance(error, RetryLater):
        return "retry"
    if isinstance(error, MoveTo):
        return "moved"
    return "failure"


class _Kept:
    """Span contexts by (job id, lease token), bounded; shared by the worker's threads."""

    def __init__(self, most: int = KEPT_CONTEXTS) -> None:
        self._most = most
        self._lock = threading.Lock()
        self._contexts: collections.OrderedDict[tuple[str, str], SpanContext] = collections.OrderedDict()

    def put(self, lease: Lease, context: SpanContext) -> None:
        with self._lock:
            self._contexts[(lease.id, lease.token)] = context
            while len(self._contexts) > self._most:
                self._contexts.popitem(last=False)

    def pop(self, lease: Lease) -> SpanContext | None:
        with self._lock:
            return self._contexts.pop((lease.id, lease.token), None)


class WorkerTracing:
    """The worker's spans: ``claiming`` and ``acking`` wrap the queue's calls, ``wrap`` the handler."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("setqueue", __version__, tracer_provider=tracer_provider)
        self._sdk = tracer_provider is not None  # once true, for good
        self._check_at = 0.0  # monotonic time of the next SDK look-up
        self._claims = _Kept()  # a claimed job -> its claim's span
        self._jobs = _Kept()  # a job that succeeded -> its own span, until its ack

    def recording(self) -> bool:
        """Whether spans go anywhere (a provider given, or an SDK configured). Without, even no-op spans cost
        about a tenth of a no-op job's CPU, so calls run bare; the SDK look-up (reading the environment) is
        repeated every SDK_CHECK_SECONDS."""
        if self._sdk:
            return True
        now = time.monotonic()
        if now >= self._check_at:
            self._sdk = not isinstance(trace.get_tracer_provider(), _NO_SDK)
            self._check_at = now + SDK_CHECK_SECONDS
        return self._sdk

    def claiming(self, claim: Callable[..., list[Lease]], queue: str) -> Callable[..., list[Lease]]:

        @functools.wraps(claim)
        def traced(count: int = 1, **options: Any) -> list[Lease]:
            if not self.recording():
                return claim(count, **options)
            attributes = {**_base(queue, "receive"), "messaging.batch.message_count": 0}
            with self.tracer.start_as_current_span(
                f"receive {queue}", kind=SpanKind.CLIENT, attributes=attributes
            ) as span:
                leases = claim(count, **options)
                span.set_attribute("messaging.batch.message_count", len(leases))
                context = span.get_span_context()
            for lease in leases:
                self._claims.put(lease, context)
            return leases

        return traced

    def acking(self, ack_many: Callable[..., list[AckResult]], queue: str) -> Callable[..., list[AckResult]]:

        @functools.wraps(ack_many)
        def traced(leases: Sequence[Lease], **options: Any) -> list[AckResult]:
            if not self.recording():
                return ack_many(leases, **options)
            links = [Link(c) for c in (self._jobs.pop(lease) for lease in leases) if c is not None]
            attributes = {**_base(queue, "settle"), "messaging.batch.message_count": len(leases)}
            with self.tracer.start_as_current_span(
                f"settle {queue}", kind=SpanKind.CLIENT, attributes=attributes, links=links
            ) as span:
                results = ack_many(leases, **options)
                span.set_attribute("setqueue.acked", sum(1 for r in results if r.acked))
                return results

        return traced

    def wrap(self, handler: Callable[[Lease], Any]) -> Callable[[Lease], Any]:
        """The handler, each run in a ``process`` span (an ``async def`` stays one)."""
        if is_async(handler):

            async def traced_async(lease: Lease) -> Any:
                if not self.recording():
                    return await handler(lease)
                with self._job_span(lease) as span:
                    try:
                        result = await handler(lease)
                    except BaseException as exc:
                        self._ended(span, lease, exc)
                        raise
                    self._ended(span, lease, None)
                    return result

            return traced_async

        def traced(lease: Lease) -> Any:
            if not self.recording():
                return handler(lease)
            with self._job_span(lease) as span:
                try:
                    result = handler(lease)
                except BaseException as exc:
                    self._ended(span, lease, exc)
                    raise
                self._ended(span, lease, None)
                return result

        return traced

    def _job_span(self, lease: Lease) -> Any:
        parent = _PROPAGATOR.extract({"traceparent": lease.trace_parent}) if lease.trace_parent else None
        claim = self._claims.pop(lease)
        attributes = {
            **_base(lease.queue, "process"),
            "messaging.message.id": lease.id,
            "setqueue.job.attempt": lease.attempt,
            "setqueue.job.priority": lease.priority,
        }
        return self.tracer.start_as_current_span(
            f"process {lease.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=[Link(claim)] if claim is not None else None,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _ended(self, span: trace.Span, lease: Lease, error: BaseException | None) -> None:
        outcome = _outcome(error)
        span.set_attribute("setqueue.job.outcome", outcome)
        if outcome == "success":
            self._jobs.put(lease, span.get_span_context())
        elif outcome in ("failure", "timeout"):
            assert error is not None
            span.set_attribute("error.type", type(error).__qualname__)
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)[:200]))


def _base(queue: str, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
    }
