"""OpenTelemetry's SDK for the tracing tests: a tracer provider that keeps finished
spans in memory (this process), or writes them as JSON lines to the file named by
``RC_TEST_SPANS`` (a worker process the test started: tests/settings.py installs it),
and a meter provider whose metrics a reader keeps in memory. The package itself never
configures an SDK: a project does, as these do."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class FileExporter(SpanExporter):
    """Each finished span as a line of JSON, appended to ``path`` (forked workers too)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as file:
            for span in spans:
                file.write(json.dumps(json.loads(span.to_json())) + "\n")
        return SpanExportResult.SUCCESS


# Above the SDK's default of 128 links a span, as a project that wants a fan-in of 200
# linked to each member sets it (with TRACING_MAX_LINKS).
LIMITS = SpanLimits(max_links=256)


def export_to_file(path: str) -> None:
    provider = TracerProvider(span_limits=LIMITS)
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)


@functools.cache
def in_memory() -> InMemorySpanExporter:
    """The exporter of this process's spans (its provider is set once, for the session)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=LIMITS)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@functools.cache
def metrics_reader() -> InMemoryMetricReader:
    """The reader of this process's metrics (its meter provider is set once)."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def read_file(path: Path) -> list[dict[str, Any]]:
    """The spans a worker process wrote (as ``ReadableSpan.to_json`` has them)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]
