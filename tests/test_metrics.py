"""The worker's batch histograms export exactly what prometheus_client's Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from setqueue.runtime.metrics import PROCESSING_BUCKETS, BatchHistogram

VALUES = [0.0, 0.0005, 0.001, 0.003, 0.01, 0.3, 1.0, 59.0, 300.0, 4000.0]


def exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_batch_histogram_exports_like_prometheus_client() -> None:
    reference, ours = CollectorRegistry(), CollectorRegistry()
    histogram = Histogram("x_seconds", "Doc.", buckets=PROCESSING_BUCKETS, registry=reference)
    batch = BatchHistogram("x_seconds", "Doc.", PROCESSING_BUCKETS, ours)
    for value in VALUES:
        histogram.observe(value)
    batch.observe_many(VALUES[:4])
    batch.observe_many(iter(VALUES[4:-1]))  # any iterable, in several batches
    batch.observe(VALUES[-1])
    assert exposition(ours) == exposition(reference)
    assert ours.get_sample_value("x_seconds_count") == len(VALUES)
    assert ours.get_sample_value("x_seconds_bucket", {"le": "0.001"}) == 3  # le is inclusive
