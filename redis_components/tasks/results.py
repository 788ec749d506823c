r"""Task result records: what Redis keeps of a task, whichever decorator made it, read
as :class:`TaskRecord`\ s and as Django's ``TaskResult`` (:func:`to_django`). A result
is kept ``TASK_RESULT_TTL`` seconds after its last change, then Redis expires it.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from .. import keys
from ..exceptions import TaskResultDoesNotExist
from ..keys import django_datetime
from .framework import Task, TaskResult, TaskResultStatus
from .framework import TaskError as DjangoTaskError
from .store import TaskRecord as TaskRecord
from .store import TaskStatus as TaskStatus
from .store import TaskStore

# How a cancelled task reads in Django's results, which have no CANCELLED status.
CANCELLED = "redis_components.exceptions.TaskCancelled"

MAX_TASK_ID = 100
# The end of a traceback is kept in a result and a dead letter; the start is in the log.
MAX_TRACEBACK = 20_000


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
    """The records of several tasks in one round trip (``None`` where none is kept, or
    where one cannot be read: reading never fails on bad data)."""
    for task_id in task_ids:
        keys.validate_name(task_id, "task_id", MAX_TASK_ID)
    return TaskStore().task_records(task_ids)


def to_django(task: Task[..., Any], record: TaskRecord) -> TaskResult[..., Any]:
    """A result record as Django's ``TaskResult`` of ``task`` (Django has no CANCELLED:
    a cancelled task is FAILED, its last error a ``TaskCancelled``)."""
    errors = [
        DjangoTaskError(exception_class_path=error.exception_class_path, traceback=error.traceback)
        for error in record.errors
    ]
    status = record.status.value
    if record.status is TaskStatus.CANCELLED:
        status = "FAILED"
        errors.append(DjangoTaskError(exception_class_path=CANCELLED, traceback="it was cancelled"))
    result: TaskResult[..., Any] = TaskResult(
        task=task,
        id=record.id,
        status=TaskResultStatus(status),
        enqueued_at=django_datetime(record.enqueued_at),
        started_at=django_datetime(record.started_at),
        finished_at=django_datetime(record.finished_at),
        last_attempted_at=django_datetime(record.last_attempted_at),
        args=record.args,
        kwargs=record.kwargs,
        backend=task.backend,
        errors=errors,
        worker_ids=record.worker_ids,
    )
    if record.status is TaskStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.return_value)
    return result
