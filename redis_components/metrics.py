"""Prometheus metrics, served by :func:`metrics_view` when the ``METRICS`` setting is on.

::

    # settings.py
    REDIS_COMPONENTS = {"METRICS": True, "METRICS_TOKEN": "a long random string"}
    # urls.py: path("rc/", include("redis_components.urls")) serves rc/metrics/

Task metrics come from Redis, so any web process reports the whole task system: queue
depths by state and how long each queue's oldest ready task has waited (gauges), tasks
processed, failed and retried (counters, kept by the workers in the script they run for
each task anyway), task durations (a histogram), the workers alive and their thread
slots, and the tasks set aside on their rate or concurrency limits (a counter per queue
and kind of limit). Lock and semaphore metrics are counted in each process, at no cost
in Redis: under several processes (gunicorn), use prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``) so a scrape sums them. Needs the ``[metrics]`` extra
(``prometheus-client``).
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Iterator
from typing import Any

import redis
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext
from django.views.decorators.http import require_GET
from redis.exceptions import RedisClusterException

from .conf import conf

logger = logging.getLogger(__name__)

LOCK_EVENTS = {
    "lock_waits": "Lock acquisitions that had to wait for a holder",
    "lock_grants": "Locks granted",
    "lock_refusals": "Lock acquisitions refused (busy, or the wait ran out)",
    "semaphore_grants": "Semaphore permits granted",
    "semaphore_refusals": "Semaphore acquisitions refused (every permit taken)",
}


# This process's counters of lock and semaphore events, made at the first count: empty
# when they cannot be (prometheus-client missing), so counting costs nothing then.
_counters: dict[str, Any] | None = None
_making = threading.Lock()
_failed = False  # a count raised: logged once


def _local() -> dict[str, Any]:
    """This process's counters (prometheus-client's), made once; ``{}`` without it."""
    global _counters
    with _making:  # two threads would register the same counters twice
        if _counters is None:
            try:
                from prometheus_client import Counter
            except ImportError:
                logger.error(
                    "METRICS is on but prometheus-client is not installed (the [metrics] "
                    "extra): lock and semaphore events are not counted"
                )
                _counters = {}
            else:
                _counters = {
                    name: Counter(f"redis_components_{name}", help_text)
                    for name, help_text in LOCK_EVENTS.items()
                }
        return _counters


def count(event: str) -> None:
    """Count a lock or semaphore event in this process (nothing unless METRICS is on).

    Never raises: it runs while a lock or permit is granted, and a metric must not fail
    what it counts. A failure is logged (once per process) and the event is not counted.
    """
    global _failed
    if not conf.METRICS:
        return
    try:
        counter = (_counters if _counters is not None else _local()).get(event)
        if counter is not None:
            counter.inc()
    except Exception:
        if not _failed:
            _failed = True
            logger.exception("Counting %s failed; lock and semaphore events may be missing", event)


class TaskCollector:
    """Reads the task system's state from Redis at each scrape (a few round trips)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        from .tasks.status import queue_stats, workers
        from .tasks.store import DURATION_BUCKETS, TaskStore

        store = TaskStore()
        depth = GaugeMetricFamily(
            "redis_components_queue_tasks",
            "Tasks in each queue, by state",
            labels=["queue", "state"],
        )
        stats = queue_stats()
        for queue in stats:
            for state in STATES:
                depth.add_metric([queue.name, state], getattr(queue, state))
        yield depth
        registered = workers()
        yield from _health(stats, registered)
        _forget_idle_queues(store, stats, registered)
        counts, sums = _totals(store)
        added = CounterMetricFamily(
            "redis_components_tasks_added",
            "Tasks enqueued: by enqueue, a schedule's tick, or a workflow (each of its "
            "steps, when it is made)",
            labels=["queue"],
        )
        for queue in stats:
            added.add_metric([queue.name], sums.get((queue.name, "added"), 0))
        yield added
        bounds = [f"{bound:g}" for bound in DURATION_BUCKETS] + ["+Inf"]
        kinds = ("processed", "failed", "retried")
        for kind, help_text in zip(
            kinds,
            (
                "Tasks that ran to their end",
                "Tasks dead-lettered after their last failed attempt",
                "Failed attempts followed by a retry",
            ),
            strict=True,
        ):
            counter = CounterMetricFamily(
                f"redis_components_tasks_{kind}", help_text, labels=["queue"]
            )
            for queue in stats:
                total = sum(counts.get((queue.name, kind, bound), 0) for bound in bounds)
                counter.add_metric([queue.name], total)
            yield counter
        limited = CounterMetricFamily(
            "redis_components_tasks_limited",
            "Tasks a worker set aside because a limit did not let them start (they wait)",
            labels=["queue", "limit"],
        )
        for queue in stats:
            for limit in ("concurrency", "rate"):
                limited.add_metric(
                    [queue.name, limit], counts.get((queue.name, "limited", limit), 0)
                )
        yield limited
        histogram = HistogramMetricFamily(
            "redis_components_task_duration_seconds",
            "How long task attempts ran",
            labels=["queue"],
        )
        for queue in stats:
            cumulative, buckets = 0.0, []
            for bound in bounds:
                cumulative += sum(counts.get((queue.name, kind, bound), 0) for kind in kinds)
                buckets.append((bound, cumulative))
            seconds = sums.get((queue.name, "us"), 0) / 1_000_000
            histogram.add_metric([queue.name], buckets, seconds)
        yield histogram
        yield _waits(stats, counts, sums)


