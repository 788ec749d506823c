"""Tracing tasks with OpenTelemetry (the ``otel`` extra), as its messaging conventions
name spans and attributes (open-telemetry/semantic-conventions,
``docs/messaging/messaging-spans.md``): a PRODUCER span ``send <queue>`` around an
enqueue's script, a CONSUMER span ``process <queue>`` around each attempt, and a
``settle <queue>`` span when an attempt dead-letters its task.

Off unless the ``TRACING`` setting turns it on: then, and only then, this module
imports ``opentelemetry`` (its API: the project configures an SDK and exporters, or
everything is a no-op). The creation context travels in the task's metadata, under
``"trace"`` (the propagators' carrier: ``traceparent``...), never in its arguments; each
attempt's span is linked to it (``TRACING`` ``"link"``, the default), its child
(``"parent"``), or neither (``"root"``). A retry's attempt links to the attempt that
failed too (its context is saved with the retry, under ``"trace"``'s ``"failed"``).

:class:`TaskContextFilter` (and :func:`task_context`, for structlog) gives every log
line written while a task runs its task's id, attempt, queue and trace id.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import logging
from typing import TYPE_CHECKING, Any

from django.core.signals import setting_changed

from .conf import conf
from .tasks.messages import TRACE_KEY

logger = logging.getLogger("redis_components.tracing")

if TYPE_CHECKING:
    from .tasks.jobs import Job
    from .tasks.messages import TaskMessage
    from .tasks.store import Outcome

MODES = ("link", "parent", "root")
CARRIER = TRACE_KEY  # the metadata key of the creation context
FAILED = "failed"  # the carrier's key of the last failed attempt's context (ours)
SYSTEM = "redis_components"  # messaging.system


@functools.cache
def mode() -> str | None:
    """How an attempt's span relates to its task's creation (:data:`MODES`), or ``None``
    when tracing is off (the ``TRACING`` setting: ``False``, ``True`` for ``"link"``,
    or a mode)."""
    value = conf.get("TRACING")
    if value is True:
        return "link"
    return value if value in MODES else None


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "REDIS_COMPONENTS":
        mode.cache_clear()


setting_changed.connect(_forget)


@functools.cache
def _tracer() -> Any:
    from opentelemetry import trace

    version = importlib.metadata.version("django-redis-components")
    return trace.get_tracer("redis_components", version)


def _attributes(operation: str, message: TaskMessage) -> dict[str, Any]:
    from .tasks.store import partitions

    found: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "messaging.destination.name": message.queue,
        "redis_components.task.name": message.task,
    }
    if message.id:
        found["messaging.message.id"] = message.id
    if len(message.id) == 36 and partitions(message.queue) > 1:
        found["messaging.destination.partition.id"] = message.id[:4]
    if message.flow is not None:
        found["messaging.message.conversation_id"] = message.flow.workflow
    return found


class Sending:
    """The ``send`` span of one enqueue, started before its message is encoded (so that
    the message carries its context) and ended when its script has answered."""

    def __init__(self, message: TaskMessage) -> None:
        from opentelemetry import propagate, trace

        self.span = _tracer().start_span(
            f"send {message.queue}",
            kind=trace.SpanKind.PRODUCER,
            attributes=_attributes("send", message),
        )
        self.carrier: dict[str, str] = {}
        propagate.inject(self.carrier, context=trace.set_span_in_context(self.span))

    def sent(self) -> contextlib.AbstractContextManager[Any]:
        """Around the enqueue's script: the span ends with it, an error if it raised."""
        from opentelemetry import trace

        return trace.use_span(self.span, end_on_exit=True)


def carried(
    metadata: dict[str, Any], message: TaskMessage, *, step: bool
) -> tuple[dict[str, Any], Sending | None]:
    """A message's metadata with its creation context, and the ``send`` span it was
    made in (``None`` for a workflow's ``step``, which carries the context current
    here: the workflow is sent by one script, which writes them all); ``metadata`` and
    ``None`` when tracing is off."""
    if mode() is None:
        return metadata, None
    try:
        if step:
            from opentelemetry import propagate

            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            return {**metadata, CARRIER: carrier}, None
        sending = Sending(message)
    except Exception:  # (a propagator's or an SDK's error must not stop the enqueue)
        logger.exception("No span for an enqueue of task %s: tracing failed", message.task)
        return metadata, None
    return {**metadata, CARRIER: sending.carrier}, sending


