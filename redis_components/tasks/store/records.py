"""The store's values: what its calls take and return (``TaskStore`` parses them from
raw replies). When an enqueued task is due (``Due``) is the message's (``messages.py``)."""

from __future__ import annotations

import datetime
import enum
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..messages import Due, TaskMessage


@dataclass(frozen=True)
class Attempt:
    """A running attempt of a task: "<start ms> <worker>" in the running hash (attempts.lua)."""

    started_ms: int | None  # the server's ms (None if unreadable)
    worker_id: str

    @classmethod
    def all_of(cls, held: bytes) -> list[Attempt]:
        """The attempts of a running task, oldest first: one, unless copies run at once."""
        found = []
        for attempt in held.split(b"|"):
            begun, _, worker_id = attempt.decode("utf-8", "replace").partition(" ")
            found.append(cls(int(begun) if begun.isdecimal() else None, worker_id))
        return found


@dataclass(frozen=True)
class RunningEntry:
    """A task running now: its id, one attempt of it, and its task's name."""

    task_id: str
    attempt: Attempt
    task: str  # "" once its result, which names it, expired


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


@dataclass(frozen=True, kw_only=True)
class Progress:
    """How far a running task says it is (``context.set_progress()``): ``done`` of
    ``total`` (``None``: unknown), a ``note``, and ``at``, when it said so (the server's
    clock, an aware UTC datetime). It stays across retries until a run says otherwise."""

    done: float
    total: float | None
    note: str
    at: datetime.datetime

    @property
    def fraction(self) -> float | None:
        """``done / total`` (at most 1), ``None`` without a total."""
        return None if self.total is None else min(self.done / self.total, 1.0)


