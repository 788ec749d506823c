"""What the store reads, made records: the only code that decodes the task system's
replies (a workflow's fields are ``flow_records.py``'s). Anything with access to Redis
may have written these keys, so each parser reads what it can and marks or leaves out
what it cannot: reading never fails on bad data."""

from __future__ import annotations

import codecs
import datetime
import json
import re
from typing import Any

from ... import keys
from ..messages import MalformedTask, TaskMessage, finite_number
from .records import (
    Attempt,
    AttemptError,
    DeadLetter,
    Fetched,
    Progress,
    TaskRecord,
    TaskStatus,
    WaitingTask,
    WorkerInfo,
)

# The fields of a task's result hash, as lua/lib/result.lua lists them (and writes them:
# a test ties the three together).
RESULT_FIELDS = (
    "status",
    "message",
    "enqueued_at",
    "run_after",
    "payload",
    "started_at",
    "last_attempted_at",
    "finished_at",
    "workers",
    "errors",
    "return_value",
    "unique",
    "workflow",
    "metadata",
    "progress",
    "trace",
)
_ENDED = (TaskStatus.SUCCESSFUL, TaskStatus.FAILED, TaskStatus.CANCELLED)
UNREADABLE = "(unreadable)"
# The most characters of a task's arguments that a list page shows.
ARGUMENTS_SHOWN = 300


def text(value: bytes) -> str:
    """A name or value as text, whatever its bytes."""
    return value.decode("utf-8", "backslashreplace")


def fields_of(reply: Any) -> dict[str, bytes]:
    """HGETALL's reply with str names (RESP2 gives a flat list, RESP3 a map)."""
    if isinstance(reply, list):
        reply = pairs(reply)
    return {text(name): value for name, value in reply.items()}


def integer(value: bytes | str | None) -> int | None:
    """An integer field, ``None`` when missing or not an integer."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def task_record(task_id: str, reply: Any, held: bytes | None) -> TaskRecord | None:
    """A task's record from its result hash and its entry in the running hash (``None``:
    not running); ``None`` when there is no result or it is not ours."""
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
    saved = json_object(fields.get("metadata"))
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
        metadata=(message.metadata or {}) if saved is None else saved,
        progress=progress(fields.get("progress")),
        trace=fields.get("trace", b"").decode("utf-8", "replace"),
    )


def _time(value: bytes | None) -> datetime.datetime | None:
    return keys.utc_from_ms(integer(value) if value else None)


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


def task_message(payload: bytes | None) -> TaskMessage | None:
    """The task a payload or message holds (``None`` when there is none or it is not ours)."""
    try:
        return TaskMessage.decode(payload) if payload else None
    except MalformedTask:
        return None


def task_name(message: bytes | None) -> str:
    """The task a queued message names ("" when there is none or it is not ours)."""
    found = task_message(message)
    return found.task if found else ""


def json_object(raw: bytes | None) -> dict[str, Any] | None:
    """A stored JSON object: a worker's description (queues, pid, host, start, threads),
    the metadata or the progress a task saved; ``None`` when there is none or it is not
    a JSON object."""
    try:
        found = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def progress(raw: bytes | None) -> Progress | None:
    """A task's stored progress (lua/lib/result.lua's ``result_progress``); ``None`` when
    there is none or it is not what a task saves."""
    found = json_object(raw)
    if found is None:
        return None
    done, total, note, at = (found.get(name) for name in ("done", "total", "note", "at"))
    if not finite_number(done) or done < 0 or not isinstance(note, str):
        return None
    if total is not None and not (finite_number(total) and total > 0):
        return None
    if not isinstance(at, int) or isinstance(at, bool):
        return None
    when = keys.utc_from_ms(at)
    return None if when is None else Progress(done=done, total=total, note=note, at=when)


def worker_queues(info: dict[str, Any]) -> list[str] | None:
    """The queues a worker's description names, ``None`` if they cannot be read."""
    queues = info.get("queues")
    if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
        return None
    return queues


