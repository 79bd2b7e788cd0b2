"""The worker's traces: ``setqueue.otel``'s spans when OpenTelemetry is installed, else not even an import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from setqueue.tracing import otel_installed

if TYPE_CHECKING:  # pragma: no cover - for the type checker only
    from setqueue.otel import WorkerTracing


def worker_tracing() -> WorkerTracing | None:
    """None without OpenTelemetry; installed with no SDK configured, its no-op tracer runs."""
    if not otel_installed():
        return None
    from setqueue.otel import WorkerTracing  # noqa: PLC0415 - loaded only when installed

    return WorkerTracing()
