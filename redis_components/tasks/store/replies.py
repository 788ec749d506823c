"""What the store reads, made records: the only code that decodes the task system's
replies (a workflow's fields are ``workflow_records.py``'s, its codec).

Anything with access to Redis may have written these keys, so each parser reads what it
can and marks or leaves out what it cannot: reading never fails on bad data.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from ... import keys
from ..messages import MalformedTask, TaskMessage
from .records import Attempt, AttemptError, TaskRecord, TaskStatus, WorkerInfo

_ENDED = (TaskStatus.SUCCESSFUL, TaskStatus.FAILED, TaskStatus.CANCELLED)


def text(value: bytes) -> str:
    """A name or value as text, whatever its bytes."""
    return value.decode("utf-8", "backslashreplace")


def fields_of(reply: Any) -> dict[str, bytes]:
    """HGETALL's reply with str names (RESP2 gives a flat list, RESP3 a map)."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    return {text(name): value for name, value in reply.items()}


def integer(value: bytes | str | None) -> int | None:
    """An integer field, ``None`` when missing or not an integer."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def task_record(task_id: str, reply: Any, held: bytes | None) -> TaskRecord | None:
    """A task's record from its result hash and its entry in the running hash (``None``
    when it is not running); ``None`` when there is no result or it is not ours."""
    fields = fields_of(reply)
    try:
        message = TaskMessage.decode(fields["message"])
        status = TaskStatus(fields["status"].decode())
    except (KeyError, MalformedTask, ValueError):
        return None
    workers = fields.get("workers", b"").decode("utf-8", "replace").split()
    started = _time(fields.get("started_at"))
    last = _time(fields.get("last_attempted_at"))
    if status is TaskStatus.READY and held:
        attempt = Attempt.all_of(held)[-1]
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


def _time(value: bytes | None) -> datetime.datetime | None:
    ms = integer(value) if value else None
    return keys.utc_from_ms(ms)


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


def task_name(message: bytes | None) -> str:
    """The task a queued message names ("" when there is none or it is not ours)."""
    try:
        return TaskMessage.decode(message).task if message else ""
    except MalformedTask:
        return ""


def worker_description(raw_info: bytes | None) -> dict[str, Any] | None:
    """A worker's registered description (its queues, pid, host, start, threads), or
    ``None`` when it cannot be read as one."""
    try:
        info = json.loads(raw_info) if raw_info else None
    except (ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


def worker_queues(info: dict[str, Any]) -> list[str] | None:
    """The queues a worker's description names, ``None`` if they cannot be read."""
    queues = info.get("queues")
    if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
        return None
    return queues


def worker_info(worker_id: str, raw_info: bytes, lease_left: float) -> WorkerInfo:
    """A registered worker, with what could not be read of its description said."""
    info = worker_description(raw_info)
    if info is None:
        return WorkerInfo(worker_id, "", None, [], None, lease_left, "unreadable description")
    problems = []
    queues = worker_queues(info)
    if queues is None:
        queues, problems = [], ["queues"]
    pid = info.get("pid")
    if not keys.is_integer(pid):
        pid = None
        problems.append("pid")
    started = info.get("started_at")
    if not (keys.is_integer(started) or isinstance(started, float)):
        started = None
        problems.append("start time")
    host = info.get("host")
    threads = info.get("threads", 1)  # a worker of 0.1 does not say: it runs one
    if not keys.is_integer(threads) or threads < 1:
        threads = 1
        problems.append("threads")
    return WorkerInfo(
        worker_id,
        host if isinstance(host, str) else "",
        pid,
        queues,
        float(started) if started is not None else None,
        lease_left,
        f"unreadable {', '.join(problems)}" if problems else "",
        threads,
    )


def minute_counts(fields: dict[str, bytes], first: int) -> dict[int, dict[str, int]]:
    """Per-minute counts ("<minute>:<kind>" -> count) from minute ``first`` on, by minute
    and kind; fields that are not counts are left out."""
    counts: dict[int, dict[str, int]] = {}
    for name, value in fields.items():
        minute, _, kind = name.partition(":")
        number = integer(minute)
        if number is not None and number >= first:
            counts.setdefault(number, {})[kind] = integer(value) or 0
    return counts