def worker_info(worker_id: str, raw_info: bytes, lease_left: float) -> WorkerInfo:
    """A registered worker, with what could not be read of its description said."""
    info = json_object(raw_info)
    if info is None:
        return WorkerInfo(worker_id, "", None, [], None, lease_left, "unreadable description")
    queues = worker_queues(info)
    pid, started, threads = info.get("pid"), info.get("started_at"), info.get("threads", 1)
    valid = {
        "queues": queues is not None,
        "pid": keys.is_integer(pid),
        "start time": keys.is_integer(started) or isinstance(started, float),
        "threads": keys.is_integer(threads) and threads >= 1,  # (0.1's workers ran one)
    }
    problems = [name for name, ok in valid.items() if not ok]
    host = info.get("host")
    return WorkerInfo(
        worker_id,
        host if isinstance(host, str) else "",
        pid if valid["pid"] else None,
        queues or [],
        float(info["started_at"]) if valid["start time"] else None,
        lease_left,
        f"unreadable {', '.join(problems)}" if problems else "",
        threads if valid["threads"] else 1,
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


def read_dead_letter(queue: str, entry: bytes) -> DeadLetter:
    """What can be read of one dead-letter entry (an unreadable one is marked, never raised)."""
    shown = text(entry)
    try:
        data: Any = json.loads(entry)
        return DeadLetter(
            queue=queue,
            task=str(data["task"]),
            reason=str(data.get("reason", "")),
            error=str(data.get("error", "")),
            traceback=str(data.get("traceback", "")),
            failed_at=float(data.get("failed_at", 0)),
            raw=shown,
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        return DeadLetter(queue, shown, UNREADABLE, "", "", 0.0, shown, readable=False)


def glimpsed_dead_letter(queue: str, head: bytes, tail: bytes, size: int) -> DeadLetter:
    if len(head) == size:  # read whole
        return read_dead_letter(queue, head)
    start, end = _start_text(head), text(tail)
    # Python writes the task first, a recovery script in any order: look at both ends.
    fields = {
        name: found if (found := _field(start, name)) is not None else _field(end, name)
        for name in ("task", "reason", "error", "failed_at")
    }
    task, failed_at = fields["task"], fields["failed_at"]
    if not isinstance(task, str):
        return DeadLetter(queue, start, UNREADABLE, "", "", 0.0, start, False, size)
    return DeadLetter(
        queue=queue,
        task=_cut(task),
        reason=str(fields["reason"] or ""),
        error=str(fields["error"] or ""),
        traceback="",
        failed_at=float(failed_at) if isinstance(failed_at, (int, float)) else 0.0,
        raw=start,
        whole_size=size,
    )


def waiting_task(head: bytes, size: int, due_ms: int | None) -> WaitingTask:
    due = keys.utc_from_ms(due_ms)
    if len(head) == size:  # read whole
        try:
            message = TaskMessage.decode(head)
        except MalformedTask:
            return WaitingTask(None, text(head)[:2000], due, due_ms)
        arguments = json.dumps(message.args, ensure_ascii=False)
        if message.kwargs:
            arguments += " " + json.dumps(message.kwargs, ensure_ascii=False)
        return WaitingTask(
            message,
            text(head)[:2000],
            due,
            due_ms,
            message.id,
            message.task,
            message.priority,
            _cut(arguments, len(arguments) > ARGUMENTS_SHOWN),
        )
    # A payload's fields come in a fixed order (messages.py): its id, priority, task and
    # queue, then its arguments.
    start = _start_text(head)
    task_id, task, priority = (_field(start, name) for name in ("id", "task", "priority"))
    arguments_at = start.find('"args":')
    readable = isinstance(task_id, str) and isinstance(task, str) and isinstance(priority, int)
    if not readable or arguments_at < 0:
        return WaitingTask(None, start, due, due_ms, whole_size=size)
    arguments = _cut(start[arguments_at + len('"args":') :])
    return WaitingTask(None, start, due, due_ms, task_id, task, priority, arguments, size)


# A limited payload's head, as lua/lib/limits.lua matches it (no string in the limits
# holds a bracket: limits.to_json).
_LIMITS_HEAD = re.compile(rb'^\{"id":"[0-9a-f]+","priority":-?\d+,"limits":(\[(?:\[[^][]*\],?)*\])')


def rate_keys(head: bytes) -> list[str]:
    """The keys of the rates a payload (whole or its head) is limited by ([] if unreadable)."""
    found = _LIMITS_HEAD.match(head)
    try:
        limits = json.loads(found[1]) if found else []
    except ValueError:
        return []
    return [
        limit[1]
        for limit in limits
        if isinstance(limit, list) and len(limit) > 1 and limit[0] == "r"
        if isinstance(limit[1], str)
    ]


def _start_text(head: bytes) -> str:
    """The start of an entry as text, without the character that the cut split."""
    return codecs.getincrementaldecoder("utf-8")("backslashreplace").decode(head)


def _field(piece: str, name: str) -> Any:
    """The value of the field ``name`` (its first ``"name":``: quotes inside a string are
    escaped) in a piece of a JSON object; a string the piece cuts short comes cut, anything
    else missing or cut is ``None``."""
    at = piece.find(f'"{name}":')
    if at < 0:
        return None
    start = at + len(name) + 3
    while piece[start : start + 1] == " ":  # Python's JSON puts a space after the colon
        start += 1
    try:
        return json.JSONDecoder().raw_decode(piece, start)[0]
    except ValueError:  # cut short
        return _cut_string(piece[start:])


def _cut_string(text: str) -> str | None:
    """The start of the JSON string that ``text`` begins and does not end, or ``None``."""
    if not text.startswith('"'):
        return None
    for end in range(len(text), max(len(text) - 6, 0), -1):  # the cut may split an escape
        try:
            found = json.loads(text[:end] + '"')
        except ValueError:
            continue
        return found if isinstance(found, str) else None
    return None


def _cut(text: str, cut: bool = True) -> str:
    """``text`` cut to :data:`ARGUMENTS_SHOWN` characters and "…" (unless not ``cut``)."""
    return text[:ARGUMENTS_SHOWN] + "…" if cut else text


def pairs(reply: list[bytes]) -> dict[bytes, bytes]:
    """A script's flat list of pairs as a dict."""
    return dict(zip(reply[::2], reply[1::2], strict=True))


def requeueable(entry: bytes) -> TaskMessage | None:
    try:
        data = json.loads(entry)
        return TaskMessage.decode(data["task"]) if isinstance(data, dict) else None
    except (MalformedTask, ValueError, KeyError, TypeError, RecursionError):
        return None


def server_ms(seconds: Any, micros: Any) -> int:
    return int(seconds) * 1000 + int(micros) // 1000


def ticks(stored: Any) -> dict[str, int]:
    """Schedules' ticks by name, those that are integers."""
    ticks = {name: integer(value) for name, value in fields_of(stored).items()}
    return {name: tick for name, tick in ticks.items() if tick is not None}


def fetched(reply: list[Any]) -> Fetched:
    payload, position, wait, recorded, now, score, read = reply
    return Fetched(
        payload=payload,
        position=int(position),
        next_ms=int(wait),
        recorded=bool(recorded),
        now_ms=int(now),
        score=score if isinstance(score, bytes) else str(score).encode(),
        read_ms=int(read),
    )