class Processing:
    """The ``process`` span of one attempt, current while the task runs (the task's own
    spans are its children), ended with what its outcome says."""

    def __init__(self, job: Job) -> None:
        from opentelemetry import context, propagate, trace

        message = job.message
        found = job.result.metadata.get(CARRIER)
        # (What a task wrote there itself is not for the propagators: only strings.)
        carrier = {k: v for k, v in found.items() if isinstance(v, str)} if found else {}
        created = propagate.extract(carrier) if carrier else context.Context()
        links = []
        how = mode()
        creation = trace.get_current_span(created).get_span_context()
        if how == "link" and creation.is_valid:
            links.append(trace.Link(creation, {"redis_components.link": "creation"}))
        failed = carrier.get(FAILED)
        if isinstance(failed, str) and how != "root":
            before = trace.get_current_span(
                propagate.extract({"traceparent": failed})
            ).get_span_context()
            if before.is_valid:
                links.append(trace.Link(before, {"redis_components.link": "failed attempt"}))
        attributes = _attributes("process", message)
        attributes["redis_components.task.attempt"] = attempt_number(message)
        attributes["messaging.client.id"] = job.worker_id
        if message.enqueued_at is not None and message.first_attempt:  # (its queue wait)
            attributes["redis_components.task.queue_wait_ms"] = max(
                0, job.taken_ms - message.enqueued_at
            )
        self.job = job
        self.span = _tracer().start_span(
            f"process {message.queue}",
            context=created if how == "parent" else context.Context(),
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        self._token = context.attach(trace.set_span_in_context(self.span))

    def ended(self, outcome: Outcome, error: BaseException | None) -> None:
        """Record how the attempt ended; a retry saves this span's context for the next
        attempt's link, a dead letter adds its ``settle`` span. Tracing's own errors are
        logged, never raised: the outcome stands."""
        try:
            self._ended(outcome, error)
        except Exception:
            logger.exception("Task %s's span is incomplete: tracing failed", self.job.message.id)

    def _ended(self, outcome: Outcome, error: BaseException | None) -> None:
        from opentelemetry import trace

        span = self.span
        if error is not None:
            span.record_exception(error)
        if outcome.kind in ("retry", "bury"):
            what = type(error).__name__ if error is not None else "its return value"
            span.set_status(trace.Status(trace.StatusCode.ERROR, what))
        if outcome.kind == "retry":
            span.add_event("retry", {"redis_components.retry.delay_ms": outcome.delay_ms})
            carrier = self.job.result.metadata.setdefault(CARRIER, {})
            if isinstance(carrier, dict):
                carrier[FAILED] = _traceparent(span)
        elif outcome.kind == "defer":
            span.add_event("deferred", {"redis_components.defer.delay_ms": outcome.delay_ms})
        elif outcome.kind == "bury":
            queue = self.job.message.queue
            attributes = _attributes("settle", self.job.message)
            attributes["redis_components.dead_letter.reason"] = _reason(outcome)
            _tracer().start_span(
                f"settle {queue}", kind=trace.SpanKind.INTERNAL, attributes=attributes
            ).end()

    def __enter__(self) -> Processing:
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        """The span ends with the attempt; one abandoned (its end is not the worker's to
        report) records why."""
        from opentelemetry import context

        if error is not None:
            self.span.record_exception(error)
        context.detach(self._token)
        self.span.end()


def _traceparent(span: Any) -> str:
    found = span.get_span_context()
    return f"00-{found.trace_id:032x}-{found.span_id:016x}-{found.trace_flags:02x}"


def _reason(outcome: Outcome) -> str:
    try:
        entry = json.loads(outcome.dead_entry)
    except ValueError:
        return ""
    return str(entry.get("reason", "")) if isinstance(entry, dict) else ""


def processing(job: Job) -> contextlib.AbstractContextManager[Processing | None]:
    """The ``process`` span of an attempt (a context manager giving the
    :class:`Processing`), or one giving ``None`` when tracing is off."""
    if mode() is None:
        return _OFF
    try:
        return Processing(job)
    except Exception:  # (tracing's errors never stop a task: it runs without a span)
        logger.exception(
            "No span for task %s[%s]: tracing failed", job.message.task, job.message.id
        )
        return _OFF


_OFF = contextlib.nullcontext()


def attempt_number(message: TaskMessage) -> int:
    """A run's number among its task's runs, for spans and logs: 1, then one more for
    each retry and each crash (whether or not its ``max_attempts`` counts crashes)."""
    return message.retries + message.crashes + 1


def creation_trace(metadata: dict[str, Any]) -> tuple[str, str]:
    """The trace id a task was created in (from its metadata's W3C ``traceparent``: ""
    for none), and its URL by the ``TRACING_LINK`` pattern ("" without one)."""
    carrier = metadata.get(CARRIER)
    parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
    parts = parent.split("-") if isinstance(parent, str) else []
    if len(parts) != 4 or len(parts[1]) != 32 or not all(c in HEX for c in parts[1]):
        return "", ""
    pattern = conf.get("TRACING_LINK")
    url = pattern.replace("{trace_id}", parts[1]) if isinstance(pattern, str) else ""
    return parts[1], url


HEX = frozenset("0123456789abcdef")


def task_context() -> dict[str, Any]:
    """The running task's ``task_id``, ``task_attempt`` (1 for its first run, then one
    more for each retry and crash), ``task_queue`` and, with tracing on, ``trace_id``
    (its attempt's, 32 hex digits): empty strings (0 for the attempt) outside a task."""
    from .tasks.registry import current_task

    running = current_task()
    if running is None:
        return {"task_id": "", "task_attempt": 0, "task_queue": "", "trace_id": ""}
    message = running.message
    trace_id = ""
    if mode() is not None:
        from opentelemetry import trace

        found = trace.get_current_span().get_span_context()
        trace_id = f"{found.trace_id:032x}" if found.is_valid else ""
    return {
        "task_id": message.id,
        "task_attempt": attempt_number(message),
        "task_queue": message.queue,
        "trace_id": trace_id,
    }


class TaskContextFilter(logging.Filter):
    """A logging filter that sets :func:`task_context`'s fields on each record, for a
    formatter to show (``%(task_id)s``...): add it to a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in task_context().items():
            setattr(record, name, value)
        return True
