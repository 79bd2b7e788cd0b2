"""Traces from enqueue to the worker, at no cost without OpenTelemetry: this module imports none of
it (the glue is ``setqueue.otel_context`` and ``setqueue.otel``). An app that never imported
``opentelemetry.trace`` is in no span: ``current_trace_parent()`` then costs one dict look-up."""

from __future__ import annotations

import importlib.util
import re
import sys

_TRACE_PARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def current_trace_parent() -> str | None:
    """The caller's span's ``traceparent``, or None."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from setqueue.otel_context import trace_parent  # noqa: PLC0415 - the glue, only once the app traces

    return trace_parent()


def trace_id(trace_parent: str | None) -> str | None:
    """The trace id of a ``traceparent``, or None when it is not one."""
    match = _TRACE_PARENT.fullmatch(trace_parent or "")
    return match[1] if match else None


def otel_installed() -> bool:
    """Whether the OpenTelemetry API can be imported."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:  # no opentelemetry package at all
        return False
