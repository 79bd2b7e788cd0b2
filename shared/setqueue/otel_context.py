"""The producer's side of the OpenTelemetry glue (extra ``setqueue[otel]``): the ``traceparent`` of
the current span, which ``enqueue`` stores with its jobs. Imported by ``setqueue.tracing`` only once
the application has imported ``opentelemetry.trace`` itself."""

from __future__ import annotations

from opentelemetry import trace


def trace_parent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when there is no valid one."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