@dataclass(frozen=True)
class TaskRecord:
    """What Redis keeps of one task (times: aware UTC datetimes, by the server's clock)."""

    id: str
    task: str  # the registered name of a @redis_task, or a Django @task's module path
    queue: str
    priority: int
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str | None  # a Django @task's Tasks backend alias (None for a @redis_task)
    status: TaskStatus
    enqueued_at: datetime.datetime | None
    run_after: datetime.datetime | None
    started_at: datetime.datetime | None
    last_attempted_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    worker_ids: list[str]  # the worker of each attempt
    errors: list[AttemptError]  # of each failed attempt (a worker that died: WorkerCrashed)
    return_value: Any = field(default=None, repr=False)  # a SUCCESSFUL task's (else None)
    # What the task saved last, else what it was enqueued with ({}: none).
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    progress: Progress | None = field(default=None, repr=False)  # what it said last
    trace: str = field(default="", repr=False)  # an attempt's context kept (tracing.py)

    @property
    def attempts(self) -> int:
        return len(self.worker_ids)


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker and the seconds until its lease runs out (negative: expired)."""

    id: str
    host: str
    pid: int | None
    queues: list[str]
    started_at: float | None
    lease_left: float
    problem: str = ""  # what could not be read of its description ("" when all could)
    threads: int = 1  # the tasks it runs at once (rc_worker --threads)


@dataclass(frozen=True)
class DeadLetter:
    """A task that will not run again unless requeued, and why."""

    queue: str
    task: str
    reason: str
    error: str
    traceback: str
    failed_at: float
    raw: str  # what can be shown of the entry
    readable: bool = True  # False for an entry this app did not write
    whole_size: int = 0  # read in part (a list page): the entry's length in bytes; else 0


@dataclass(frozen=True)
class WaitingTask:
    """A task waiting in a queue: ready, or delayed until ``due``. Its ``task_id``,
    ``task``, ``priority`` and ``arguments`` are read whether or not it was read whole."""

    message: TaskMessage | None  # None: not a task ("" task_id), or read in part
    shown: str  # what can be shown of it
    due: datetime.datetime | None  # None when no datetime holds due_ms (past the year 9999)
    due_ms: int | None = None  # a delayed task's due time (epoch ms); None: infinite score
    task_id: str = ""
    task: str = ""
    priority: int = 0
    arguments: str = ""  # as JSON, cut to ARGUMENTS_SHOWN characters
    whole_size: int = 0  # read in part (a list page): its length in bytes
    waits_on: str = ""  # the key of the limit that holds it back (a permit's, or a rate's)
    waits_for: Literal["", "concurrency", "rate"] = ""


@dataclass(frozen=True, kw_only=True)
class Adding:
    """A task to add to its queue, as the enqueue scripts take it."""

    message: TaskMessage
    payload: str
    due: Due
    limit: int  # the queue's most waiting tasks (0: unbounded), whole
    shares: int  # how many partitions share that limit
    unique_key: str  # "": not unique
    unique_ms: int

    @property
    def share(self) -> int:
        """What the partition it goes to holds of its queue's limit (rounded up)."""
        return -(-self.limit // self.shares)


@dataclass(frozen=True, kw_only=True)
class Enqueued:
    at_ms: int  # the server's time of the enqueue
    duplicate_of: str | None = None  # an equal task enqueued within its unique window


class LogLine:
    """A log record to write once: ``LogLine(logger.info, "Task %s done", name)()``
    writes it; calling it again writes nothing."""

    __slots__ = ("_write",)

    def __init__(self, log: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        self._write: Callable[[], None] | None = functools.partial(log, *args, **kwargs)

    def __call__(self) -> None:
        write, self._write = self._write, None
        if write is not None:
            write()


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """A task as a worker took it (:meth:`WorkerStore.delivery`), passed whole to what runs
    it and says how it ended."""

    position: int  # 1-based index of its lane among the worker's (WorkerStore.queue_at)
    queue: str  # the queue of that lane
    payload: bytes  # exactly as taken
    # The take's time (the server's ms): the attempt. Its outcome is recorded only while
    # this is still the task's current attempt (not once it was recovered and taken again).
    attempt: int


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a task a worker took has ended, to record with the worker's next fetch."""

    delivery: Delivery  # what ended: its lane, its payload and its attempt
    task_id: str  # "" for a payload that is not a task (no result to write)
    kind: Literal["ok", "retry", "defer", "bury", "cancel"]
    data: str = ""  # "ok": the return value (JSON); "retry", "bury": the error (JSON)
    again: str | bytes = ""  # "retry", "defer": the payload to run again
    delay_ms: int = 0  # "retry", "defer": in how many ms
    dead_entry: str = ""  # "bury": the dead-letter entry
    seconds: float = 0.0  # how long it ran
    first: bool = False  # its first attempt for sure (TaskMessage.first_attempt)
    metadata: str = ""  # its metadata (JSON) to save with it, when the run changed it
    progress: str = ""  # its progress (JSON, no "at") not saved yet, to save with it
    waited_ms: int | None = None  # with METRICS, a first attempt's wait (Job.waited_ms)
    # The log line of how it ended: the worker writes it while the store records the
    # outcome (WorkerStore.take), so that the line costs the loop no time.
    said: LogLine | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class Fetched:
    payload: bytes | None  # the task taken, never decoded
    position: int  # 1-based, among the worker's lanes; -1: the worker is unregistered
    # When a take may find a task that none is ready for now, in ms: the next delayed
    # task's due time (a take that moved them), or the first start a limit booked for a
    # task it set aside. 0: take again now; -1: none is known to come (a wake-up tells).
    next_ms: int
    recorded: bool  # the outcome sent was recorded (False: the task had been recovered)
    now_ms: int  # the server's time (as the worker reckoned it, or read)
    score: bytes = b"0"  # the task's score (its rank) in its queue
    read_ms: int = 0  # the server's clock as the call read it (0: it read none)


# The upper bounds (seconds) of the task duration histogram's buckets, for metrics.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


# And of the queue wait histogram's: a wait is longer than a run, when workers fall behind.
WAIT_BUCKETS = (*DURATION_BUCKETS, 300.0, 900.0, 3600.0)


def duration_bucket(seconds: float, buckets: tuple[float, ...] = DURATION_BUCKETS) -> str:
    """The histogram bucket (its upper bound, as Prometheus writes it) of a duration."""
    return next((f"{bound:g}" for bound in buckets if seconds <= bound), "+Inf")


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    expired: list[bytes]  # workers whose lease ran out (bytes: anything may be written there)
    leader: bool  # this worker holds the scheduler's lease
    terminate: list[str]  # the ids of its running tasks that are to be terminated
    registered: bool = False  # it registered the worker: a first beat, or taken for dead


def dead_entry(payload: str | bytes, queue: str, reason: str, error: str, traceback: str) -> str:
    """A dead-letter entry: the payload as it was queued (as text), and why it stopped."""
    if isinstance(payload, bytes):
        payload = payload.decode("utf-8", "backslashreplace")
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


# A termination request waits this long for the worker running the task to act on it.
TERMINATE_WAIT_MS = 3_600_000


@dataclass(frozen=True)
class LimitUse:
    """A concurrency limit in use: how many tasks hold one of its permits (running, or
    handed one while they wait in their queue) and how many wait."""

    key: str
    limit: int
    held: int
    waiting: int


@dataclass(frozen=True, kw_only=True)
class QueueCounts:
    ready: int = 0
    delayed: int = 0
    dead: int = 0
    in_progress: int = 0
    on_limits: int = 0  # waiting for a permit of a concurrency limit (not in ready)

    def __add__(self, other: QueueCounts) -> QueueCounts:
        """The counts of two homes (partitions) of a queue, added up."""
        return QueueCounts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @property
    def waiting(self) -> int:
        """What counts towards ``TASK_QUEUE_LIMITS``: ready, delayed and on limits."""
        return self.ready + self.delayed + self.on_limits


@dataclass(frozen=True, kw_only=True)
class Glimpse:
    """An entry of a queue or of its dead letters, read in part (see lua/entry_heads.lua)."""

    start: bytes  # the whole entry when ``len(start) == size``
    end: bytes
    size: int
    score: bytes  # b"" for a dead letter


@dataclass(frozen=True, kw_only=True)
class TickClaim:
    """A due tick of a schedule to claim, with the task it enqueues when ``run``."""

    schedule: str
    tick: int
    following: int  # the tick after it
    run: bool  # False: only move on (missed ticks the schedule skips)
    message: TaskMessage
    payload: str


@dataclass(frozen=True, kw_only=True)
class Move:
    """A task of the registry's home (an earlier release's) moving into its queue's home."""

    old_id: str
    old_entry: bytes  # the member (or dead letter) it was there
    task_id: str  # its id in its new home
    entry: str  # the member (or dead letter) it is there
    into: str  # the ready or delayed ZSET, or the dead-letter list, it goes in
    wakes: str  # its queue's ready ZSET there: the wake-up channel of its workers
    score: float | None  # its score there (None: a dead letter)
    fields: dict[str, str]  # its result's fields ({} when its result was not kept)
    keep_ms: int  # how long its result is kept yet (<= 0: no expiry, or none kept)
    unique_key: str  # the key that keeps it unique there ("" when it is not)
    unique_ms: int