def _waits(stats: list[Any], counts: dict[Any, float], sums: dict[Any, float]) -> Any:
    """The histogram of first attempts' waits in their queues, from when each was due to
    its start (schedule-to-start), counted as each attempt's outcome is recorded."""
    from prometheus_client.core import HistogramMetricFamily

    from .tasks.store import WAIT_BUCKETS

    waits = HistogramMetricFamily(
        "redis_components_task_queue_wait_seconds",
        "How long tasks waited in their queues to start, from when each was due (its "
        "enqueue, its delay's end, its schedule's tick) to its first attempt",
        labels=["queue"],
    )
    for queue in stats:
        cumulative, buckets = 0.0, []
        for bound in [f"{bound:g}" for bound in WAIT_BUCKETS] + ["+Inf"]:
            cumulative += counts.get((queue.name, "wait", bound), 0)
            buckets.append((bound, cumulative))
        waits.add_metric([queue.name], buckets, sums.get((queue.name, "wait_ms"), 0) / 1000)
    return waits


STATES = ("ready", "delayed", "on_limits", "in_progress", "dead")


def _health(stats: list[Any], registered: list[Any]) -> Iterator[Any]:
    """The gauges of whether the workers keep up: the oldest ready task's wait per queue
    (no sample where none is ready), the workers alive and their thread slots."""
    from prometheus_client.core import GaugeMetricFamily

    from .tasks.status import oldest_ready

    oldest = GaugeMetricFamily(
        "redis_components_task_oldest_ready_age_seconds",
        "How long the oldest ready task of each queue has waited to start (no sample: "
        "none is ready)",
        labels=["queue"],
    )
    for name, age in oldest_ready([queue.name for queue in stats]).items():
        if age is not None:
            oldest.add_metric([name], age)
    yield oldest
    live = [worker for worker in registered if worker.lease_left >= 0]
    alive = GaugeMetricFamily("redis_components_workers", "Workers whose lease is alive")
    alive.add_metric([], len(live))
    yield alive
    slots = GaugeMetricFamily(
        "redis_components_worker_slots",
        "Thread slots of the workers whose lease is alive (rc_worker --threads; the "
        "in_progress depth is what they run)",
    )
    slots.add_metric([], sum(worker.threads for worker in live))
    yield slots


def _forget_idle_queues(store: Any, stats: list[Any], registered: list[Any]) -> None:
    """Queue names are remembered when a worker serves them; the empty ones that no
    worker serves, no task declares and no setting limits are forgotten (if they
    finished no task lately), so the set, and each scrape, does not grow forever."""
    from .tasks.backend import queues_in_use

    kept = queues_in_use() | set(conf.TASK_QUEUE_LIMITS)
    kept.update(name for worker in registered for name in worker.queues)
    store.forget_queues(
        [
            queue.name
            for queue in stats
            if not any(getattr(queue, state) for state in STATES) and queue.name not in kept
        ]
    )


# The running totals kept once per queue: each queue's total µs of attempts, tasks
# added, and ms its first attempts waited ("<queue>:us", ":added", ":wait_ms").
SUMS = ("us", "added", "wait_ms")


def _totals(store: Any) -> tuple[dict[tuple[str, str, str], float], dict[tuple[str, str], float]]:
    """The metrics' running totals: the count of each ``(queue, kind, bucket)`` (the
    fields "<queue>:<kind>:<bucket>": an outcome and its duration's bucket, "limited"
    and a limit, "wait" and a wait's bucket), and each ``(queue, sum)`` of ``SUMS``."""
    counts: dict[tuple[str, str, str], float] = {}
    sums: dict[tuple[str, str], float] = {}
    for name, number in store.totals().items():
        queue_name, _, last = name.rpartition(":")
        if last in SUMS:
            sums[queue_name, last] = number
        elif name.count(":") >= 2:
            queue_name, kind, bound = name.rsplit(":", 2)
            counts[queue_name, kind, bound] = number
    return counts, sums


def _authorized(request: HttpRequest, token: str) -> bool:
    """Whether the request sends ``Authorization: Bearer <token>`` (the scheme in any case).

    Headers reach Django decoded as Latin-1, so the bytes sent are compared with the
    token's UTF-8 bytes: a token that is not ASCII matches too. An empty token matches
    nothing (the system checks flag it).
    """
    scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
    sent = sent.strip()
    if scheme.lower() != "bearer" or not sent or not token:
        return False
    try:
        sent_bytes = sent.encode("latin-1")
    except UnicodeEncodeError:  # not from a server (which gives Latin-1), so not the token
        return False
    return hmac.compare_digest(sent_bytes, token.encode())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format; 404 unless METRICS is on, 401 without the token, 503
    while Redis cannot be reached."""
    if not conf.METRICS:
        off = gettext("Metrics are off (REDIS_COMPONENTS['METRICS']).")
        return JsonResponse({"error": off}, status=404)
    token = conf.METRICS_TOKEN
    if token is not None and not _authorized(request, token):
        return JsonResponse({"error": gettext("A valid Bearer token is required.")}, status=401)
    try:
        from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
    except ImportError:
        missing = gettext("prometheus-client is not installed (the [metrics] extra).")
        return JsonResponse({"error": missing}, status=503)
    tasks = CollectorRegistry(auto_describe=False)
    tasks.register(TaskCollector())
    _local()
    try:
        body = generate_latest(tasks) + generate_latest(REGISTRY)
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as error:
        logger.warning("Metrics scrape: Redis cannot be reached (%s)", error)
        unreachable = gettext("Redis cannot be reached: %(error)s") % {"error": error}
        return JsonResponse({"error": unreachable}, status=503)
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
