"""What the task queues hold now: counts, workers and dead letters (read only).

Everything here reads data that any client with access to Redis may have written, so
it shows what it can and marks what it cannot decode; it never fails a page or a
command because of one bad entry.
"""

from __future__ import annotations

import codecs
import datetime
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import keys
from ..conf import conf
from .backend import queues_in_use
from .messages import MalformedTask, TaskMessage, validate_queue
from .store import TaskStore, WorkerInfo, queue_limit

UNREADABLE = "(unreadable)"
# A list page reads at most this much of the start of an entry (a payload, a dead
# letter): enough for a task's names, never megabytes of arguments.
GLIMPSE_BYTES = 4096
# ... and of a dead letter's end: its traceback (at most MAX_TRACEBACK characters, mostly
# ASCII), which follows its reason and error.
DEAD_LETTER_END_BYTES = 32_768
# The most characters of a task's arguments that a list page shows.
ARGUMENTS_SHOWN = 300


@dataclass(frozen=True)
class QueueStats:
    """How many tasks of one queue are in each state (a snapshot, not a transaction)."""

    name: str
    ready: int
    delayed: int
    in_progress: int
    dead: int
    limit: int


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def workers() -> list[WorkerInfo]:
    """Every registered worker, live or not yet recovered, by id."""
    return TaskStore().workers()


def queue_names(extra: Iterable[str] = ()) -> list[str]:
    """Every queue known: served by a worker, used by a task, limited in the settings."""
    return _known_queues(workers(), extra)


def _known_queues(registered: list[WorkerInfo], extra: Iterable[str] = ()) -> list[str]:
    names = TaskStore().known_queue_names(extra)
    names.update(queues_in_use())
    names.update(conf.TASK_QUEUE_LIMITS)
    for worker in registered:
        names.update(worker.queues)
    return sorted(names)


def queue_stats(queues: Iterable[str] | None = None) -> list[QueueStats]:
    """Ready, delayed, in-progress and dead counts of each queue (default: all known)."""
    registered = workers()
    names = list(_known_queues(registered) if queues is None else queues)
    serving = {name: [w.id for w in registered if name in w.queues] for name in names}
    counts = TaskStore().queue_counts(serving)
    return [
        QueueStats(
            name,
            counts[name].ready,
            counts[name].delayed,
            counts[name].in_progress,
            counts[name].dead,
            queue_limit(name),
        )
        for name in names
    ]


@dataclass(frozen=True)
class DeadLetter:
    """A task that will not run again unless requeued, and why.

    ``readable`` is False for an entry that is not one this app wrote; ``raw`` then
    holds what could be shown of it.
    """

    queue: str
    task: str
    reason: str
    error: str
    traceback: str
    failed_at: float
    raw: str
    readable: bool = True
    whole_size: int = 0  # read in part (a list page): the entry's length in bytes; else 0


def dead_letters(queue: str, count: int = 100) -> list[DeadLetter]:
    """The newest ``count`` dead letters of ``queue``, newest last."""
    validate_queue(queue)
    return [read_dead_letter(queue, e) for e in TaskStore().dead_letter_entries(queue, -count, -1)]


def read_dead_letter(queue: str, entry: bytes) -> DeadLetter:
    """What can be read of one dead-letter entry (an unreadable one is marked, never raised)."""
    shown = _text(entry)
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


def dead_letter_page(queue: str, offset: int = 0, count: int = 50) -> tuple[int, list[DeadLetter]]:
    """How many dead letters ``queue`` holds, and ``count`` of them from ``offset``, newest
    first (one round trip; never the whole list). A long entry is read in part: its task
    cut to :data:`ARGUMENTS_SHOWN` characters, no traceback, ``whole_size`` set."""
    validate_queue(queue)
    total, found = TaskStore().glimpses(
        queue,
        "dead",
        -offset - count,
        -offset - 1,
        start_bytes=GLIMPSE_BYTES,
        end_bytes=DEAD_LETTER_END_BYTES,
    )
    return total, [
        _glimpsed_dead_letter(queue, glimpse.start, glimpse.end, glimpse.size)
        for glimpse in reversed(found)
    ]


def _glimpsed_dead_letter(queue: str, head: bytes, tail: bytes, size: int) -> DeadLetter:
    if len(head) == size:  # read whole
        return read_dead_letter(queue, head)
    start, end = _start_text(head), _text(tail)
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


def dead_letter_entry(queue: str, index: int) -> bytes | None:
    """The raw dead letter at ``index`` (0: the newest), or ``None``."""
    validate_queue(queue)
    return TaskStore().dead_letter_at(queue, index)


