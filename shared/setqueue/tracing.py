"""Traces that follow a job from the code that enqueued it to the worker that ran it: the side of
it that costs nothing when OpenTelemetry is absent. This module imports no part of OpenTelemetry;
the glue (the extra ``setqueue[otel]``) is ``setqueue.otel_context`` (the producer's side) and
``setqueue.otel`` (the worker's spans, which ``worker.tracing`` loads only when it is installed).

``current_trace_parent()`` is what ``enqueue`` stores with its jobs: the W3C ``traceparent`` of the
span the caller is in, kept as the third part of the job's options (``setqueue.jobs.job_options``)
until the job is acked. An application that never imported ``opentelemetry.trace`` can be in no
span: then it is None at the price of one dictionary look-up, and nothing is imported.
"""

from __future__ import annotations

import importlib.util
import re
import sys

_TRACE_PARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def current_trace_parent() -> str | None:
    """The ``traceparent`` of the caller's current span, or None (no valid span, or no OpenTelemetry)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from setqueue.otel_context import trace_parent  # noqa: PLC0415 - the glue, only once the app traces

    return trace_parent()


def trace_id(trace_parent: str | None) -> str | None:
    """The trace id (32 hex digits) of a ``traceparent``, or None when it is not one."""
    match = _TRACE_PARENT.fullmatch(trace_parent or "")
    return match[1] if match else None


def otel_installed() -> bool:
    """Whether the OpenTelemetry API can be imported (the ``setqueue[otel]`` extra)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no opentelemetry package at all
        return False
