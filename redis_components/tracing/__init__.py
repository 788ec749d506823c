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

import collections
import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.core.signals import setting_changed

from ..conf import conf
from ..tasks.messages import TRACE_KEY

logger = logging.getLogger("redis_components.tracing")

if TYPE_CHECKING:
    from ..tasks.jobs import Job
    from ..tasks.messages import PlannedStep, TaskMessage
    from ..tasks.store import Outcome

MODES = ("link", "parent", "root")
CARRIER = TRACE_KEY  # the metadata key of the creation context
FAILED = "failed"  # the carrier's key of the last failed attempt's context (ours)
# Ours in the carrier: the context of the last attempt that ended leaving a next (or that
# a fan-in waits for), and whether it failed; the lost attempt linked last (see _before);
# a fan-in step's parents, by task id; and a step that a fan-in waits for.
ENDED, LOST, AFTER, JOINED = "ended", "lost", "after", "joined"
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


def recording() -> bool:
    """Whether spans are made: tracing is on, and the project set a tracer provider (an
    SDK's). With OpenTelemetry's API alone every span would be a no-op: then nothing is
    started, carried or kept."""
    if mode() is None:
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


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
    from ..tasks.store import partitions

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
    """The ``send`` span of one enqueue (or the ``create`` span of a schedule's tick),
    started before its message is encoded (so that the message carries its context) and
    ended when its script has answered."""

    def __init__(self, message: TaskMessage, *, schedule: str = "", tick: int = 0) -> None:
        from opentelemetry import context, propagate, trace

        operation, links, extra = "send", [], {}
        if schedule:  # a root, linked to its schedule
            operation = "create"
            links = [trace.Link(schedule_context(schedule), {"redis_components.link": "schedule"})]
            extra = {
                "redis_components.schedule.name": schedule,
                "redis_components.schedule.tick": tick,
            }
        self.span = _tracer().start_span(
            f"{operation} {message.queue}",
            context=context.Context() if schedule else None,
            kind=trace.SpanKind.PRODUCER,
            links=links,
            attributes={**_attributes(operation, message), **extra},
        )
        self.carrier: dict[str, str] = {}
        propagate.inject(self.carrier, context=trace.set_span_in_context(self.span))

    @contextlib.contextmanager
    def sent(self) -> Iterator[None]:
        """Around the enqueue's script: the span is current, and ends with it (with the
        error, if it raised); an error of tracing's own is logged, never raised: the
        task is enqueued by then."""
        from opentelemetry import context, trace

        token = context.attach(trace.set_span_in_context(self.span))
        try:
            yield
        except BaseException as error:
            self.ended(error)
            raise
        else:
            self.ended()
        finally:
            context.detach(token)

    def ended(self, error: BaseException | None = None, *, sent: bool = True) -> None:
        """End the span after its script: ``error`` if it raised, or not ``sent`` (a
        tick another scheduler claimed first). Tracing's errors are logged, never raised."""
        from opentelemetry import trace

        try:
            if error is not None:
                self.span.record_exception(error)
                self.span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
            elif not sent:
                self.span.add_event("claimed by another scheduler")
            self.span.end()
        except Exception:
            logger.exception("A span of an enqueue is incomplete: tracing failed")


