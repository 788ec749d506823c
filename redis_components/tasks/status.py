"""What the task queues hold now: counts, workers and dead letters (read only).

Everything here reads data that any client with access to Redis may have written, so
it shows what it can and marks what it cannot decode; it never fails a page or a
command because of one bad entry.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..conf import conf
from .engine import (
    dead_key,
    delayed_key,
    known_queue_names,
    leases_key,
    queue_limit,
    raw,
    ready_key,
    result_key,
    running_key,
    running_tasks_key,
    stats_key,
    tasks_client,
    workers_key,
)
from .messages import MalformedTask, TaskMessage, validate_queue
from .registry import queues_in_use

UNREADABLE = "(unreadable)"


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
    """A registered worker and the seconds until its lease runs out (negative: expired).

    ``problem`` says what could not be read of its description ("" when all could).
    """

    id: str
    host: str
    pid: int | None
    queues: list[str]
    started_at: float | None
    lease_left: float
    problem: str = ""


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def workers() -> list[WorkerInfo]:
    """Every registered worker, live or not yet recovered, by id."""
    pipe = tasks_client().pipeline(transaction=False)
    raw(pipe, "HGETALL", workers_key())
    raw(pipe, "ZRANGE", leases_key(), 0, -1, "WITHSCORES", withscores=True)
    pipe.time()
    described, leases, (seconds, micros) = pipe.execute()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    expiry = {_text(member): float(score) for member, score in leases}
    found = []
    for raw_id, raw_info in described.items():
        worker_id = _text(raw_id)
        lease = expiry.get(worker_id)
        lease_left = (lease - now_ms) / 1000 if lease is not None else -math.inf
        found.append(_worker(worker_id, raw_info, lease_left))
    return sorted(found, key=lambda worker: worker.id)


def _worker(worker_id: str, raw_info: bytes, lease_left: float) -> WorkerInfo:
    try:
        info = json.loads(raw_info)
    except (ValueError, RecursionError):
        info = None
    if not isinstance(info, dict):
        return WorkerInfo(worker_id, "", None, [], None, lease_left, "unreadable description")
    problems = []
    queues = info.get("queues")
    if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
        queues, problems = [], ["queues"]
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        pid = None
        problems.append("pid")
    started = info.get("started_at")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        started = None
        problems.append("start time")
    host = info.get("host")
    return WorkerInfo(
        worker_id,
        host if isinstance(host, str) else "",
        pid,
        queues,
        float(started) if started is not None else None,
        lease_left,
        f"unreadable {', '.join(problems)}" if problems else "",
    )


def queue_names(extra: Iterable[str] = ()) -> list[str]:
    """Every queue known: served by a worker, used by a task, limited in the settings."""
    return _known_queues(workers(), extra)


def _known_queues(registered: list[WorkerInfo], extra: Iterable[str] = ()) -> list[str]:
    names = known_queue_names(extra)
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
    pipe = tasks_client().pipeline(transaction=False)
    for name in names:
        pipe.zcard(ready_key(name))
        pipe.zcard(delayed_key(name))
        pipe.llen(dead_key(name))
        for worker_id in serving[name]:
            pipe.zcard(running_key(worker_id, name))
    counts = iter(pipe.execute())
    stats = []
    for name in names:
        ready, delayed, dead = next(counts), next(counts), next(counts)
        in_progress = sum(next(counts) for _ in serving[name])
        stats.append(QueueStats(name, ready, delayed, in_progress, dead, queue_limit(name)))
    return stats


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


def dead_letters(queue: str, count: int = 100) -> list[DeadLetter]:
    """The newest ``count`` dead letters of ``queue``, newest last."""
    validate_queue(queue)
    entries = raw(tasks_client(), "LRANGE", dead_key(queue), -count, -1)
    return [read_dead_letter(queue, entry) for entry in entries]


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
    first (one round trip; never the whole list)."""
    validate_queue(queue)
    pipe = tasks_client().pipeline(transaction=False)
    pipe.llen(dead_key(queue))
    raw(pipe, "LRANGE", dead_key(queue), -offset - count, -offset - 1)
    total, entries = pipe.execute()
    return int(total), [read_dead_letter(queue, entry) for entry in reversed(entries)]


