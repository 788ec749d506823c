"""What runs a task in a worker: a :class:`Job`, one run of one task message (found by
our ``@redis_task``'s name or a Django ``@task``'s module path and backend alias)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any, cast

from django.core.signals import setting_changed
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import keys
from ..conf import conf
from ..exceptions import InvalidInput, TaskArgumentsMismatch
from ..keys import django_time
from . import results
from .definition import (
    Backoff,
    QueueBackend,
    RedisTask,
    as_enqueued,
    bind_arguments,
    find_django_task,
    own_backend,
    task_registry,
)
from .framework import (
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskError,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from .messages import TaskMessage, check_progress, metadata_json, progress_json, to_json
from .registry import Retry, backoff
from .results import RedisTaskContext, RedisTaskResult, TaskStatus, to_django
from .store import TaskStore

logger = logging.getLogger("redis_components.worker")

RUNNING = TaskResultStatus("RUNNING")
ENDED = {
    status: TaskResultStatus(status.value) for status in TaskStatus if status.value != "CANCELLED"
}


class CannotRun(Exception):
    """Why a message's task cannot run here."""


class BadBackoff(Exception):
    """A task's ``backoff`` raised, or answered something that is not a delay."""


@functools.lru_cache(maxsize=256)
def _imported(path: str) -> Backoff:
    found = import_string(path)
    if not callable(found):
        raise TypeError(f"{path} is not callable")
    return cast("Backoff", found)


def _named(function: Callable[..., Any]) -> str:
    qualname = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{getattr(function, '__module__', '?')}.{qualname}"


def _takes_one(function: Callable[..., Any]) -> bool:
    """Whether ``function`` cannot take two positional arguments (then it is given the
    task result alone)."""
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        return True
    except ValueError:  # (no signature to read: a builtin)
        return False
    return False


@dataclasses.dataclass(frozen=True)
class Runnable:
    """A task as a worker runs it: the task as enqueued, its backend's class (the
    signals' sender) and its options (the task's, else the backend's)."""

    task: Task[..., Any]
    sender: type[QueueBackend]
    max_attempts: int
    counts_crashes: bool  # given as max_attempts: a crash is an attempt too
    backoff: Backoff | str | None
    retry_backoff: float | None
    time_limit: float | None
    soft_time_limit: float | None
    is_async: bool  # an ``async def`` function: it runs on an event loop


def job_for(message: TaskMessage, worker_id: str, now_ms: int) -> Job | str:
    """What runs ``message`` here, or why nothing can."""
    try:
        if message.backend is None:
            runnable = _registered(message.task, message.priority, message.queue)
        else:
            runnable = _django(message.task, message.priority, message.queue, message.backend)
    except CannotRun as reason:
        return str(reason)
    return Job(runnable, message, worker_id, now_ms)


def _registered(name: str, priority: int, queue: str) -> Runnable:
    found = task_registry.find(name)
    if found is None:
        raise CannotRun(
            f"no task is registered as {name!r} here: a worker knows the @redis_tasks of each "
            "installed app's tasks module (and of the modules it imports); define the task "
            "there, or import its module from there"
        )
    known = _registered_runnables.get(name)
    if known is not None and known.task is found:  # still the task registered
        return known
    runnable = _runnable(as_enqueued(found, priority, queue, None), own_backend())
    if runnable.task is found:  # enqueued as registered (no using()): keep it
        _registered_runnables[name] = runnable
    return runnable


# The runnable of each registered task as registered, by name: checked against the
# registry at every message, so a task registered again under the name is seen.
_registered_runnables: dict[str, Runnable] = {}


