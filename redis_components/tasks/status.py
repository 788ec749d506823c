"""What the task queues hold now: counts, workers and dead letters (read only).

Everything here reads data that any client with access to Redis may have written, so
it shows what it can and marks what it cannot decode (the store's ``replies`` decode
it); it never fails a page or a command because of one bad entry.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from .. import keys
from ..conf import conf
from .backend import queues_in_use
from .messages import validate_queue
from .store import DeadLetter as DeadLetter
from .store import LimitUse as LimitUse
from .store import Progress, TaskStore, home_roles, queue_limit
from .store import QueueCounts as QueueCounts
from .store import WaitingTask as WaitingTask
from .store import WorkerInfo as WorkerInfo
from .store import read_dead_letter as read_dead_letter


@dataclass(frozen=True)
class QueueStats:
    """How many tasks of one queue are in each state (a snapshot, not a transaction)."""

    name: str
    ready: int
    delayed: int
    in_progress: int
    dead: int
    limit: int
    # Waiting for a permit of a concurrency limit, out of the ready ones (docs/limits.md).
    on_limits: int = 0


def workers() -> list[WorkerInfo]:
    """Every registered worker, live or not yet recovered, by id."""
    return TaskStore().workers()


def queue_names(extra: Iterable[str] = ()) -> list[str]:
    """Every queue known: served by a worker, used by a task, limited in the settings."""
    return _known_queues(workers(), extra)


def _known_queues(registered: list[WorkerInfo], extra: Iterable[str] = ()) -> list[str]:
    names = TaskStore().known_queue_names(extra)
    names.update(queues_in_use(), conf.TASK_QUEUE_LIMITS, *(w.queues for w in registered))
    return sorted(names)


def queue_stats(queues: Iterable[str] | None = None) -> list[QueueStats]:
    """The counts of each of ``queues`` (default: all known), state by state."""
    registered = workers()
    names = list(_known_queues(registered) if queues is None else queues)
    serving = {name: [w.id for w in registered if name in w.queues] for name in names}
    counts = TaskStore().queue_counts(serving)
    return [
        QueueStats(name=name, limit=queue_limit(name), **asdict(counts[name])) for name in names
    ]


def oldest_ready(queues: Iterable[str]) -> dict[str, float | None]:
    """How long, in seconds, the oldest ready task of each of ``queues`` has waited to
    start (``None``: none is ready), by the server's clock: across its partitions, the
    oldest. One command per queue and partition, in one round trip per node. Since when
    a task counts as ready is docs/operations.md's ("Queue health")."""
    names = [validate_queue(name) for name in queues]
    found = TaskStore().ready_ages(names)
    return {
        name: max((age for _, age in found[name] if age is not None), default=None)
        for name in names
    }


@dataclass(frozen=True)
class HomeStats:
    """A queue's tasks in one of its homes: partition ``partition`` of ``of`` (its own
    partitions, then those of another count still in use, where they are left), on
    ``node``. ``bound`` is the partition's share of ``TASK_QUEUE_LIMITS`` (0: none),
    which ``counts.waiting`` counts towards."""

    partition: int
    of: int
    node: str
    counts: QueueCounts
    bound: int
    oldest_ready: float | None = None  # seconds the oldest ready task here has waited


def home_stats(queue: str) -> list[HomeStats]:
    """Where ``queue``'s tasks are: its counts and its oldest ready task's wait in each of
    its homes, partition by partition, with the node each is on (two round trips per
    node)."""
    validate_queue(queue)
    serving = [w.id for w in workers() if queue in w.queues]
    roles = home_roles(queue)
    limit = queue_limit(queue)
    store, found = TaskStore(), []
    ages = dict(store.ready_ages([queue])[queue])
    for head, counts in store.home_counts({queue: serving})[queue]:
        partition, of = roles.get(head, (0, 0))
        bound = -(-limit // of) if partition else 0  # (as an enqueue there shares it)
        node = store.node_of(head)
        found.append(HomeStats(partition, of, node, counts, bound, ages.get(head)))
    return found


def limits_in_use(count: int = 100) -> tuple[int, list[LimitUse]]:
    """How many concurrency limits tasks hold or wait on now, and the first ``count``."""
    return TaskStore().limits_in_use(count)


def dead_letters(queue: str, count: int = 100) -> list[DeadLetter]:
    """The newest ``count`` dead letters of ``queue``, newest last."""
    validate_queue(queue)
    return TaskStore().dead_letters(queue, -count, -1)


def dead_letter_page(queue: str, offset: int = 0, count: int = 50) -> tuple[int, list[DeadLetter]]:
    """How many dead letters ``queue`` holds, and ``count`` of them from ``offset``, newest
    first (one round trip; never the whole list). A long entry is read in part: its task
    cut to ``ARGUMENTS_SHOWN`` characters, no traceback, ``whole_size`` set."""
    validate_queue(queue)
    total, found = TaskStore().dead_letter_glimpses(queue, -offset - count, -offset - 1)
    return total, found[::-1]


def dead_letter_entry(queue: str, index: int) -> bytes | None:
    """The raw dead letter at ``index`` (0: the newest), or ``None``."""
    validate_queue(queue)
    return TaskStore().dead_letter_at(queue, index)


def waiting_tasks(
    queue: str, state: str, offset: int = 0, count: int = 50
) -> tuple[int, list[WaitingTask]]:
    """How many tasks wait in ``queue`` as ``state``, and ``count`` of them from
    ``offset``: "ready" or "delayed" in the order they will run (one round trip; a delayed
    task set aside on a rate says which), "on_limits" for those waiting for a concurrency
    limit's permit, key by key (each says which)."""
    validate_queue(queue)
    if state == "on_limits":
        return TaskStore().on_limits(queue, offset, count)
    if state not in ("ready", "delayed"):
        raise ValueError(f"state must be 'ready', 'delayed' or 'on_limits', not {state!r}")
    return TaskStore().waiting(queue, "ready" if state == "ready" else "delayed", offset, count)


def held_back(task_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Of ``task_ids``, the tasks waiting to run that a limit holds back: task id ->
    ("concurrency", the key whose permit it waits for) or ("rate", the rate's key)."""
    return TaskStore().held_back(list(task_ids))


@dataclass(frozen=True)
class TaskRun:
    """A task a worker is running now, since ``started_at``."""

    task_id: str
    worker_id: str
    started_at: datetime.datetime | None
    task: str  # its name, "" when its result (which names it) has expired
    progress: Progress | None = None  # what it said last of how far it is (docs/progress.md)


def running_tasks() -> list[TaskRun]:
    """Every task running now, by worker, with its progress (three round trips)."""
    store = TaskStore()
    entries = store.running_records()
    said = store.task_progress([entry.task_id for entry in entries])
    found = [
        TaskRun(
            entry.task_id,
            entry.attempt.worker_id,
            keys.utc_from_ms(entry.attempt.started_ms),
            entry.task,
            progress,
        )
        for entry, progress in zip(entries, said, strict=True)
    ]
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
    now_minute, recorded = TaskStore().minute_counts(list(queues), hours)
    return {
        name: [
            Minute(
                keys.utc_from_ms(minute * 60_000) or datetime.datetime.min,
                *(
                    counts.get(minute, {}).get(kind, 0)
                    for kind in ("processed", "failed", "retried")
                ),
            )
            for minute in range(now_minute - hours * 60 + 1, now_minute + 1)
        ]
        for name, counts in recorded.items()
    }