def dead_letter_entry(queue: str, index: int) -> bytes | None:
    """The raw dead letter at ``index`` (0: the newest), or ``None``."""
    validate_queue(queue)
    found: bytes | None = raw(tasks_client(), "LINDEX", dead_key(queue), -index - 1)
    return found


@dataclass(frozen=True)
class WaitingTask:
    """A task waiting in a queue: ready, or delayed until ``due``.

    ``message`` is ``None`` for a payload that is not a task (``shown`` is what can be
    shown of it).
    """

    message: TaskMessage | None
    shown: str
    due: datetime.datetime | None


def waiting_tasks(
    queue: str, state: str, offset: int = 0, count: int = 50
) -> tuple[int, list[WaitingTask]]:
    """How many tasks wait in ``queue`` as ``state`` ("ready" or "delayed"), and ``count``
    of them from ``offset`` in the order they will run (one round trip)."""
    validate_queue(queue)
    key = {"ready": ready_key, "delayed": delayed_key}[state](queue)
    pipe = tasks_client().pipeline(transaction=False)
    pipe.zcard(key)
    raw(pipe, "ZRANGE", key, offset, offset + count - 1, "WITHSCORES", withscores=True)
    total, members = pipe.execute()
    found = []
    for payload, score in members:
        try:
            message: TaskMessage | None = TaskMessage.decode(payload)
        except MalformedTask:
            message = None
        due = _datetime(int(score)) if state == "delayed" else None
        found.append(WaitingTask(message, _text(payload)[:2000], due))
    return int(total), found


@dataclass(frozen=True)
class RunningTask:
    """A task a worker is running now, since ``started_at``."""

    task_id: str
    worker_id: str
    started_at: datetime.datetime | None
    task: str  # its name, "" when its result (which names it) has expired


def running_tasks() -> list[RunningTask]:
    """Every task running now, by worker (two round trips)."""
    client = tasks_client()
    attempts = raw(client, "HGETALL", running_tasks_key())
    ids = [task_id.decode("utf-8", "replace") for task_id in attempts]
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        raw(pipe, "HGET", result_key(task_id), "message")
    messages = pipe.execute() if ids else []
    found = []
    for task_id, message in zip(ids, messages, strict=True):
        begun, _, worker_id = attempts[task_id.encode()].decode("utf-8", "replace").partition(" ")
        try:
            name = TaskMessage.decode(message).task if message else ""
        except MalformedTask:
            name = ""
        found.append(RunningTask(task_id, worker_id, _datetime(_int(begun)), name))
    return sorted(found, key=lambda running: running.worker_id)


@dataclass(frozen=True)
class Minute:
    """What a queue's workers finished in one minute."""

    at: datetime.datetime
    processed: int = 0
    failed: int = 0
    retried: int = 0


def throughput(queues: Iterable[str], hours: int = 6) -> dict[str, list[Minute]]:
    """Per queue, the last ``hours`` hours minute by minute, oldest first (one round trip)."""
    names = list(queues)
    client = tasks_client()
    seconds, _ = client.time()
    now_minute = int(seconds) // 60
    hour = now_minute // 60
    pipe = client.pipeline(transaction=False)
    for name in names:
        for h in range(hour - hours, hour + 1):
            raw(pipe, "HGETALL", stats_key(name, h))
    replies = iter(pipe.execute())
    found = {}
    first = now_minute - hours * 60 + 1
    for name in names:
        counts: dict[int, dict[str, int]] = {}
        for _ in range(hours + 1):
            for field_name, value in next(replies).items():
                minute, _, kind = field_name.decode("utf-8", "replace").partition(":")
                number = _int(minute)
                if number is not None and number >= first:
                    counts.setdefault(number, {})[kind] = _int(value) or 0
        found[name] = [
            Minute(
                _datetime(minute * 60_000) or datetime.datetime.min,
                counts.get(minute, {}).get("processed", 0),
                counts.get(minute, {}).get("failed", 0),
                counts.get(minute, {}).get("retried", 0),
            )
            for minute in range(first, now_minute + 1)
        ]
    return found


def _int(value: bytes | str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _datetime(ms: int | None) -> datetime.datetime | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