@functools.lru_cache(maxsize=1024)
def _django(path: str, priority: int, queue: str, alias: str) -> Runnable:
    """The Django task at ``path`` as enqueued, found once (the cache is emptied when
    ``TASKS`` changes), or :class:`CannotRun` (not cached)."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        raise CannotRun(
            f"no Tasks backend is configured as {alias!r} in settings.TASKS here"
        ) from None
    if not isinstance(backend, QueueBackend):
        raise CannotRun(f"the Tasks backend {alias!r} is not a RedisTaskBackend here")
    try:
        task = find_django_task(path).using(priority=priority, queue_name=queue, backend=alias)
    except (ImportError, TypeError, InvalidTask) as error:
        raise CannotRun(f"no Django task {path!r} can run here: {error}") from None
    return _runnable(task, backend)


def _runnable(task: Task[..., Any], backend: QueueBackend) -> Runnable:
    def option(name: str, default: Any) -> Any:
        value = getattr(task, name, None) if isinstance(task, RedisTask) else None
        return default if value is None else value

    # The task's options, else its backend's: the attempts as one of their two names
    # gives them, and the delays as one of theirs does.
    attempts, retries = option("max_attempts", None), option("max_retries", None)
    if attempts is None and retries is None:
        attempts, retries = backend.max_attempts, backend.max_retries
    backoff, base = option("backoff", None), option("retry_backoff", None)
    if backoff is None and base is None:
        backoff, base = backend.backoff, backend.retry_backoff
    hard, soft = backend.time_limits
    return Runnable(
        task,
        type(backend),
        max_attempts=retries + 1 if attempts is None else attempts,
        counts_crashes=attempts is not None,
        backoff=backoff,
        retry_backoff=base,
        time_limit=option("time_limit", hard),
        soft_time_limit=option("soft_time_limit", soft),
        is_async=inspect.iscoroutinefunction(task.func),
    )


def _forget_tasks(*, setting: str, **kwargs: Any) -> None:
    if setting == "TASKS":
        _django.cache_clear()


setting_changed.connect(_forget_tasks)


class Job:
    """One run of a task: its options, Django's ``TaskResult``, signals and JSON rules."""

    def __init__(self, runnable: Runnable, message: TaskMessage, worker_id: str, now_ms: int):
        self.task = runnable.task
        self.sender = runnable.sender
        self.message = message
        self.max_attempts = runnable.max_attempts
        self._retries = runnable  # (how it retries: counts_crashes, backoff, retry_backoff)
        self._failed = False  # this run's error is in its result
        self.time_limit = runnable.time_limit
        self.soft_time_limit = runnable.soft_time_limit
        #: The task is an ``async def`` function: it runs on an event loop.
        self.is_async = runnable.is_async
        self.kept_trace = ""  # an earlier attempt's trace context, as tracing kept it
        self.traced: Any = None  # its attempt's span (tracing.Processing), while traced
        self.result = self._running(message, worker_id, now_ms)
        self.worker_id, self.taken_ms = worker_id, now_ms
        self.attempt_key = f"{now_ms} {worker_id}"  # (fences its saves: lua/queue_metadata.lua)
        metadata = self.result.metadata
        self._saved = to_json(metadata, "metadata") if metadata else "{}"  # as last saved
        # Progress said and not saved yet (done, total, note), and when it was last saved
        # (or the run started): set_progress() saves at most every TASK_PROGRESS_INTERVAL.
        self._progress: tuple[float, float | None, str] | None = None
        self._progress_saved = time.monotonic()
        self._progress_interval = float(conf.get("TASK_PROGRESS_INTERVAL"))

    def _running(self, message: TaskMessage, worker_id: str, now_ms: int) -> RedisTaskResult:
        if not message.first_attempt:
            # Not known to be a first attempt: the attempts so far, and this one (written
            # when it was taken), in one round trip.
            record = results.read_records([message.id])[0]
            if record is not None:
                self.kept_trace = record.trace
                return to_django(self.task, record)
        # A first attempt: its result is what the payload and the take say, as Redis
        # holds it now (enqueued, started and last attempted at the take, by this worker).
        started = django_time(now_ms)
        return RedisTaskResult(
            task=self.task,
            id=message.id,
            status=RUNNING,
            enqueued_at=django_time(message.enqueued_at),
            started_at=started,
            finished_at=None,
            last_attempted_at=started,
            args=message.args,
            kwargs=message.kwargs,
            backend=self.task.backend,
            errors=[],
            worker_ids=[worker_id],
            metadata=message.metadata or {},
        )

    @property
    def waited_ms(self) -> int | None:
        """A first attempt's wait in its queue: from when it was due to its take (ms)."""
        due = self.message.due_ms
        return None if due is None else max(0, self.taken_ms - due)

    def call(self) -> Any:
        """Run the task once, after Django's ``task_started`` signal (see :meth:`_started`)."""
        args, kwargs = self._started()
        return self.task.call(*args, **kwargs)

    async def acall(self) -> Any:
        """:meth:`call` on an event loop: ``async def`` tasks are awaited there."""
        args, kwargs = self._started()
        return await self.task.acall(*args, **kwargs)

    def _started(self) -> tuple[list[Any], dict[str, Any]]:
        """Send ``task_started``; the arguments of the call (its context first), if the
        function can take the queued ones (a task queued by an older release, or by
        hand, may not fit): :class:`TaskArgumentsMismatch` otherwise, never retried."""
        task_started.send(sender=self.sender, task_result=self.result)
        args, kwargs = self.message.args, self.message.kwargs
        bind_arguments(self.task, args, kwargs, error=TaskArgumentsMismatch)
        if self.task.takes_context:
            context = RedisTaskContext(
                task_result=self.result, _save=self.save_metadata, _progress=self.keep_progress
            )
            return [context, *args], kwargs
        return args, kwargs

    def save_metadata(self) -> bool:
        """Save the result's metadata now (see :meth:`RedisTaskContext.save_metadata`)."""
        text = metadata_json(self.result.metadata)
        saved = TaskStore().save_metadata(self.message.id, self.attempt_key, text)
        if saved:
            self._saved = text
        return saved

    def changed_metadata(self) -> str:
        """The result's metadata as JSON if it changed since it was last saved, to save
        with the outcome ("" if not, or if it cannot be saved: that is logged)."""
        if not self.result.metadata and self._saved == "{}":  # (most tasks: none)
            return ""
        try:
            text = metadata_json(self.result.metadata)
        except (InvalidInput, RuntimeError) as error:  # (a run left behind changes it)
            named = (self.message.task, self.message.id)
            logger.error("Task %s[%s]: its metadata is not saved: %s", *named, error)
            return ""
        return "" if text == self._saved else text

    def keep_progress(
        self, done: float, total: float | None, note: str
    ) -> Callable[[], bool] | None:
        """Keep the progress a task said (:class:`InvalidInput` if it is bad): the save to
        make now if TASK_PROGRESS_INTERVAL seconds passed since the last, else ``None``
        (it is saved by a later one, or with the outcome: :meth:`pending_progress`)."""
        check_progress(done, total, note)
        self._progress = (done, total, note)
        now = time.monotonic()
        if now - self._progress_saved < self._progress_interval:
            return None
        self._progress_saved = now
        return functools.partial(self._save_progress, self._progress)

    def _save_progress(self, progress: tuple[float, float | None, str]) -> bool:
        text = progress_json(*progress)
        saved = TaskStore().save_metadata(self.message.id, self.attempt_key, "", text)
        if saved and self._progress is progress:
            self._progress = None
        return saved

    def pending_progress(self) -> str:
        """The progress said since the last save, as JSON, to save with the outcome ("")."""
        return "" if self._progress is None else progress_json(*self._progress)

    def encode(self, value: Any) -> str:
        """The return value as JSON, by Django's rules: what JSON cannot carry is the task's
        error, a ``TypeError`` (``ValueError`` for bytes that are not UTF-8)."""
        what = f"the return value of task {self.message.task!r}"
        try:
            value = normalize_json(value)
        except RecursionError:
            raise TypeError(f"{what} is nested too deeply for JSON") from None
        except (TypeError, ValueError) as error:
            raise type(error)(f"{what} cannot be stored as JSON: {error}") from None
        object.__setattr__(self.result, "_return_value", value)
        return to_json(value, what)

    def finished(self, status: TaskStatus, error: BaseException | None) -> None:
        """Send Django's ``task_finished``, once the task has ended for good."""
        object.__setattr__(self.result, "status", ENDED[status])
        object.__setattr__(self.result, "finished_at", timezone.now())
        if error is not None:
            self._record(error)
        task_finished.send(sender=self.sender, task_result=self.result)

    def _record(self, error: BaseException) -> None:
        """The result with this run FAILED, its error last in ``errors`` (once)."""
        object.__setattr__(self.result, "status", ENDED[TaskStatus.FAILED])
        if not self._failed:
            class_path, trace = results.describe(error)
            self.result.errors.append(TaskError(exception_class_path=class_path, traceback=trace))
            self._failed = True

    @property
    def attempt(self) -> int:
        """This run's number among its task's attempts: 1 plus its retries so far, plus its
        crashes where they count (a task given ``max_attempts``)."""
        crashes = self.message.crashes if self._retries.counts_crashes else 0
        return self.message.retries + 1 + crashes

    def next_delay(self, error: BaseException) -> float | None:
        """Seconds until the next attempt of this run's task, which failed with ``error``;
        ``None`` for no more (its attempts spent, or its backoff said so):
        ``raise Retry(delay=...)``'s delay, else its ``backoff``'s answer, else the
        exponential backoff of ``retry_backoff``. :class:`BadBackoff` when its
        ``backoff`` fails or answers anything but seconds or ``None``."""
        if self.attempt >= self.max_attempts:
            return None
        if isinstance(error, Retry) and error.delay is not None:
            return error.delay
        given = self._retries.backoff
        if given is None:
            return backoff(self.message.retries, self._retries.retry_backoff)
        self._record(error)  # (what the backoff is given: this attempt FAILED, its error)
        name = given if isinstance(given, str) else _named(given)
        try:
            function = _imported(given) if isinstance(given, str) else given
            # (One taking the result alone, as Django's proposal's settings example has it.)
            arguments = (self.result,) if _takes_one(function) else (error, self.result)
            answer = function(*arguments)
        except Exception as problem:
            raise BadBackoff(
                f"its backoff {name} raised {type(problem).__name__}: {problem}"
            ) from problem
        if answer is None:
            return None
        if isinstance(answer, datetime.timedelta):
            answer = answer.total_seconds()
        try:
            return keys.seconds(answer, "backoff")
        except InvalidInput:
            raise BadBackoff(
                f"its backoff {name} returned {keys.shorten(answer)}: it must return the "
                "seconds until the next attempt (a number from 0, or a timedelta) or None"
            ) from None
