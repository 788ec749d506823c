"""Task queues: ``@task``, priorities, delayed tasks, at-least-once delivery, retries.

::

    @task(queue="emails", max_retries=3)
    def send_sold_email(seller_id, item_id, price, buyer_id): ...

    send_sold_email.enqueue(7, "ItemA", 35, 4)          # runs in a worker (manage.py rc_worker)
    send_sold_email.enqueue_in(30, 7, "ItemA", 35, 4)   # not before 30 s from now

Keys
----
Every key of the task system shares one hash tag, ``{tasks}``, so that one script,
transaction or move may touch any of them on Redis Cluster (a worker serving several
queues moves a task from whichever is first non-empty into its own in-progress list;
recovery moves tasks between lists of different queues). On a cluster the task system
therefore lives on one shard, as it must for atomic multi-queue moves. With the
default prefix::

    rc:queue:{tasks}:ready:<queue>              LIST  tasks ready to run, oldest first
    rc:queue:{tasks}:delayed:<queue>            ZSET  tasks not due yet, scored by due time (ms)
    rc:queue:{tasks}:dead:<queue>               LIST  dead letters: JSON {task, reason, error, ...}
    rc:queue:{tasks}:running:<worker>:<queue>   LIST  the tasks a worker has taken from a queue
    rc:queue:{tasks}:leases                     ZSET  worker id -> lease expiry (ms)
    rc:queue:{tasks}:workers                    HASH  worker id -> JSON description (queues, pid)
    rc:queue:{tasks}:queues                     SET   every queue a worker has served

Each queue has its own delayed ZSET (not one for all queues, as in the book) so that
the script moving due tasks to their ready lists gets every key it writes through
``KEYS``: with one ZSET it would have to build the target list's key from the task.
Worker ids contain no ``:``, so the queue name (any validated name) is always the
last part and keys stay unambiguous. Idle workers are woken through a Pub/Sub
channel named like the queue's ready list (channels and keys are separate
namespaces, and the name saves sending a second one to every script).

A task travels as JSON (never pickle): ``{"id", "task", "queue", "args", "kwargs",
"retries"}``, and ``"crashes"`` once a worker died running it (recovery appends it).
Its arguments are encoded when it is enqueued, in the caller, so a value JSON cannot
carry raises :class:`TaskSerializationError` there.

Delivery
--------
At least once: a task leaves its ready list only by an atomic move into the
in-progress list of a registered worker, and leaves that list only after it ran
(acknowledged, rescheduled for a retry, or dead-lettered, each in one script). If
the worker dies, its lease runs out and a live worker puts its in-progress tasks back
at the head of their queues (see ``worker.py``). A task may therefore run twice after
a crash, never zero times: write tasks to be idempotent.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from django.db import transaction
from redis import Redis

from . import keys, scripts
from .conf import DEFAULTS, conf, user_settings
from .connection import get_client, is_cluster, node_client, text
from .exceptions import (
    InvalidInput,
    LockNotAcquired,
    QueueFull,
    TaskError,
    TaskNotDurable,
    TaskNotRegistered,
    TaskSerializationError,
)
from .guard import Busy

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger(__name__)

COMPONENT = "queue"
TAG = "tasks"
DEFAULT_QUEUE = "default"
MAX_QUEUE_NAME = 200
MAX_TASK_NAME = 200


# -- keys ---------------------------------------------------------------------------


def validate_queue(queue: object, field: str = "queue") -> str:
    """Return ``queue`` if it is a usable queue name, else raise :class:`InvalidInput`."""
    return keys.validate_name(queue, field, max_length=MAX_QUEUE_NAME)


def tasks_client() -> Redis:
    """The client for the task system's keys: on a cluster, the node of their one hash tag."""
    client = get_client()
    return node_client(client, leases_key()) if is_cluster(client) else client


def ready_key(queue: str) -> str:
    return keys.key(COMPONENT, TAG, "ready", queue)


def delayed_key(queue: str) -> str:
    return keys.key(COMPONENT, TAG, "delayed", queue)


def dead_key(queue: str) -> str:
    return keys.key(COMPONENT, TAG, "dead", queue)


def running_key(worker_id: str, queue: str) -> str:
    return keys.key(COMPONENT, TAG, "running", worker_id, queue)


def leases_key() -> str:
    return keys.key(COMPONENT, TAG, "leases")


def workers_key() -> str:
    return keys.key(COMPONENT, TAG, "workers")


