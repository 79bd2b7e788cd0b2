"""The producer's OpenTelemetry glue, imported by ``setqueue.tracing`` once the app imported ``opentelemetry.trace``."""

from __future__ import annotations

from opentelemetry import trace


def trace_parent() -> str | None:
    """The current span's W3C ``traceparent``, or None."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
