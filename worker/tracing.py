"""The worker's traces: ``setqueue.otel``'s spans when OpenTelemetry is installed, else nothing at all
(not even an import), so that a worker without the extra ``setqueue[otel]`` runs exactly as before."""

from __future__ import annotations

from typing import TYPE_CHECKING

from setqueue.tracing import otel_installed

if TYPE_CHECKING:  # pragma: no cover - for the type checker only
    from setqueue.otel import WorkerTracing


def worker_tracing() -> WorkerTracing | None:
    """The worker's tracing glue, or None when OpenTelemetry is not installed. Installed but with no
    SDK configured, OpenTelemetry's own no-op tracer runs."""
    if not otel_installed():
        return None
    from setqueue.otel import WorkerTracing  # noqa: PLC0415 - loaded only when installed

    return WorkerTracing()
