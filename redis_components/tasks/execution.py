"""Executing a task: a taken payload in, the :class:`~redis_components.tasks.store.Outcome`
that the next fetch records out.

The worker's loop decodes the payload and finds the :class:`Job` that runs it
(:func:`prepare`); its slot makes the call (``slots.execute``) through :func:`run_job`
(:func:`arun_job` on the event loop), which says how the run ended: done, deferred,
retried after the backoff, or dead-lettered. :func:`over_time` records a task settled
at its hard time limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from .. import tracing
from ..conf import conf
from ..exceptions import (
    TaskArgumentsMismatch,
    TaskError,
    TaskNotRegistered,
    TimeLimitExceeded,
    WorkerCrashed,
)
from ..tracing import meters
from .jobs import BadBackoff, Job, job_for
from .messages import MalformedTask, TaskMessage, task_id_of
from .registry import Retry, running, stop_running
from .results import TaskStatus, describe, error_json
from .store import Delivery, LogLine, Outcome, TaskStore, dead_entry

logger = logging.getLogger("redis_components.worker")
# The line of a task dead-lettered for failing (testing.drain listens for it).
DEAD_LETTERED = "Task %s[%s] failed in %.1f ms (%s); dead-lettered after %d retries"


class Abandoned(BaseException):
    """Raised out of a run whose end is not the task's to report: a worker's slot gave
    up on it (settled at its hard limit, or terminated) or its event loop closes."""


def prepare(delivery: Delivery, worker_id: str) -> Job | Outcome:
    """The job that runs ``delivery``, or the dead letter of a payload that is not a task
    or names one this worker does not know, or whose workflow input is no longer kept."""
    try:
        message = TaskMessage.decode(delivery.payload)
    except MalformedTask as error:
        logger.error(
            "Dead-lettered a payload in queue %r that is not a task: %s", delivery.queue, error
        )
        return bury(delivery, task_id_of(delivery.payload), "undecodable", str(error))
    complete = with_input(message)
    if complete is None:  # (its workflow was cancelled and has expired since)
        assert message.flow is not None
        reason = f"the input its workflow {message.flow.workflow} gave it is no longer kept"
        logger.error("Dead-lettered task %s[%s]: %s", message.task, message.id, reason)
        return bury(delivery, message.id, "no input", reason)
    job = job_for(complete, worker_id, delivery.attempt)
    if isinstance(job, str):
        return unknown(delivery, message, job)
    if job.attempt > job.max_attempts:
        return spent(delivery, job)
    meters.consumed(message.queue, job.waited_ms)
    return job


def unknown(delivery: Delivery, message: TaskMessage, why: str) -> Outcome:
    """A task this worker cannot run (``why``): put back, no retry charged, until
    ``TASK_UNREGISTERED_GRACE`` after its enqueue, for a worker that knows it (a rolling
    deploy's new code); dead-lettered as :class:`TaskNotRegistered` after that."""
    enqueued_ms = message.enqueued_at
    if enqueued_ms is None:  # a deferred run, a requeued dead letter: its result says
        [record] = TaskStore().task_records([message.id])
        enqueued = record and record.enqueued_at
        enqueued_ms = round(enqueued.timestamp() * 1000) if enqueued else None
    grace_ms = round(conf.TASK_UNREGISTERED_GRACE * 1000)
    waited_ms = delivery.attempt - enqueued_ms if enqueued_ms is not None else grace_ms
    if waited_ms < grace_ms:
        # Looked at again soon after the enqueue (a deploy's workers restart within
        # seconds), then less often: a task no worker knows costs a few takes a minute.
        delay_ms = min(max(waited_ms, 500), 30_000, grace_ms - waited_ms)
        return Outcome(
            delivery=delivery,
            task_id=message.id,
            kind="defer",
            again=delivery.payload,
            delay_ms=delay_ms,
            said=LogLine(
                logger.warning,
                "Task %s[%s] is not registered here; put back for %.3g s for a worker that "
                "knows it (dead-lettered %.0f s after its enqueue): %s",
                *(message.task, message.id, delay_ms / 1000, grace_ms / 1000, why),
            ),
        )
    logger.error("Dead-lettered task %s[%s]: %s", message.task, message.id, why)
    return bury(delivery, message.id, "unknown task", why, TaskNotRegistered(why))


def run_job(
    job: Job,
    delivery: Delivery,
    *,
    call: Callable[[Job], Any],
    propagate: tuple[type[BaseException], ...] = (),
) -> Outcome:
    """Run a prepared job by ``call(job)`` (``Job.call`` at the least), between Django's
    closing of old database connections, as around a request, and say how it ended.
    Whatever it raises is how the task ended (any ``BaseException``), never an error of
    the worker, except :class:`Abandoned` and ``propagate``, which propagate."""
    close_old_connections()
    running_task, token = running(job.message)
    started = time.perf_counter()
    passed_on: tuple[type[BaseException], ...] = (Abandoned, *propagate)
    error: BaseException | None = None
    with tracing.processing(job) as traced:
        try:
            if traced is not None and traced.after:
                traced.link_parents()
            value = call(job)
        except passed_on:
            raise
        except BaseException as raised:  # a task's sys.exit() ends the task, not us
            error, outcome = raised, failure(delivery, job, raised, since(started))
        else:
            outcome = success(delivery, job, value, running_task.deferred_for, since(started))
        finally:
            stop_running(token)
            close_old_connections()
        if traced is not None:
            traced.ended(outcome, error)
    meters.processed(job.message.queue, outcome.seconds, error)
    return with_metadata(outcome, job)


async def arun_job(
    job: Job, delivery: Delivery, *, call: Callable[[Job], Awaitable[Any]]
) -> Outcome:
    """:func:`run_job` for an ``async def`` task on an event loop: ``await call(job)``,
    the database connections closed in the thread of Django's async ORM, as its ASGI
    handler does around a request."""
    await sync_to_async(close_old_connections)()
    running_task, token = running(job.message)
    started = time.perf_counter()
    error: BaseException | None = None
    with tracing.processing(job) as traced:
        try:
            if traced is not None and traced.after:
                await asyncio.to_thread(traced.link_parents)
            value = await call(job)
        except Abandoned:
            raise
        except BaseException as raised:  # GeneratorExit, or the task's own CancelledError
            error, outcome = raised, failure(delivery, job, raised, since(started))
        else:
            outcome = success(delivery, job, value, running_task.deferred_for, since(started))
        finally:
            stop_running(token)
            await sync_to_async(close_old_connections)()
        if traced is not None:
            traced.ended(outcome, error)
    meters.processed(job.message.queue, outcome.seconds, error)
    return with_metadata(outcome, job)


def with_metadata(outcome: Outcome, job: Job) -> Outcome:
    """``outcome`` with the task's metadata, if its run changed it, and the progress it
    said since its last save: saved with it, in the same script, fenced as it is; and,
    with METRICS, a first attempt's wait in its queue, for its histogram."""
    changed, progress = job.changed_metadata(), job.pending_progress()
    waited = job.waited_ms if conf.METRICS else None
    if not changed and not progress and waited is None:
        return outcome
    return dataclasses.replace(outcome, metadata=changed, progress=progress, waited_ms=waited)


def abandoned(outcome: Outcome, job: Job, why: str) -> Outcome:
    """``outcome``, of an attempt the worker settled and left its code to itself (``why``:
    "time limit", or "terminated" by a cancel), with what its run changed so far (see
    :func:`with_metadata`); its span ends now, and at its limit its run is measured."""
    if job.traced is not None:
        job.traced.abandoned(outcome, why)
    if outcome.kind != "cancel":  # (at the limit: how long it ran)
        meters.processed(job.message.queue, outcome.seconds, TimeLimitExceeded(why))
    return with_metadata(outcome, job)


def since(started: float) -> float:
    return time.perf_counter() - started


def with_input(message: TaskMessage) -> TaskMessage | None:
    """``message`` with the input its workflow keeps for it (``FlowStep.input``: a member
    of a group after a group) as its first argument; ``None`` when that is no longer kept."""
    if message.flow is None or not message.flow.input:
        return message
    given = TaskStore().workflow_result(message.flow.workflow, message.flow.input)
    if given is None:
        return None
    return dataclasses.replace(message, args=[json.loads(given), *message.args])


def over_time(delivery: Delivery, worker_id: str, stopped: str) -> Outcome | None:
    """The failed attempt of a task whose process was ``stopped`` (how, for the log) at
    its hard time limit; ``None`` for a payload it cannot run (recovery dead-letters it)."""
    try:
        message = TaskMessage.decode(delivery.payload)
    except MalformedTask:
        return None
    job = job_for(message, worker_id, delivery.attempt)
    if isinstance(job, str):
        return None
    limit = job.time_limit or 0.0
    logger.error(
        "Task %s[%s] ran past its time limit of %g s: %s",
        *(message.task, message.id, limit, stopped),
    )
    error = TimeLimitExceeded(f"the task ran past its time limit of {limit:g} s")
    return failure(delivery, job, error, limit, reason="time limit")


def success(
    delivery: Delivery, job: Job, value: Any, deferred_for: float | None, seconds: float
) -> Outcome:
    """How a run that returned ends: done, deferred, or failed for its return value."""
    message, ms = job.message, seconds * 1000
    if deferred_for is not None:
        # Its next run is not a first attempt: without its enqueue time, the worker
        # reads the attempts so far from its result (see Job).
        return Outcome(
            delivery=delivery,
            task_id=message.id,
            kind="defer",
            again=delivery.payload
            if message.enqueued_at is None
            else dataclasses.replace(message, enqueued_at=None, due_at=None).encode(),
            delay_ms=round(deferred_for * 1000),
            seconds=seconds,
            first=message.first_attempt,
            said=LogLine(
                logger.info,
                "Task %s[%s] deferred for %.3g s after %.1f ms",
                *(message.task, message.id, deferred_for, ms),
            ),
        )
    try:
        returned = job.encode(value)
    except Exception as error:  # the task ran: running it again cannot help
        logger.error("Task %s[%s] failed after %.1f ms: %s", message.task, message.id, ms, error)
        job.finished(TaskStatus.FAILED, error)
        return bury(
            *(delivery, message.id, "failed", str(error), error, seconds),
            first=message.first_attempt,
        )
    job.finished(TaskStatus.SUCCESSFUL, None)
    return Outcome(
        delivery=delivery,
        task_id=message.id,
        kind="ok",
        data=returned,
        seconds=seconds,
        first=message.first_attempt,
        said=LogLine(logger.info, "Task %s[%s] done in %.1f ms", message.task, message.id, ms),
    )


def failure(
    delivery: Delivery, job: Job, error: BaseException, seconds: float, reason: str = "failed"
) -> Outcome:
    """How a failed run ends: another attempt after its delay (:meth:`Job.next_delay`), or
    a dead letter (with ``reason``); logged either way. Queued arguments that the task's
    function cannot take are dead-lettered at once: no retry could run it; so is a task
    whose ``backoff`` fails (``"bad backoff"``)."""
    message = job.message
    name, task_id, ms = message.task, message.id, seconds * 1000
    described = f"{type(error).__name__}: {error}"
    if isinstance(error, Retry):
        described = f"retry requested: {error.reason}" if error.reason else "retry requested"
    delay = None
    if isinstance(error, TaskArgumentsMismatch):
        reason = "invalid arguments"
    else:
        try:
            delay = job.next_delay(error)
        except BadBackoff as bad:
            reason, described = "bad backoff", f"{described}; {bad}"
    if delay is not None:
        return Outcome(
            delivery=delivery,
            task_id=task_id,
            kind="retry",
            data=error_json(*describe(error)),
            again=dataclasses.replace(message, retries=message.retries + 1).encode(),
            delay_ms=round(delay * 1000),
            seconds=seconds,
            first=message.first_attempt,
            # An expected failure: one line; its traceback at DEBUG (rc_worker -v 2), and
            # with the dead letter.
            said=LogLine(
                logger.warning,
                "Task %s[%s] failed in %.1f ms (%s); retry %d of %d in %.3g s",
                *(name, task_id, ms, described, job.attempt, job.max_attempts - 1, delay),
                exc_info=None
                if isinstance(error, Retry) or not logger.isEnabledFor(logging.DEBUG)
                else error,
            ),
        )
    logger.error(
        DEAD_LETTERED,
        *(name, task_id, ms, described, message.retries),
        exc_info=None if isinstance(error, Retry) else error,
    )
    job.finished(TaskStatus.FAILED, error)
    return bury(
        *(delivery, task_id, reason, described, error, seconds), first=message.first_attempt
    )


def spent(delivery: Delivery, job: Job) -> Outcome:
    """The dead letter of a task taken with its attempts spent: by crashes (its worker
    died in its last attempt), or by a ``max_attempts`` lowered since it was queued. It
    does not run again."""
    message = job.message
    made = job.attempt - 1
    if job.attempt - message.retries > 1:  # (its crashes count, and it has some)
        reason = "crashed"
        problem = (
            f"its worker died in its last attempt ({made} of {job.max_attempts}, "
            f"{message.crashes} of them crashed): its attempts are spent"
        )
        error: BaseException = WorkerCrashed(problem)
    else:
        reason = "failed"
        problem = (
            f"its {made} attempts are spent: the task allows {job.max_attempts} now "
            "(fewer than when it was queued)"
        )
        error = TaskError(problem)
    logger.error("Dead-lettered task %s[%s]: %s", message.task, message.id, problem)
    job.finished(TaskStatus.FAILED, error)
    return bury(delivery, message.id, reason, problem, error)


def bury(
    delivery: Delivery,
    task_id: str,
    reason: str,
    problem: str,
    error: BaseException | None = None,
    seconds: float = 0.0,
    *,
    first: bool = False,
) -> Outcome:
    """A dead letter for ``delivery``, saying why (``problem``; the traceback of ``error``);
    ``first``: of the task's first attempt (see :class:`Outcome`)."""
    class_path, trace = describe(error) if error is not None else ("", problem)
    return Outcome(
        delivery=delivery,
        task_id=task_id,
        kind="bury",
        data=error_json(class_path, trace),
        dead_entry=dead_entry(delivery.payload, delivery.queue, reason, problem, trace),
        seconds=seconds,
        first=first,
    )
