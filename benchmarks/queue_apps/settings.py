"""Django settings for redis_components' worker in the benchmark (BENCH_REDIS_URL)."""

from __future__ import annotations

import os

SECRET_KEY = "benchmark-only"
USE_TZ = True
INSTALLED_APPS = ["redis_components", "benchmarks.queue_apps"]  # its tasks.py is autodiscovered
DATABASES: dict[str, dict[str, str]] = {}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "unix:///nonexistent.sock"),
    }
}
if os.environ.get("BENCH_CLUSTER"):  # BENCH_REDIS_URL names a node of a Redis Cluster
    CACHES["default"]["OPTIONS"] = {"CLIENT_CLASS": "redis_components.connection.ClusterClient"}

REDIS_COMPONENTS: dict[str, object] = {}
# The cost of metrics: the workers keep the totals and histograms that rc/metrics/ reports.
if os.environ.get("BENCH_METRICS"):
    REDIS_COMPONENTS["METRICS"] = True
# The cost of idle schedulers: N schedules every minute, of a task on a queue no worker
# of the benchmark serves, so that only scheduling is measured, not running the tasks.
# One queue cut into partitions (benchmarks/cluster_queues.py --partitions).
if os.environ.get("BENCH_PARTITIONS"):
    REDIS_COMPONENTS["QUEUE_PARTITIONS"] = {"bench-a": int(os.environ["BENCH_PARTITIONS"])}
REDIS_COMPONENTS["TASK_SCHEDULES"] = {
    f"s{i}": {"task": "bench.scheduled", "cron": "* * * * *"}
    for i in range(int(os.environ.get("BENCH_SCHEDULES", "0")))
}
# The cost of tracing (benchmarks/tracing.py): spans on, through OpenTelemetry's SDK and
# a batch processor whose exporter drops them (what a project's would cost, but the
# export itself); BENCH_TRACING is the fraction of traces sampled (1: all), or "api":
# OpenTelemetry's API alone, no SDK (every span a no-op: what the package's own code costs).
if os.environ.get("BENCH_TRACING") == "api":
    REDIS_COMPONENTS["TRACING"] = True
elif os.environ.get("BENCH_TRACING"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class _Dropped(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    _provider = TracerProvider(
        sampler=ParentBased(TraceIdRatioBased(float(os.environ["BENCH_TRACING"])))
    )
    _provider.add_span_processor(BatchSpanProcessor(_Dropped()))
    trace.set_tracer_provider(_provider)
    REDIS_COMPONENTS["TRACING"] = True
