"""OpenTelemetry's messaging metrics of tasks, as its conventions name them
(open-telemetry/semantic-conventions, ``docs/messaging/messaging-metrics.md``), with
the ``OTEL_METRICS`` setting on, through the metrics API (the project sets a meter
provider and its exporter, as for any library):

- ``messaging.client.sent.messages`` (counter): each enqueue, its queue's;
- ``messaging.client.operation.duration`` (histogram, seconds): each enqueue's script;
- ``messaging.client.consumed.messages`` (counter): each task a worker takes;
- ``messaging.process.duration`` (histogram, seconds): each attempt's run;

and one of ours, since the conventions name none: ``redis_components.task.queue_wait``
(histogram, seconds), each first attempt's wait in its queue from when it was due.

Each carries ``messaging.system``, ``messaging.operation.name`` and ``.type`` and
``messaging.destination.name`` (the queue), and ``error.type`` (the exception's class)
for an enqueue that raised or an attempt that failed. Off (the default), nothing of
OpenTelemetry is imported, and each hook costs one check of a cached setting.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.core.signals import setting_changed

from ..conf import conf

logger = logging.getLogger("redis_components.tracing")
SYSTEM = "redis_components"  # messaging.system, as the spans say it
# The conventions' advice for a messaging duration histogram's buckets (seconds).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
# A wait in a queue is longer than a run when workers fall behind.
WAIT_BUCKETS = (*BUCKETS, 30, 60, 300, 900, 3600)


@functools.cache
def on() -> bool:
    """Whether the metrics are recorded (the ``OTEL_METRICS`` setting)."""
    return conf.get("OTEL_METRICS") is True


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "REDIS_COMPONENTS":
        on.cache_clear()


setting_changed.connect(_forget)


@functools.cache
def _instruments() -> tuple[Any, Any, Any, Any, Any]:
    from opentelemetry import metrics

    version = importlib.metadata.version("django-redis-components")
    meter = metrics.get_meter("redis_components", version)
    return (
        meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        ),
        meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of messaging operation initiated by a producer or "
            "consumer client.",
            explicit_bucket_boundaries_advisory=BUCKETS,
        ),
        meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        ),
        meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=BUCKETS,
        ),
        meter.create_histogram(
            "redis_components.task.queue_wait",
            unit="s",
            description="How long a task waited in its queue to start, from when it was due.",
            explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
        ),
    )


@functools.lru_cache(maxsize=4096)
def _attributes(operation: str, queue: str) -> dict[str, str]:
    """(Made once per queue: each record reads them, none changes them.)"""
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "messaging.destination.name": queue,
    }


def _with_error(attributes: dict[str, str], error: BaseException | None) -> dict[str, str]:
    if error is None:
        return attributes
    kind = type(error)
    return {**attributes, "error.type": f"{kind.__module__}.{kind.__qualname__}"}


@contextlib.contextmanager
def _sending(queue: str, count: int) -> Iterator[None]:
    attributes = _attributes("send", queue)
    started = time.perf_counter()
    try:
        yield
    except BaseException as error:
        attributes = _with_error(attributes, error)
        raise
    finally:
        _quietly(_record_send, time.perf_counter() - started, attributes, count)


def _record_send(seconds: float, attributes: dict[str, str], count: int) -> None:
    sent, duration, *_ = _instruments()
    duration.record(seconds, attributes)
    sent.add(count, attributes)


def _quietly(record: Callable[..., None], *args: Any) -> None:
    """Record; an error of the SDK's is logged, never raised (the task is enqueued, or
    has run, by then)."""
    try:
        record(*args)
    except Exception:
        logger.exception("A metric of tasks is not recorded: OpenTelemetry failed")


def sending(queue: str, count: int = 1) -> contextlib.AbstractContextManager[None]:
    """Around an enqueue's script (or ``enqueue_many``'s calls, for ``count`` tasks of
    ``queue``): the messages sent, and how long the operation took."""
    return _sending(queue, count) if on() else contextlib.nullcontext()


def consumed(queue: str, waited_ms: int | None = None) -> None:
    """A worker took a task of ``queue``, a first attempt that waited ``waited_ms``."""
    if on():
        _quietly(_record_consumed, _attributes("process", queue), waited_ms)


def _record_consumed(attributes: dict[str, str], waited_ms: int | None) -> None:
    _, _, taken, _, waits = _instruments()
    taken.add(1, attributes)
    if waited_ms is not None:
        waits.record(waited_ms / 1000, attributes)


def processed(queue: str, seconds: float, error: BaseException | None) -> None:
    """An attempt of a task of ``queue`` ran ``seconds``, and raised ``error`` (or not)."""
    if on():
        attributes = _with_error(_attributes("process", queue), error)
        _quietly(lambda: _instruments()[3].record(seconds, attributes))
