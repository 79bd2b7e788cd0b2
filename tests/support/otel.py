"""OpenTelemetry's SDK, set up once per process (the API allows one provider), to an in-memory exporter."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
_added: list[TracerProvider] = []


def sdk_spans() -> InMemorySpanExporter:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if provider not in _added:
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        _added.append(provider)
    return EXPORTER
