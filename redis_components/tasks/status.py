"""What the task queues hold now: counts, workers and dead letters (read only).

Everything here reads data that any client with access to Redis may have written, so
it shows what it can and marks what it cannot decode; it never fails a page or a
command because of one bad entry.
"""

from __future__ import annotations

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
    running_key,
    tasks_client,
    workers_key,
)
from .messages import validate_queue
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
    return [_dead_letter(queue, entry) for entry in entries]


def _dead_letter(queue: str, entry: bytes) -> DeadLetter:
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