def queues_key() -> str:
    return keys.key(COMPONENT, TAG, "queues")


# -- messages -----------------------------------------------------------------------


@dataclass(frozen=True)
class TaskMessage:
    """One task as it travels through Redis: which task to run, with what, and its history."""

    id: str
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    retries: int = 0
    crashes: int = 0  # how many workers died running it

    def encode(self) -> str:
        payload = _encode(self.id, self.task, self.queue, self.args, self.kwargs, self.retries)
        # As queue_recover.lua writes it: the count is kept across retries.
        return f'{payload[:-1]},"crashes":{self.crashes}}}' if self.crashes else payload

    @classmethod
    def decode(cls, payload: str | bytes) -> TaskMessage:
        """Parse a payload; ``ValueError`` says what is wrong with a malformed one."""
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError(f"a task must be a JSON object, not {type(data).__name__}")
        fields = {"id": str, "task": str, "queue": str, "args": list, "kwargs": dict}
        for name, kind in fields.items():
            if not isinstance(data.get(name), kind):
                raise ValueError(f"the task's {name!r} must be a {kind.__name__}")
        counts = {name: data.get(name, 0) for name in ("retries", "crashes")}
        for name, count in counts.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"the task's {name!r} must be a non-negative integer")
        return cls(data["id"], data["task"], data["queue"], data["args"], data["kwargs"], **counts)


# One encoder for every payload (json.dumps with options would build one per call).
_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _encode(task_id: str, task: str, queue: str, args: Any, kwargs: Any, retries: int) -> str:
    # "retries" last: queue_recover.lua appends the crash count after it.
    return _json(
        {
            "id": task_id,
            "task": task,
            "queue": queue,
            "args": args,
            "kwargs": kwargs,
            "retries": retries,
        }
    )


def valid_seconds(value: object, field: str) -> float:
    """``value`` as a number of seconds, or :class:`InvalidInput` unless finite and >= 0."""
    return keys.seconds(value, field)


