"""OpenTelemetry's SDK for the tracing tests: a tracer provider that keeps finished
spans in memory (this process), or writes them as JSON lines to the file named by
``RC_TEST_SPANS`` (a worker process the test started: tests/settings.py installs it),
and a meter provider whose metrics a reader keeps in memory. The package itself never
configures an SDK: a project does, as these do."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
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


# A fresh Python's first lines, for run_django(..., otel_absent=True): OpenTelemetry
# cannot be imported there (as where the extra is not installed), and each try of it is
# kept in ``tried``.
ABSENT = """\
import sys
tried = []
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'opentelemetry':
            tried.append(name)
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Absent())
"""


def run_django(code: str, components: dict[str, Any], *, otel_absent: bool = False) -> str:
    """Run ``code`` in a fresh Python with Django set up on tests.settings, this
    ``REDIS_COMPONENTS`` and no SDK of OpenTelemetry configured; its output, once it
    exited 0. With ``otel_absent``, OpenTelemetry cannot be imported, and the output ends
    with the list of the imports of it that were tried after Django's setup (redis-py
    tries once, at its own import: not counted)."""
    setup = "import django; django.setup()\n"
    if otel_absent:
        code = ABSENT + setup + "tried.clear()\n" + code + "print(tried)\n"
    else:
        code = setup + code
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env.pop("RC_TEST_SPANS", None)
    env["RC_TEST_REDIS_COMPONENTS"] = json.dumps(components)
    ran = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def read_file(path: Path) -> list[dict[str, Any]]:
    """The spans a worker process wrote (as ``ReadableSpan.to_json`` has them)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]