@dataclass(frozen=True)
class WaitingTask:
    """A task waiting in a queue: ready, or delayed until ``due``.

    ``message`` is ``None`` for a payload that is not a task (``shown`` is what can be
    shown of it, and ``task_id`` is ""), or that a list page read in part (``whole_size``
    is then its length in bytes); ``task_id``, ``task``, ``priority`` and ``arguments``
    (as JSON, cut to :data:`ARGUMENTS_SHOWN` characters) are read either way.

    A delayed task's ``due_ms`` is its due time in epoch ms; ``due`` is ``None`` when no
    datetime can hold it (past the year 9999, as an older release could store it), both
    are ``None`` for an infinite score (not one of ours).
    """

    message: TaskMessage | None
    shown: str
    due: datetime.datetime | None
    due_ms: int | None = None
    task_id: str = ""
    task: str = ""
    priority: int = 0
    arguments: str = ""
    whole_size: int = 0


def waiting_tasks(
    queue: str, state: str, offset: int = 0, count: int = 50
) -> tuple[int, list[WaitingTask]]:
    """How many tasks wait in ``queue`` as ``state`` ("ready" or "delayed"), and ``count``
    of them from ``offset`` in the order they will run (one round trip)."""
    validate_queue(queue)
    if state not in ("ready", "delayed"):
        raise ValueError(f"state must be 'ready' or 'delayed', not {state!r}")
    total, found = TaskStore().glimpses(
        queue,
        "ready" if state == "ready" else "delayed",
        offset,
        offset + count - 1,
        start_bytes=GLIMPSE_BYTES,
    )
    waiting = []
    for glimpse in found:
        score = float(glimpse.score)
        due_ms = int(score) if state == "delayed" and math.isfinite(score) else None
        waiting.append(_waiting_task(glimpse.start, glimpse.size, due_ms))
    return total, waiting


def _waiting_task(head: bytes, size: int, due_ms: int | None) -> WaitingTask:
    due = keys.utc_from_ms(due_ms)
    if len(head) == size:  # read whole
        try:
            message = TaskMessage.decode(head)
        except MalformedTask:
            return WaitingTask(None, _text(head)[:2000], due, due_ms)
        arguments = json.dumps(message.args, ensure_ascii=False)
        if message.kwargs:
            arguments += " " + json.dumps(message.kwargs, ensure_ascii=False)
        return WaitingTask(
            message,
            _text(head)[:2000],
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
    if not (
        isinstance(task_id, str)
        and isinstance(task, str)
        and isinstance(priority, int)
        and arguments_at >= 0
    ):
        return WaitingTask(None, start, due, due_ms, whole_size=size)
    arguments = _cut(start[arguments_at + len('"args":') :])
    return WaitingTask(None, start, due, due_ms, task_id, task, priority, arguments, size)


def _start_text(head: bytes) -> str:
    """The start of an entry as text, without the character that the cut split."""
    return codecs.getincrementaldecoder("utf-8")("backslashreplace").decode(head)


def _field(piece: str, name: str) -> Any:
    """The value of the field ``name`` in a piece of a JSON object; a string that the piece
    cuts short comes cut, anything else missing or cut is ``None``.

    The first ``"name":`` is the field's: inside a JSON string, quotes are escaped.
    """
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
    """The start of the JSON string that ``text`` begins and does not end (None if it
    does not begin one)."""
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
    """``text`` as a list page shows it: at most :data:`ARGUMENTS_SHOWN` characters, and
    "…" when it goes on."""
    return text[:ARGUMENTS_SHOWN] + "…" if cut else text


@dataclass(frozen=True)
class TaskRun:
    """A task a worker is running now, since ``started_at``."""

    task_id: str
    worker_id: str
    started_at: datetime.datetime | None
    task: str  # its name, "" when its result (which names it) has expired


def running_tasks() -> list[TaskRun]:
    """Every task running now, by worker (two round trips)."""
    found = []
    for entry in TaskStore().running_records():
        started = keys.utc_from_ms(entry.attempt.started_ms)
        found.append(TaskRun(entry.task_id, entry.attempt.worker_id, started, entry.task))
    return sorted(found, key=lambda running: running.worker_id)


@dataclass(frozen=True)
class Minute:
    """What a queue's workers finished in one minute."""

    at: datetime.datetime
    processed: int = 0
    failed: int = 0
    retried: int = 0


def throughput(queues: Iterable[str], hours: int = 6) -> dict[str, list[Minute]]:
    """Per queue, the last ``hours`` hours minute by minute, oldest first (two round trips)."""
    names = list(queues)
    now_minute, recorded = TaskStore().minute_counts(names, hours)
    found = {}
    first = now_minute - hours * 60 + 1
    for name in names:
        counts = recorded[name]
        found[name] = [
            Minute(
                keys.utc_from_ms(minute * 60_000) or datetime.datetime.min,
                counts.get(minute, {}).get("processed", 0),
                counts.get(minute, {}).get("failed", 0),
                counts.get(minute, {}).get("retried", 0),
            )
            for minute in range(first, now_minute + 1)
        ]
    return found
