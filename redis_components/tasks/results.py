r"""Task result records: what Redis keeps of a task, whichever decorator made it.

The queue scripts write a task's result hash as its state changes (see ``store/``):
READY when enqueued (and again when it waits for a retry), SUCCESSFUL or FAILED when it
ends; while a worker runs it, the ``running`` hash says so. This module reads both in
one round trip, as :class:`TaskRecord`\ s: what the admin pages and ``rc_queues`` show,
and what ``backend.py`` turns into Django's ``TaskResult`` (the public result type).
A result is kept ``TASK_RESULT_TTL`` seconds (a day by default) after its last change,
then Redis expires it: nothing grows forever.
"""

from __future__ import annotations

import datetime
import enum
import json
import traceback
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from .. import keys
from ..exceptions import TaskResultDoesNotExist
from .messages import MalformedTask, TaskMessage
from .store import Attempt, TaskStore

MAX_TASK_ID = 100
# The end of a traceback is kept in a result and a dead letter; the start is in the log.
MAX_TRACEBACK = 20_000


class TaskStatus(str, enum.Enum):
    """Where a task is: the states of Django's ``TaskResultStatus`` (same values), and
    CANCELLED, which Django's results show as FAILED with a ``TaskCancelled`` error."""

    READY = "READY"  # enqueued, or waiting to run again after a failure or a crash
    RUNNING = "RUNNING"
    SUCCESSFUL = "SUCCESSFUL"
    FAILED = "FAILED"  # its retries are spent, or it cannot run: it is a dead letter
    CANCELLED = "CANCELLED"  # cancelled before it ran (or terminated while it ran)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class AttemptError:
    """Why one attempt failed: the exception's class path and the traceback."""

    exception_class_path: str
    traceback: str


@dataclass(frozen=True)
class TaskRecord:
    r"""What Redis keeps of one task.

    ``task`` is the registered name of one of our ``@redis_task``\ s (``backend`` is then
    ``None``), or the module path of a Django ``@task`` (``backend`` is its Tasks
    backend alias). Times are aware UTC datetimes from the Redis server's clock.
    ``worker_ids`` lists the worker of each attempt, ``errors`` the error of each
    failed one (a worker that died counts as
    :class:`~redis_components.exceptions.WorkerCrashed`); ``return_value`` is what a
    SUCCESSFUL task returned (``None`` otherwise).
    """

    id: str
    task: str
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str | None
    status: TaskStatus
    enqueued_at: datetime.datetime | None
    run_after: datetime.datetime | None
    started_at: datetime.datetime | None
    last_attempted_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    worker_ids: list[str]
    errors: list[AttemptError]
    return_value: Any = field(default=None, repr=False)

    @property
    def attempts(self) -> int:
        return len(self.worker_ids)


def describe(error: BaseException) -> tuple[str, str]:
    """An attempt's error as results keep it: the exception's class path, its traceback."""
    kind = type(error)
    trace = "".join(traceback.format_exception(kind, error, error.__traceback__))
    return f"{kind.__module__}.{kind.__qualname__}", trace[-MAX_TRACEBACK:]


def error_json(class_path: str, trace: str) -> str:
    """An attempt's error as a result stores it (the fields of Django's ``TaskError``)."""
    return json.dumps({"exception_class_path": class_path, "traceback": trace}, ensure_ascii=False)


def get_record(task_id: str) -> TaskRecord:
    """The record of task ``task_id``; :class:`TaskResultDoesNotExist` if none is kept."""
    found = read_records([task_id])[0]
    if found is None:
        raise TaskResultDoesNotExist(f"no result is kept for task {task_id!r}")
    return found


def read_records(task_ids: list[str]) -> list[TaskRecord | None]:
    """The records of several tasks in one round trip (``None`` where none is kept).

    A record that cannot be read (written by something else than this app) counts as
    missing: reading never fails on bad data.
    """
    for task_id in task_ids:
        keys.validate_name(task_id, "task_id", MAX_TASK_ID)
    records = TaskStore().result_records(task_ids)
    return [
        _parse(task_id, record, attempt)
        for task_id, (record, attempt) in zip(task_ids, records, strict=True)
    ]


def _parse(task_id: str, record: Any, attempt: Attempt | None) -> TaskRecord | None:
    fields = _as_fields(record)
    try:
        message = TaskMessage.decode(fields["message"])
        status = TaskStatus(fields["status"].decode())
    except (KeyError, MalformedTask, ValueError):
        return None
    workers = fields.get("workers", b"").decode("utf-8", "replace").split()
    started = _time(fields.get("started_at"))
    last = _time(fields.get("last_attempted_at"))
    if status is TaskStatus.READY and attempt:
        status = TaskStatus.RUNNING
        last = keys.utc_from_ms(attempt.started_ms)
        started = started or last
        workers.append(attempt.worker_id)
    value = None
    if status is TaskStatus.SUCCESSFUL:
        try:
            value = json.loads(fields.get("return_value", b"null"))
        except (ValueError, RecursionError):
            value = fields["return_value"].decode("utf-8", "replace")
    return TaskRecord(
        id=task_id,
        task=message.task,
        queue=message.queue,
        priority=message.priority,
        args=message.args,
        kwargs=message.kwargs,
        backend=message.backend,
        status=status,
        enqueued_at=_time(fields.get("enqueued_at")),
        run_after=_time(fields.get("run_after")),
        started_at=started,
        last_attempted_at=last,
        finished_at=_time(fields.get("finished_at")) if status in _ENDED else None,
        worker_ids=workers,
        errors=_errors(fields.get("errors")),
        return_value=value,
    )


_ENDED = (TaskStatus.SUCCESSFUL, TaskStatus.FAILED, TaskStatus.CANCELLED)


def _as_fields(record: Any) -> dict[str, bytes]:
    """HGETALL's reply as a dict with str names (RESP2 gives a flat list, RESP3 a map)."""
    if isinstance(record, list):
        record = dict(zip(record[::2], record[1::2], strict=True))
    return {name.decode("utf-8", "replace"): value for name, value in record.items()}


def _time(value: bytes | None) -> datetime.datetime | None:
    try:
        return keys.utc_from_ms(int(value)) if value else None
    except ValueError:
        return None


def _errors(value: bytes | None) -> list[AttemptError]:
    if not value:
        return []
    try:
        entries = json.loads(value)
    except (ValueError, RecursionError):
        return [AttemptError("", value.decode("utf-8", "replace"))]
    if not isinstance(entries, list):
        return []
    return [
        AttemptError(str(entry.get("exception_class_path", "")), str(entry.get("traceback", "")))
        for entry in entries
        if isinstance(entry, dict)
    ]


def django_time(ms: int | None) -> datetime.datetime | None:
    """Epoch ms as Django's own backends give times: aware, or naive local time when
    ``USE_TZ`` is False."""
    return django_datetime(keys.utc_from_ms(ms))


def django_datetime(value: datetime.datetime | None) -> datetime.datetime | None:
    """An aware time as Django's own backends give it (naive local when ``USE_TZ`` is False)."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)