def schedule_context(name: str) -> Any:
    """The span context that stands for schedule ``name``, which each of its ticks links
    to: the same in every process, made from the name (no span has it; a tracing
    backend finds the ticks by it, or by ``redis_components.schedule.name``)."""
    from opentelemetry import trace

    digest = hashlib.sha256(f"redis_components schedule {name}".encode()).digest()
    return trace.SpanContext(
        trace_id=int.from_bytes(digest[:16], "big"),
        span_id=int.from_bytes(digest[16:24], "big"),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


def ticked(message: TaskMessage, schedule: str, tick: int) -> tuple[TaskMessage, Sending | None]:
    """A schedule's tick's message with the context of its ``create`` span (a root,
    linked to :func:`schedule_context`), and the span, to end when the claim answers
    (:meth:`Sending.ended`); ``message`` and ``None`` when tracing is off."""
    if not recording():
        return message, None
    try:
        creating = Sending(message, schedule=schedule, tick=tick)
    except Exception:
        logger.exception("No span for tick %d of schedule %s: tracing failed", tick, schedule)
        return message, None
    metadata = {**(message.metadata or {}), CARRIER: creating.carrier}
    return dataclasses.replace(message, metadata=metadata), creating


def carried(
    metadata: dict[str, Any], message: TaskMessage, *, step: bool
) -> tuple[dict[str, Any], Sending | None]:
    """A message's metadata with its creation context, and the ``send`` span it was
    made in (``None`` for a workflow's ``step``, which carries the context current
    here: the workflow is sent by one script, which writes them all); ``metadata`` and
    ``None`` when tracing is off."""
    if not recording():
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
    if not sending.carrier:  # (no SDK: the span is a no-op, with no context to carry)
        return metadata, None
    return {**metadata, CARRIER: sending.carrier}, sending


class Processing:
    """The ``process`` span of one attempt, current while the task runs (the task's own
    spans are its children), ended with what its outcome says."""

    def __init__(self, job: Job) -> None:
        from opentelemetry import context, propagate, trace

        message = job.message
        raw = job.result.metadata.get(CARRIER)
        found: dict[str, Any] = raw if isinstance(raw, dict) else {}
        # (What a task wrote there itself is not for the propagators: only strings.)
        carrier = {k: v for k, v in found.items() if isinstance(v, str)}
        created = propagate.extract(carrier) if carrier else context.Context()
        links = []
        how = mode()
        creation = trace.get_current_span(created).get_span_context()
        if how == "link" and creation.is_valid:
            links.append(trace.Link(creation, {"redis_components.link": "creation"}))
        self.job = job
        # Keep this attempt's context for the next: see _Keeper, and _ended. Not with
        # "root", nor for a task enqueued without tracing (whose metadata says nothing of
        # it, and is not changed), nor in a carrier that the task spoiled.
        self.keep = how != "root" and isinstance(raw, dict)
        if self.keep:
            before = self._before(found, job.kept_trace)
            if before is not None:
                links.append(trace.Link(before[1], {"redis_components.link": before[0]}))
        after = found.get(AFTER) if self.keep else None
        self.after = [i for i in after if isinstance(i, str)] if isinstance(after, list) else []
        self.joined = found.get(JOINED) is True  # a fan-in waits for it
        attributes = _attributes("process", message)
        attributes["redis_components.task.attempt"] = attempt_number(message)
        attributes["messaging.client.id"] = job.worker_id
        waited = job.waited_ms  # (from when it was due: its delay, its tick)
        if waited is not None:
            attributes["redis_components.task.queue_wait_ms"] = waited
        self.span = _tracer().start_span(
            f"process {message.queue}",
            context=created if how == "parent" else context.Context(),
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes=attributes,
        )
        self.started, self.done = time.monotonic(), False
        self._ending = threading.Lock()  # (the worker may end it at a hard time limit)
        self.closed = False  # its span has ended
        if self.keep:
            try:
                _keeper().add(self)
            except Exception:  # (no thread: then no lost attempt is linked to this one)
                logger.exception("Task %s: its context cannot be kept", message.id)
        self._token = context.attach(trace.set_span_in_context(self.span))
        job.traced = self

    def _before(self, found: dict[str, Any], kept: str) -> tuple[str, Any] | None:
        """Why and to what this attempt links for the attempt before it: one that was
        lost (its context kept, and no attempt since said it ended), or one that failed."""
        ended = found.get(ENDED)
        if kept and kept not in (ended, found.get(LOST)):
            lost = _context_of(kept)
            if lost is not None:
                found[LOST] = kept  # (linked once; saved with this attempt's outcome)
                return "lost attempt", lost
        failed = found.get(FAILED)
        if failed is not None and failed == ended:
            context = _context_of(failed)
            return None if context is None else ("failed attempt", context)
        return None

    def link_parents(self) -> None:
        """A fan-in's step (``after``: the steps it waited for): a link to each one's last
        attempt, read in one round trip. Tracing's errors are logged, never raised."""
        try:
            for parent in _last_attempts(self.after):
                self.span.add_link(parent, {"redis_components.link": "parent step"})
        except Exception:
            logger.exception(
                "Task %s has no links to its parents: tracing failed", self.job.message.id
            )

    def ended(self, outcome: Outcome, error: BaseException | None) -> None:
        """Record how the attempt ended; one that leaves a next (a retry, a deferral, a
        dead letter: requeued, it runs again) or that a fan-in waits for says so in the
        carrier, saved with the outcome; a dead letter adds its ``settle`` span.
        Tracing's own errors are logged, never raised: the outcome stands."""
        self.done = True
        with self._ending:
            if self.closed:  # (the worker settled it at its limit, and ended its span)
                return
            try:
                self._ended(outcome, error)
            except Exception:
                logger.exception(
                    "Task %s's span is incomplete: tracing failed", self.job.message.id
                )

    def abandoned(self, outcome: Outcome, why: str) -> None:
        """The worker settled the attempt (``why``: "time limit", or "terminated" by a
        cancel) and left its code to itself: the span ends now, as the outcome is
        recorded, not when the abandoned code ends, and says so in the carrier (the next
        attempt links to it as failed, not lost). Never raises."""
        self.done = True
        with self._ending:
            if self.closed:
                return
            self.closed = True
            try:
                self.span.add_event("abandoned", {"redis_components.abandoned.reason": why})
                self._ended(outcome, None, why)
                self.span.end()
            except Exception:
                logger.exception(
                    "Task %s's span is incomplete: tracing failed", self.job.message.id
                )

    def _ended(self, outcome: Outcome, error: BaseException | None, why: str = "") -> None:
        from opentelemetry import trace

        span = self.span
        if error is not None:
            span.record_exception(error)
        if outcome.kind in ("retry", "bury"):
            what = why or (type(error).__name__ if error is not None else "its return value")
            span.set_status(trace.Status(trace.StatusCode.ERROR, what))
        carrier = self.job.result.metadata.get(CARRIER)
        if self.keep and isinstance(carrier, dict) and outcome.kind != "cancel":
            if outcome.kind != "ok" or self.joined:
                carrier[ENDED] = _traceparent(span)
            if outcome.kind in ("retry", "bury"):
                carrier[FAILED] = carrier[ENDED]
        if outcome.kind == "retry":
            span.add_event("retry", {"redis_components.retry.delay_ms": outcome.delay_ms})
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
        """The span ends with the attempt, unless the worker ended it first (an attempt
        it abandoned at its hard time limit: see :meth:`abandoned`)."""
        from opentelemetry import context

        self.done = True
        try:
            context.detach(self._token)
            with self._ending:
                if self.closed:  # (ended by the worker at its limit: see abandoned)
                    return
                self.closed = True
                if error is not None:
                    self.span.record_exception(error)
                self.span.end()
        except Exception:  # (the task ran: its outcome stands, whatever the SDK does)
            logger.exception("Task %s's span is incomplete: tracing failed", self.job.message.id)


# How long an attempt runs before its context is kept (written to its result), so that
# the attempt after it can link to it if it is lost: no write for one that ends sooner.
KEEP_AFTER = 0.05


class _Keeper:
    """Keeps the context of each attempt still running ``KEEP_AFTER`` seconds after it
    started, in its task's result (the ``trace`` field; fenced, as a metadata save is),
    from a thread of its own: one round trip per batch, none for an attempt that ended
    sooner, and nothing on the task's own path but an append."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._pending: collections.deque[Processing] = collections.deque()
        self._wake = threading.Event()
        threading.Thread(target=self._run, name="rc-trace-keeper", daemon=True).start()

    def add(self, attempt: Processing) -> None:
        self._pending.append(attempt)
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while True:
            try:
                self._pass()
            except Exception:  # (the thread must live on, or the deque only grows)
                logger.exception("Keeping the attempts' trace contexts failed")
                self._pending.clear()

    def _pass(self) -> None:
        """Wait for an attempt, then write those still running once due, until none is
        pending: a pass every KEEP_AFTER at most (waking for each attempt costs more)."""
        self._wake.wait()
        self._wake.clear()
        while self._pending:
            first = self._pending[0].started + KEEP_AFTER
            time.sleep(max(KEEP_AFTER / 2, first - time.monotonic()))
            due = []
            now = time.monotonic()
            while self._pending and self._pending[0].started + KEEP_AFTER <= now:
                attempt = self._pending.popleft()
                if not attempt.done:
                    due.append(attempt)
            if due:
                self._write(due)

    @staticmethod
    def _write(due: list[Processing]) -> None:
        from ..tasks.store import TaskStore

        kept = [(a.job.message.id, a.job.attempt_key, _traceparent(a.span)) for a in due]
        try:
            TaskStore().keep_traces(kept)
        except Exception:  # (Redis away: those attempts have no link if they are lost)
            logger.warning(
                "The trace contexts of %d running attempts are not kept", len(kept), exc_info=True
            )


_keepers: dict[int, _Keeper] = {}
_starting = threading.Lock()


def _forked() -> None:
    """In a forked child: the parent's keeper thread did not come along (nor, maybe, a
    free lock)."""
    global _starting
    _keepers.clear()
    _starting = threading.Lock()


os.register_at_fork(after_in_child=_forked)


def _keeper() -> _Keeper:
    """This process's keeper (a forked worker starts its own)."""
    found = _keepers.get(os.getpid())
    if found is None:
        with _starting:
            found = _keepers.get(os.getpid())
            if found is None:
                _keepers.clear()  # (a parent's, whose thread did not survive the fork)
                found = _keepers[os.getpid()] = _Keeper()
    return found