def new_message(
    task: str, queue: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[str, str]:
    """A new task's id and payload, or :class:`TaskSerializationError`."""
    task_id = os.urandom(16).hex()
    try:
        return task_id, _encode(task_id, task, queue, args, kwargs, 0)
    except (TypeError, ValueError) as error:
        raise TaskSerializationError(
            f"the arguments of task {task!r} cannot be sent as JSON: {error}"
        ) from None


# -- tasks --------------------------------------------------------------------------


class Retry(Exception):
    """Raise from a task to run it again after ``delay`` seconds (default: the backoff).

    A retry counts against the task's ``max_retries``; past it, the task is
    dead-lettered with ``reason`` as its error.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        self.delay = None if delay is None else valid_seconds(delay, "delay")
        self.reason = reason
        super().__init__(reason or "retry requested")


_registry: dict[str, Task[Any, Any]] = {}


class Task(Generic[P, R]):
    """A function registered under a name that workers can run; made by :func:`task`.

    Calling it runs the function inline. :meth:`enqueue` and its variants send it to
    a worker instead; they return the task's id.
    """

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str,
        queue: str,
        max_retries: int,
        retry_backoff: float | None,
    ) -> None:
        self.func = func
        self.name = keys.validate_name(name, "name", MAX_TASK_NAME)
        self.queue = validate_queue(queue)
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise InvalidInput(
                "max_retries", f"must be a non-negative integer, not {max_retries!r}"
            )
        self.max_retries = max_retries
        self.retry_backoff = (
            None if retry_backoff is None else valid_seconds(retry_backoff, "retry_backoff")
        )
        self._keys: tuple[str, str, str] = ("", "", "")  # KEY_PREFIX, ready and delayed keys
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", name)
        self.__module__ = func.__module__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Send the task to its queue; a worker runs it as soon as one is free."""
        return self._send(*new_message(self.name, self.queue, args, kwargs), "")

    def enqueue_in(self, delay: float, /, *args: P.args, **kwargs: P.kwargs) -> str:
        """Send the task to run ``delay`` seconds from now (by the Redis server's clock)."""
        milliseconds = round(valid_seconds(delay, "seconds") * 1000)
        message = new_message(self.name, self.queue, args, kwargs)
        return self._send(*message, f"+{milliseconds}")

    def enqueue_at(self, when: datetime.datetime, /, *args: P.args, **kwargs: P.kwargs) -> str:
        """Send the task to run at ``when``, an aware datetime (compared to the server's clock)."""
        if not isinstance(when, datetime.datetime):
            raise InvalidInput("when", f"must be a datetime, not {type(when).__name__}")
        if when.utcoffset() is None:
            raise InvalidInput("when", "must be an aware datetime (with a time zone)")
        message = new_message(self.name, self.queue, args, kwargs)
        return self._send(*message, f"@{round(when.timestamp() * 1000)}")

    def enqueue_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Enqueue when the current database transaction commits; never if it rolls back.

        The arguments are encoded now (so a bad argument raises here); the task id is
        returned at once. Outside a transaction the task is enqueued immediately, and
        its errors raise as ``enqueue``'s do. Inside one, an enqueue that fails when
        its turn comes (``QueueFull``, Redis down, ``TaskNotDurable``) is logged as an
        error with the task id, not raised: the transaction has committed by then.
        """
        task_id, payload = new_message(self.name, self.queue, args, kwargs)
        if not transaction.get_connection().in_atomic_block:
            return self._send(task_id, payload, "")

        def send() -> None:
            try:
                self._send(task_id, payload, "")
            except Exception:
                logger.exception(
                    "Task %s (%s) was not enqueued after its transaction committed",
                    task_id,
                    self.name,
                )

        transaction.on_commit(send)
        return task_id

    def _send(self, task_id: str, payload: str, when: str) -> str:
        # Enqueue is a hot path: the settings are read once, the keys built once per prefix.
        options = user_settings()
        prefix, ready, delayed = self._keys
        if prefix != options.get("KEY_PREFIX", DEFAULTS["KEY_PREFIX"]):
            prefix, ready, delayed = conf.KEY_PREFIX, ready_key(self.queue), delayed_key(self.queue)
            self._keys = (prefix, ready, delayed)
        limit = _limit(options, self.queue)
        call: scripts.Call
        if not when and not limit:  # the common case gets the smallest script
            call = (scripts.load("queue_push"), [ready], [payload])
        else:
            call = (scripts.load("queue_enqueue"), [ready, delayed], [payload, when, limit])
        replicas = int(options.get("QUEUE_WAIT_REPLICAS") or 0)  # as conf reads it
        if replicas:
            timeout = conf.QUEUE_WAIT_TIMEOUT
            added, acknowledged = scripts.run_and_wait(tasks_client(), call, replicas, timeout)
        else:
            script, keys_, args = call
            added = script(tasks_client(), keys_, args)
        if call[0].name == "queue_enqueue" and not added:
            raise QueueFull(self.queue, limit)
        if replicas and acknowledged < replicas:
            raise TaskNotDurable(
                f"Task {task_id} was enqueued, but {acknowledged} of {replicas} replicas "
                f"acknowledged it within {timeout:g} s",
                task_id,
            )
        return task_id


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    max_retries: int = 3,
    retry_backoff: float | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = DEFAULT_QUEUE,
    max_retries: int = 3,
    retry_backoff: float | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Register a function as a task that workers run; use as ``@task`` or ``@task(...)``.

    ``name`` defaults to ``"<module>.<function>"`` and is what travels in the queue, so
    renaming a function orphans its queued tasks unless ``name`` keeps the old one.
    ``queue``: where :meth:`Task.enqueue` sends it. An exception in the task retries it
    up to ``max_retries`` times, after ``retry_backoff`` (default the
    ``TASK_RETRY_BACKOFF`` setting) x 2**retry seconds, jittered; then it is
    dead-lettered with its traceback.
    """

    def register(function: Callable[P, R]) -> Task[P, R]:
        task_name = name or f"{function.__module__}.{function.__qualname__}"
        new = Task(
            function,
            name=task_name,
            queue=queue,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
        )
        existing = _registry.get(new.name)
        if existing is not None and _origin(existing.func) != _origin(function):
            raise TaskError(
                f"two tasks are named {new.name!r}: {_origin(existing.func)} and "
                f"{_origin(function)}; give one of them another name= ."
            )
        _registry[new.name] = new
        return new

    if func is not None:
        return register(func)
    return register


def _origin(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{getattr(func, '__qualname__', func)}"


def get_task(name: str) -> Task[Any, Any]:
    """The task registered under ``name``, or :class:`TaskNotRegistered`."""
    try:
        return _registry[name]
    except KeyError:
        raise TaskNotRegistered(f"no task is registered as {name!r}") from None


def registered_tasks() -> dict[str, Task[Any, Any]]:
    """Every registered task by name (a copy)."""
    return dict(_registry)


def queue_limit(queue: str) -> int:
    """The maximum number of waiting tasks of ``queue`` (0: unbounded)."""
    return _limit(user_settings(), queue)


def _limit(options: dict[str, Any], queue: str) -> int:
    limits = options.get("TASK_QUEUE_LIMITS")
    return int(limits.get(queue, 0)) if isinstance(limits, dict) else 0


def backoff(retries: int, base: float | None = None) -> float:
    """Seconds to wait before retry number ``retries + 1``: exponential, capped, jittered.

    The jitter (x 0.5 to 1.5) spreads the retries of tasks that failed together.
    """
    base = conf.TASK_RETRY_BACKOFF if base is None else base
    delay = min(conf.TASK_RETRY_BACKOFF_MAX, base * 2.0**retries)
    return min(conf.TASK_RETRY_BACKOFF_MAX, delay * random.uniform(0.5, 1.5))


# -- the task a worker is running, and deferring it ---------------------------------


class RunningTask:
    """The task a worker is running now; :func:`current_task` returns it inside a task."""

    def __init__(self, message: TaskMessage) -> None:
        self.message = message
        self.deferred_for: float | None = None

    @property
    def id(self) -> str:
        return self.message.id

    def defer(self, seconds: float) -> None:
        """Ask the worker to run this task again in ``seconds`` instead of finishing it.

        The worker moves it to the delayed queue atomically when the task returns; a
        deferral does not count as a retry.
        """
        self.deferred_for = valid_seconds(seconds, "seconds")


_current: contextvars.ContextVar[RunningTask | None] = contextvars.ContextVar(
    "redis_components_current_task", default=None
)


def current_task() -> RunningTask | None:
    """The task the worker is running in this context, or ``None`` outside a worker."""
    return _current.get()


def defer(seconds: float | None = None) -> Callable[[Busy], None]:
    """A lock conflict strategy: run the current task again later instead of waiting.

    ::

        @task()
        @redis_lock("item:{item_id}", on_busy=defer(5))
        def sell(item_id): ...

    When the lock is busy inside a worker, the task being run is moved to its delayed
    queue, due in ``seconds`` (default: the lock's ``retry_after``), and the call
    returns ``None``; a deferral does not count as a retry. Outside a worker (a plain
    call) there is no queued task to defer, so :class:`LockNotAcquired` is raised.
    """
    if seconds is not None:
        valid_seconds(seconds, "seconds")

    def on_busy(busy: Busy) -> None:
        running = current_task()
        names = ", ".join(busy.names)
        if running is None:
            raise LockNotAcquired(
                f"{names} is busy and no worker task is running to defer",
                name=busy.names[0] if busy.names else None,
            )
        running.defer(busy.retry_after if seconds is None else seconds)

    return on_busy


# -- looking at the queues ----------------------------------------------------------


@dataclass(frozen=True)
class QueueStats:
    """How many tasks of one queue are in each state (a snapshot, not a transaction)."""

    name: str
    ready: int
    delayed: int
    in_progress: int
    dead: int
    limit: int


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker and the seconds until its lease runs out (negative: expired)."""

    id: str
    host: str
    pid: int
    queues: list[str]
    started_at: float
    lease_left: float


def workers() -> list[WorkerInfo]:
    """Every registered worker, live or not yet recovered, by id."""
    client = tasks_client()
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(workers_key())
    pipe.zrange(leases_key(), 0, -1, withscores=True)
    pipe.time()
    described, leases, (seconds, micros) = pipe.execute()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    expiry = {text(member): float(score) for member, score in leases}
    found = []
    for raw_id, raw_info in described.items():
        worker_id = text(raw_id)
        try:
            info = json.loads(raw_info)
            queues = [str(queue) for queue in info["queues"]]
        except (ValueError, KeyError, TypeError):
            continue
        lease = expiry.get(worker_id)
        found.append(
            WorkerInfo(
                id=worker_id,
                host=str(info.get("host", "")),
                pid=int(info.get("pid", 0)),
                queues=queues,
                started_at=float(info.get("started_at", 0)),
                lease_left=(lease - now_ms) / 1000 if lease is not None else -math.inf,
            )
        )
    return sorted(found, key=lambda worker: worker.id)


def queue_names(extra: Iterable[str] = ()) -> list[str]:
    """Every queue known: served by a worker, used by a registered task, or limited."""
    return _known_queues(workers(), extra)


def _known_queues(registered: list[WorkerInfo], extra: Iterable[str] = ()) -> list[str]:
    names = {text(name) for name in tasks_client().smembers(queues_key())}
    names.update(task.queue for task in _registry.values())
    names.update(conf.TASK_QUEUE_LIMITS)
    for worker in registered:
        names.update(worker.queues)
    names.update(extra)
    return sorted(names)


def queue_stats(queues: Iterable[str] | None = None) -> list[QueueStats]:
    """Ready, delayed, in-progress and dead counts of each queue (default: all known)."""
    registered = workers()
    names = list(_known_queues(registered) if queues is None else queues)
    serving = {name: [w.id for w in registered if name in w.queues] for name in names}
    pipe = tasks_client().pipeline(transaction=False)
    for name in names:
        pipe.llen(ready_key(name))
        pipe.zcard(delayed_key(name))
        pipe.llen(dead_key(name))
        for worker_id in serving[name]:
            pipe.llen(running_key(worker_id, name))
    counts = iter(pipe.execute())
    stats = []
    for name in names:
        ready, delayed, dead = next(counts), next(counts), next(counts)
        in_progress = sum(next(counts) for _ in serving[name])
        stats.append(QueueStats(name, ready, delayed, in_progress, dead, queue_limit(name)))
    return stats


@dataclass(frozen=True)
class DeadLetter:
    """A task that will not run again unless requeued, and why."""

    queue: str
    task: str
    reason: str
    error: str
    traceback: str
    failed_at: float
    raw: str


def dead_letters(queue: str, count: int = 100) -> list[DeadLetter]:
    """The newest ``count`` dead letters of ``queue``, newest last."""
    validate_queue(queue)
    entries = tasks_client().lrange(dead_key(queue), -count, -1)
    return [_dead_letter(queue, text(entry)) for entry in entries]


def _dead_letter(queue: str, raw: str) -> DeadLetter:
    try:
        data = json.loads(raw)
        return DeadLetter(
            queue=queue,
            task=str(data["task"]),
            reason=str(data.get("reason", "")),
            error=str(data.get("error", "")),
            traceback=str(data.get("traceback", "")),
            failed_at=float(data.get("failed_at", 0)),
            raw=raw,
        )
    except (ValueError, KeyError, TypeError):
        return DeadLetter(queue, raw, "unreadable dead letter", "", "", 0.0, raw)


def dead_entry(payload: str, queue: str, reason: str, error: str, traceback: str) -> str:
    """A dead-letter entry: the payload exactly as it was queued, and why it stopped."""
    return json.dumps(
        {
            "task": payload,
            "queue": queue,
            "reason": reason,
            "error": error,
            "traceback": traceback,
            "failed_at": round(time.time(), 3),
        },
        ensure_ascii=False,
    )


def requeue_dead(queue: str, batch: int = 500) -> int:
    """Put every dead letter of ``queue`` back on it with fresh retries; return how many.

    Each batch moves atomically; an entry removed meanwhile (by another requeue) is
    skipped, so no task is requeued twice.
    """
    validate_queue(queue)
    client = tasks_client()
    script = scripts.load("queue_requeue_dead")
    moved = 0
    while True:
        entries = [text(entry) for entry in client.lrange(dead_key(queue), 0, batch - 1)]
        if not entries:
            return moved
        args: list[scripts.Arg] = []
        for entry in entries:
            args += [entry, _fresh_payload(_dead_letter(queue, entry).task)]
        done = int(script(client, [dead_key(queue), ready_key(queue)], args))
        moved += done
        if done == 0:  # another process is requeueing the same entries
            return moved


def _fresh_payload(payload: str) -> str:
    """The payload with its retry count reset; an undecodable one is kept as it was."""
    try:
        message = TaskMessage.decode(payload)
    except ValueError:
        return payload
    return TaskMessage(
        message.id, message.task, message.queue, message.args, message.kwargs
    ).encode()


def purge(queue: str) -> int:
    """Delete the ready, delayed and dead tasks of ``queue`` (in one command); return how many.

    Tasks in progress are left to finish.
    """
    validate_queue(queue)
    pipe = tasks_client().pipeline(transaction=True)
    pipe.llen(ready_key(queue))
    pipe.zcard(delayed_key(queue))
    pipe.llen(dead_key(queue))
    pipe.delete(ready_key(queue), delayed_key(queue), dead_key(queue))
    ready, delayed, dead, _ = pipe.execute()
    return int(ready) + int(delayed) + int(dead)