def _last_attempts(task_ids: list[str]) -> list[Any]:
    """The span contexts of these tasks' last attempts (as each said it ended, else as
    it was kept while it ran), in one round trip: none for a task that has neither."""
    from ..tasks.results import read_records

    found = []
    for record in read_records(task_ids):
        if record is None:
            continue
        carrier = record.metadata.get(CARRIER)
        ended = carrier.get(ENDED) if isinstance(carrier, dict) else None
        context = _context_of(ended or record.trace)
        if context is not None:
            found.append(context)
    return found


def fan_ins(steps: list[PlannedStep]) -> None:
    """Each step of a planned workflow that waits for several steps (a fan-in; not for
    a barrier, whose steps it waits for are the barrier's): its carrier names them (the
    first ``TRACING_MAX_LINKS``), so that its attempt links to each, and theirs say so,
    so that each one's last attempt says it ended. Nothing when tracing is off."""
    if not recording():
        return
    try:
        _fan_ins(steps, int(conf.get("TRACING_MAX_LINKS")))
    except Exception:  # (tracing's errors never stop an enqueue)
        logger.exception("A workflow's fan-ins have no links: tracing failed")


def _fan_ins(steps: list[PlannedStep], most: int) -> None:
    for step in steps:
        if len(step.parents) > 1 and max(step.parents) <= len(steps):
            parents = [steps[number - 1] for number in step.parents[:most]]
            step.message = _carrying(step.message, AFTER, [p.message.id for p in parents])
            for parent in parents:
                parent.message = _carrying(parent.message, JOINED, True)


def _carrying(message: TaskMessage, key: str, value: object) -> TaskMessage:
    """``message`` with ``key`` in its metadata's carrier (as it is, without a carrier)."""
    carrier = (message.metadata or {}).get(CARRIER)
    if not isinstance(carrier, dict):
        return message
    metadata = {**(message.metadata or {}), CARRIER: {**carrier, key: value}}
    return dataclasses.replace(message, metadata=metadata)


def _context_of(traceparent: object) -> Any:
    """The span context a W3C ``traceparent`` names (``None`` if it names none)."""
    from opentelemetry import propagate, trace

    if not isinstance(traceparent, str):
        return None
    found = trace.get_current_span(propagate.extract({"traceparent": traceparent}))
    context = found.get_span_context()
    return context if context.is_valid else None


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
    if not recording():
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
    from ..tasks.registry import current_task

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
