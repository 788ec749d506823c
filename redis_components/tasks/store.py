"""The task store: the one place that sends commands on the task system's keys.

:class:`TaskStore` owns every key, every script call and every parse of a raw reply,
and returns the task system's types. Both front doors (our ``@redis_task`` and Django's
Tasks backend) enqueue through :meth:`TaskStore.enqueue`; workers take, finish and
recover tasks through :meth:`~TaskStore.fetch` and :meth:`~TaskStore.recover_worker`;
the operations commands requeue, cancel and purge through it; results, the operations
pages, metrics and schedules read through it (and the schedules claim their ticks).
Each script's KEYS and ARGV are built by one keyword-only function next to nothing
but that script's contract (``*_call``; a test checks them against the scripts'
headers). Nothing else builds a key of the task system or reads a raw reply about it,
and nothing here knows about workers' loops, Django's API or pages.

Keys
----
Every key of the task system shares one hash tag, ``{tasks}``, so that one script,
transaction or move may touch any of them on Redis Cluster (a worker serving several
queues moves a task from whichever is first non-empty into its own in-progress set;
recovery moves tasks between keys of different queues). On a cluster the task system
therefore lives on one shard, as it must for atomic multi-queue moves. With the
default prefix::

    rc:queue:{tasks}:ready:<queue>              ZSET  tasks ready to run, by priority, then age
    rc:queue:{tasks}:delayed:<queue>            ZSET  tasks not due yet, scored by due time (ms)
    rc:queue:{tasks}:dead:<queue>               LIST  dead letters: JSON {task, reason, error, ...}
    rc:queue:{tasks}:running:<worker>:<queue>   ZSET  the tasks a worker has taken, with their score
    rc:queue:{tasks}:running                    HASH  task id -> "<start ms> <worker>" while it runs
    rc:queue:{tasks}:result:<task id>           HASH  the task's result record (see results.py)
    rc:queue:{tasks}:counter                    STR   the enqueue counter (FIFO among equals)
    rc:queue:{tasks}:leases                     ZSET  worker id -> lease expiry (ms)
    rc:queue:{tasks}:workers                    HASH  worker id -> JSON description (queues, pid)
    rc:queue:{tasks}:queues                     SET   every queue a worker has served
    rc:queue:{tasks}:flow:<workflow id>         HASH  a workflow: its steps and their states
    rc:queue:{tasks}:flows:live                 ZSET  running workflows, by creation (ms)
    rc:queue:{tasks}:flows:done                 ZSET  finished workflows kept, by end (ms)

A ready task's score is ``(100 - priority) * 2**44 + 2**43 + n``, ``n`` from the
enqueue counter: one ``ZPOPMIN`` takes the highest priority, and the oldest among
equals, with no polling. Scores stay below 2**53, so they are exact in a double.
Every script that makes a task ready (enqueue, a workflow's creation and release, a
schedule's claim, a dead letter's requeue, the delayed mover) does it through
``lua/lib/queue.lua``, which also reads a payload's id and priority and stamps its
enqueue time (``tests/test_task_store.py`` checks it against :class:`TaskMessage`).

Each queue has its own delayed ZSET (not one for all queues, as in the book) so that
the script moving due tasks to their ready sets gets every key it writes through
``KEYS``. Worker ids contain no ``:``, so the queue name (any validated name) is always
the last part and keys stay unambiguous. Idle workers are woken through a Pub/Sub
channel named like the queue's ready set (channels and keys are separate namespaces).

Results
-------
The enqueue script writes a task's result hash (READY), and the script that records a
finished task (inside :func:`fetch`) writes its outcome. The take cannot write the
result hash, whose key it does not know before it takes the task (a script may only
touch the keys it is given), so it writes the task's current attempt into the
``running`` hash, which readers combine with the result hash. Recovery reads a dead
worker's tasks first, then records their crash in their result hashes.

Delivery
--------
At least once: a task leaves its ready set only by an atomic move into the
in-progress set of a registered worker, and leaves that set only after it ran
(acknowledged, rescheduled for a retry, or dead-lettered, each in one script). If
the worker dies, its lease runs out and a live worker puts its in-progress tasks back
in their queues (see ``worker.py``). A task may therefore run twice after a crash,
never zero times: write tasks to be idempotent. Acknowledgements are fenced: an
outcome is recorded only while the take it is of is the task's current attempt (the
``running`` hash), so an execution whose task was put back and taken again (by any
worker, its own included) can neither acknowledge it nor overwrite the new run's result.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis
from redis import Redis
from redis.client import NEVER_DECODE

from .. import keys, scripts
from ..conf import conf, user_settings
from ..connection import get_client, is_cluster, node_client, text
from ..exceptions import InvalidInput, QueueFull, TaskNotCancellable, TaskNotDurable
from .messages import (
    MAX_PRIORITY,
    FlowStep,
    MalformedTask,
    TaskMessage,
    flow_of,
    task_id_of,
    validate_queue,
)

logger = logging.getLogger("redis_components.tasks")

COMPONENT = "queue"
TAG = "tasks"
# Room for 2**43 tasks (8.8e12) in each priority's band of ready scores.
BAND = 2**44
FIRST = 2**43


# -- keys ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _tagged(prefix: str) -> str:
    """The head of every task key while ``KEY_PREFIX`` is ``prefix`` (the cache's key)."""
    return keys.key(COMPONENT, TAG)


def _key(*parts: str) -> str:
    """``keys.key(COMPONENT, TAG, *parts)``, built faster: an enqueue names five keys."""
    return ":".join((_tagged(conf.KEY_PREFIX), *parts))


def tasks_client() -> Redis:
    """The client for the task system's keys: on a cluster, the node of their one hash tag."""
    client = get_client()
    return node_client(client, leases_key()) if is_cluster(client) else client


def ready_key(queue: str) -> str:
    return _key("ready", queue)


def delayed_key(queue: str) -> str:
    return _key("delayed", queue)


def dead_key(queue: str) -> str:
    return _key("dead", queue)


def running_key(worker_id: str, queue: str) -> str:
    return _key("running", worker_id, queue)


@dataclass(frozen=True)
class Attempt:
    """A running attempt of a task as the running hash keeps it ("<start ms> <worker>",
    see lua/lib/attempts.lua): when it started (the server's ms; ``None`` if that cannot
    be read) and its worker."""

    started_ms: int | None
    worker_id: str

    @classmethod
    def all_of(cls, held: bytes) -> list[Attempt]:
        """The attempts of a task running now, oldest first, from its entry in the
        running hash: one, unless copies of it run at once."""
        found = []
        for attempt in held.split(b"|"):
            begun, _, worker_id = attempt.decode("utf-8", "replace").partition(" ")
            found.append(cls(int(begun) if begun.isdecimal() else None, worker_id))
        return found


@dataclass(frozen=True)
class RunningEntry:
    """A task running now: its id, one attempt of it, and its queued message (``None``
    once its result expired)."""

    task_id: str
    attempt: Attempt
    message: bytes | None


def running_tasks_key() -> str:
    return _key("running")


def result_key(task_id: str) -> str:
    return _key("result", task_id)


def counter_key() -> str:
    return _key("counter")


def flow_key(workflow_id: str) -> str:
    return _key("flow", workflow_id)


def flows_live_key() -> str:
    return _key("flows", "live")


def flows_done_key() -> str:
    return _key("flows", "done")


def flow_section(flow: FlowStep) -> list[str]:
    """The keys a script recording a final outcome of ``flow``'s step needs to settle it
    (see lua/lib/flow.lua): the workflow's, then each later step's result and queue."""
    section = [flow_key(flow.workflow), counter_key(), flows_live_key(), flows_done_key()]
    for task_id, queue in flow.kids:
        section += [result_key(task_id), ready_key(queue)]
    return section


def scheduler_key() -> str:
    return _key("scheduler")


def terminate_key(task_id: str) -> str:
    return _key("terminate", task_id)


def unique_key(digest: str) -> str:
    return _key("unique", digest)


def stats_key(queue: str, hour: int) -> str:
    """The per-minute counts of ``queue`` during ``hour`` (hours since the epoch)."""
    return _key("stats", str(hour), queue)


def totals_key() -> str:
    return _key("totals")


def leases_key() -> str:
    return _key("leases")


def workers_key() -> str:
    return _key("workers")


def queues_key() -> str:
    return _key("queues")


def rank(priority: int) -> int:
    """A task's ready score before the enqueue counter is added (see the module's doc)."""
    return (MAX_PRIORITY - priority) * BAND + FIRST


def result_ttl_ms() -> int:
    return round(conf.TASK_RESULT_TTL * 1000)


def raw(client: Any, *command: Any, **options: Any) -> Any:
    """Run a command whose reply holds payloads, which may not be UTF-8: never decoded.

    ``options`` go to redis-py's reply parser (``withscores=True`` for ZRANGE ... WITHSCORES).
    """
    return client.execute_command(*command, **options, **{NEVER_DECODE: True})


# -- types and helpers (no Redis) ---------------------------------------------------


def queue_limit(queue: str) -> int:
    """The maximum number of waiting tasks of ``queue`` (0: unbounded)."""
    return _limit(user_settings(), queue)


def _limit(options: dict[str, Any], queue: str) -> int:
    limits = options.get("TASK_QUEUE_LIMITS")
    return int(limits.get(queue, 0)) if isinstance(limits, dict) else 0


@dataclass(frozen=True, kw_only=True)
class Due:
    """When an enqueued task is due: now (neither given), ``after_ms`` after its enqueue
    by the Redis server's clock, or at ``at_ms`` (epoch ms)."""

    after_ms: int | None = None
    at_ms: int | None = None

    def __post_init__(self) -> None:
        if self.after_ms is not None and self.at_ms is not None:
            raise ValueError("a task is due after a delay or at a time, not both")

    def argument(self) -> str:
        """As the enqueue script takes it: "" now, "+<ms>" later, "@<epoch ms>" then."""
        if self.at_ms is not None:
            return f"@{self.at_ms}"
        return "" if self.after_ms is None else f"+{self.after_ms}"

    def run_after_ms(self, enqueued_at_ms: int) -> int | None:
        """The epoch ms it is due at, given the server's time of the enqueue (None: now)."""
        if self.at_ms is not None:
            return self.at_ms
        return None if self.after_ms is None else enqueued_at_ms + self.after_ms


NOW = Due()
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
MAX_DELAY = datetime.timedelta(seconds=keys.MAX_SECONDS)


def due_at(when: object, field: str = "when") -> Due:
    """When a task is due at ``when`` (an aware datetime at most ten years from now, the
    bound of every duration), or :class:`InvalidInput` naming ``field``."""
    if not isinstance(when, datetime.datetime):
        raise InvalidInput(field, f"must be a datetime, not {type(when).__name__}")
    if when.utcoffset() is None:
        raise InvalidInput(field, "must be an aware datetime (with a time zone)")
    # By this machine's clock: the server's is read only by the script that writes, and
    # a bound of ten years does not need it. Beyond it, times may not fit a datetime.
    if when - datetime.datetime.now(datetime.timezone.utc) > MAX_DELAY:
        raise InvalidInput(
            field,
            f"must be at most {keys.MAX_SECONDS:,} seconds (ten years) from now, "
            f"not {when.isoformat()}",
        )
    # Whole milliseconds, rounded up (in integers: floats can round), so that a task
    # never runs before its time.
    micros = (when - EPOCH) // datetime.timedelta(microseconds=1)
    return Due(at_ms=-(-micros // 1000))


@dataclass(frozen=True, kw_only=True)
class Enqueued:
    at_ms: int  # the server's time of the enqueue
    duplicate_of: str | None = None  # an equal task enqueued within its unique window


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a task a worker took has ended, to record with the worker's next fetch."""

    position: int  # 1-based index of its queue among the worker's queues
    payload: bytes  # exactly as taken
    task_id: str  # "" for a payload that is not a task (no result to write)
    kind: Literal["ok", "retry", "defer", "bury", "cancel"]
    data: str = ""  # "ok": the return value (JSON); "retry", "bury": the error (JSON)
    again: str | bytes = ""  # "retry", "defer": the payload to run again
    delay_ms: int = 0  # "retry", "defer": in how many ms
    dead_entry: str = ""  # "bury": the dead-letter entry
    seconds: float = 0.0  # how long it ran
    first: bool = False  # its first attempt for sure (TaskMessage.first_attempt)


@dataclass(frozen=True, kw_only=True)
class Fetched:
    payload: bytes | None  # the task taken, never decoded
    position: int  # 1-based index into the worker's queues; -1: the worker is unregistered
    wait_ms: int  # until the next delayed task is due; 0: more are due; -1: none
    recorded: bool  # the outcome sent was recorded (False: the task had been recovered)
    now_ms: int  # the server's time


# The upper bounds (seconds) of the task duration histogram's buckets, for metrics.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def duration_bucket(seconds: float) -> str:
    """The histogram bucket (its upper bound, as Prometheus writes it) of a duration."""
    return next((f"{bound:g}" for bound in DURATION_BUCKETS if seconds <= bound), "+Inf")


def fetch_keys(worker_id: str, queues: Sequence[str]) -> list[str]:
    """The keys :func:`fetch` needs for a worker (the outcome's two are filled in by it)."""
    script_keys = [leases_key(), running_tasks_key(), counter_key(), leases_key(), leases_key()]
    script_keys.append(totals_key())
    for queue in queues:
        script_keys += [
            ready_key(queue),
            delayed_key(queue),
            running_key(worker_id, queue),
            dead_key(queue),
        ]
    return script_keys


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    expired: list[bytes]  # workers whose lease ran out (bytes: anything may be written there)
    leader: bool  # this worker holds the scheduler's lease
    terminate: list[str]  # the ids of its running tasks that are to be terminated


def server_warnings(client: Redis) -> list[str]:
    """What in the server's configuration may lose queued tasks, one sentence each."""
    try:
        config = client.config_get("maxmemory-policy")
        config.update(client.config_get("save"))
        config.update(client.config_get("appendonly"))
    except redis.exceptions.ResponseError:  # CONFIG is disabled (managed services)
        return []
    values = {text(name): text(value) for name, value in config.items()}
    found = []
    policy = values.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        found.append(
            f"Redis may evict keys (maxmemory-policy is {policy!r}): queued tasks can "
            "disappear when memory runs short. Set maxmemory-policy to 'noeviction'."
        )
    if not values.get("save") and values.get("appendonly") == "no":
        found.append(
            "Redis keeps nothing on disk (no 'save' rules, appendonly no): a restart "
            "loses every queued task. Enable appendonly or RDB snapshots."
        )
    return found


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


def _requeueable(entry: bytes) -> TaskMessage | None:
    try:
        data = json.loads(entry)
        message = TaskMessage.decode(data["task"]) if isinstance(data, dict) else None
    except (MalformedTask, ValueError, KeyError, TypeError, RecursionError):
        return None
    return message


# A termination request waits this long for the worker running the task to act on it.
TERMINATE_WAIT_MS = 3_600_000


# A queue with no task finished in this many hours (those the admin pages chart) is idle.
RECENT_HOURS = 6


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")  # shows what bytes are not UTF-8


def _names(reply: dict[bytes, Any]) -> dict[str, Any]:
    return {_text(name): value for name, value in reply.items()}


def _ms(seconds: Any, micros: Any) -> int:
    return int(seconds) * 1000 + int(micros) // 1000


@dataclass(frozen=True, kw_only=True)
class QueueCounts:
    ready: int
    delayed: int
    dead: int
    in_progress: int


@dataclass(frozen=True, kw_only=True)
class Glimpse:
    """An entry of a queue or of its dead letters, read in part (see lua/entry_heads.lua)."""

    start: bytes  # the whole entry when ``len(start) == size``
    end: bytes
    size: int
    score: bytes  # b"" for a dead letter


def schedule_next_key() -> str:
    return _key("schedule", "next")


def schedule_last_key() -> str:
    return _key("schedule", "last")


@dataclass(frozen=True, kw_only=True)
class TickClaim:
    """A due tick of a schedule to claim, with the task it enqueues when ``run``."""

    schedule: str
    tick: int
    following: int  # the tick after it
    run: bool  # False: only move on (missed ticks the schedule skips)
    message: TaskMessage
    payload: str


# -- one builder per script: its KEYS and ARGV, as its header numbers them --------


def enqueue_call(
    *, message: TaskMessage, payload: str, due: Due, limit: int, unique_key: str, unique_ms: int
) -> scripts.Call:
    """lua/queue_enqueue.lua: add a task and write its READY result."""
    return (
        scripts.load("queue_enqueue"),
        [
            ready_key(message.queue),
            delayed_key(message.queue),
            counter_key(),
            result_key(message.id),
            unique_key or counter_key(),
        ],
        [
            payload,
            rank(message.priority),
            due.argument(),
            limit,
            result_ttl_ms(),
            message.id,
            unique_ms,
        ],
    )


def fetch_call(
    *,
    worker_id: str,
    worker_keys: list[str],
    mode: str,
    outcome: Outcome | None,
    queue: str,
    hour: int,
    taken_ms: int,
) -> scripts.Call:
    """lua/queue_fetch.lua: record ``outcome`` (of a task taken from ``queue``, at
    ``taken_ms`` when known), move due delayed tasks, take the next task.

    ``worker_keys`` is :func:`fetch_keys` (the outcome's two keys are filled in here).
    """
    args: list[scripts.Arg] = [worker_id, mode]
    script_keys = worker_keys
    metrics = ""
    if outcome is None:
        args += [0, "", "", "", "", "", 0, "", 0]
    else:
        script_keys = [
            *worker_keys[:3],
            result_key(outcome.task_id),
            stats_key(queue, hour),
            *worker_keys[5:],
        ]
        if conf.METRICS:
            metrics = f"{queue} {duration_bucket(outcome.seconds)}"
        args += [
            outcome.position,
            outcome.payload,
            outcome.task_id,
            outcome.kind,
            outcome.data,
            outcome.again,
            outcome.delay_ms,
            outcome.dead_entry,
            conf.TASK_DEAD_LETTER_MAX,
        ]
    micros = round(outcome.seconds * 1_000_000) if outcome else 0
    first = 1 if outcome and outcome.first else 0
    args += [result_ttl_ms(), metrics, micros, taken_ms or "", first]
    flow = flow_of(outcome.payload) if outcome else None
    if flow is None:
        args += [0, 0]
    else:
        section = flow_section(flow)
        script_keys = [*script_keys, *section]
        args += [len(section), flow.step]
    return scripts.load("queue_fetch"), script_keys, args


def heartbeat_call(
    *,
    worker_id: str,
    lease_ms: int,
    info: str,
    queues: Sequence[str],
    lead: bool,
    running_ids: Sequence[str],
) -> scripts.Call:
    """lua/queue_heartbeat.lua: renew a worker's lease (and the scheduler's)."""
    return (
        scripts.load("queue_heartbeat"),
        [
            leases_key(),
            workers_key(),
            queues_key(),
            scheduler_key(),
            *(terminate_key(task_id) for task_id in running_ids),
        ],
        [worker_id, lease_ms, info, 10, int(lead), len(running_ids), *running_ids, *queues],
    )


def renew_call(*, worker_ids: Sequence[str], lease_ms: int) -> scripts.Call:
    """lua/queue_renew.lua: renew the leases that these workers hold."""
    return scripts.load("queue_renew"), [leases_key()], [lease_ms, *worker_ids]


def recover_call(
    *,
    worker_id: str,
    queues: Sequence[str],
    tasks: dict[str, FlowStep | None],
    only_if_expired: bool,
    max_crashes: int,
) -> scripts.Call:
    """lua/queue_recover.lua: put back the tasks a worker holds (``tasks``: their ids,
    each with its workflow step or ``None``)."""
    script_keys = [leases_key(), workers_key(), running_tasks_key()]
    for queue in queues:
        script_keys += [running_key(worker_id, queue), ready_key(queue), dead_key(queue)]
    script_keys += [result_key(task_id) for task_id in tasks]
    args: list[scripts.Arg] = [
        worker_id,
        "expired" if only_if_expired else "now",
        max_crashes,
        conf.TASK_DEAD_LETTER_MAX,
        result_ttl_ms(),
        len(queues),
        *queues,
    ]
    for task_id, flow in tasks.items():
        args += [task_id, len(script_keys) + 1 if flow else 0, flow.step if flow else 0]
        if flow:
            script_keys += flow_section(flow)
    return scripts.load("queue_recover"), script_keys, args


def requeue_dead_call(*, queue: str, entries: Sequence[tuple[bytes, TaskMessage]]) -> scripts.Call:
    """lua/queue_requeue_dead.lua: put dead letters (each with its task) back, fresh."""
    script_keys = [dead_key(queue), ready_key(queue), counter_key()]
    args: list[scripts.Arg] = [result_ttl_ms()]
    for entry, message in entries:
        fresh = dataclasses.replace(message, retries=0, crashes=0, enqueued_at=None)
        script_keys.append(result_key(message.id))
        args += [entry, fresh.encode(), rank(fresh.priority), message.id]
    return scripts.load("queue_requeue_dead"), script_keys, args


def cancel_call(
    *,
    task_id: str,
    queue: str,
    payload: bytes,
    unique: str,
    terminate: bool,
    flow: FlowStep | None = None,
) -> scripts.Call:
    """lua/queue_cancel.lua: cancel a waiting task (or ask its worker to stop it).

    ``unique``: the key that made it unique, freed with it ("" for none); ``flow``: the
    workflow step it is, whose later steps it fails.
    """
    script_keys = [
        ready_key(queue),
        delayed_key(queue),
        result_key(task_id),
        running_tasks_key(),
        terminate_key(task_id),
        unique or counter_key(),
        *(flow_section(flow) if flow else ()),
    ]
    args: list[scripts.Arg] = [
        task_id,
        payload,
        "terminate" if terminate else "",
        result_ttl_ms(),
        TERMINATE_WAIT_MS,
        "unique" if unique else "",
        flow.step if flow else 0,
    ]
    return scripts.load("queue_cancel"), script_keys, args


def forget_call(*, names: Sequence[str], hours: Sequence[int]) -> scripts.Call:
    """lua/queue_forget.lua: forget the idle queues among ``names`` (counts of ``hours``)."""
    script_keys = [queues_key()]
    for name in names:
        script_keys += [ready_key(name), delayed_key(name), dead_key(name)]
        script_keys += [stats_key(name, hour) for hour in hours]
    return scripts.load("queue_forget"), script_keys, [3 + len(hours), *names]


def entry_heads_call(
    *, key: str, first: int, last: int, start_bytes: int, end_bytes: int
) -> scripts.Call:
    """lua/entry_heads.lua: a glimpse of the entries of ``key`` from ``first`` to ``last``."""
    return scripts.load("entry_heads"), [key], [first, last, start_bytes, end_bytes]


def flow_create_call(
    *,
    workflow_id: str,
    fields: Sequence[scripts.Arg],
    roots: Sequence[tuple[int, TaskMessage, str]],
) -> scripts.Call:
    """lua/flow_create.lua: write a workflow (``fields``: its HASH's, flat) and enqueue
    its ``roots`` (each step's number, message and payload)."""
    script_keys = [flow_key(workflow_id), counter_key(), flows_live_key(), flows_done_key()]
    args: list[scripts.Arg] = [workflow_id, result_ttl_ms(), len(fields) // 2, *fields]
    for number, message, payload in roots:
        script_keys += [ready_key(message.queue), result_key(message.id)]
        args += [number, payload, rank(message.priority)]
    return scripts.load("flow_create"), script_keys, args


def flow_cancel_call(
    *, workflow_id: str, steps: Sequence[tuple[str, str]], terminate: bool
) -> scripts.Call:
    """lua/flow_cancel.lua: cancel a workflow (``steps``: each step's task id and queue)."""
    script_keys = [
        flow_key(workflow_id),
        counter_key(),
        flows_live_key(),
        flows_done_key(),
        running_tasks_key(),
    ]
    for task_id, queue in steps:
        script_keys += [
            result_key(task_id),
            ready_key(queue),
            delayed_key(queue),
            terminate_key(task_id),
        ]
    args: list[scripts.Arg] = [
        "terminate" if terminate else "",
        result_ttl_ms(),
        TERMINATE_WAIT_MS,
    ]
    return scripts.load("flow_cancel"), script_keys, args


def claim_call(*, claims: Sequence[TickClaim]) -> scripts.Call:
    """lua/schedule_claim.lua: claim due ticks of schedules, enqueueing their tasks."""
    script_keys = [schedule_next_key(), schedule_last_key(), counter_key()]
    args: list[scripts.Arg] = [result_ttl_ms()]
    for claim in claims:
        script_keys += [ready_key(claim.message.queue), result_key(claim.message.id)]
        args += [
            claim.schedule,
            claim.tick,
            claim.following,
            "run" if claim.run else "skip",
            claim.payload,
            rank(claim.message.priority),
            claim.message.id,
        ]
    return scripts.load("schedule_claim"), script_keys, args


class TaskStore:
    """The task system's keys in Redis, read and written for the rest of the app.

    ``TaskStore()`` uses the task system's client (on a cluster, the node of its hash
    tag); a worker gives its own (a pool no task shares, and for its loop a
    :class:`~redis_components.connection.OneConnection`). A store holds no state of
    its own: make one where it is needed.
    """

    def __init__(self, client: Any = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        """The given client, else the task system's (looked up each time: on a cluster
        the node of its hash tag may move)."""
        return tasks_client() if self._client is None else self._client

    def enqueue(
        self,
        message: TaskMessage,
        payload: str,
        due: Due = NOW,
        *,
        unique_for: float | None = None,
    ) -> Enqueued:
        """Add a task to its queue, to run when it is ``due``.

        Writes its READY result in the same script. With ``unique_for`` (seconds),
        nothing is added when an equal task (:meth:`TaskMessage.digest`) was enqueued
        within that time (:attr:`Enqueued.duplicate_of` names it). Raises
        :class:`QueueFull` when the queue is at its limit, and :class:`TaskNotDurable`
        when ``QUEUE_WAIT_REPLICAS`` replicas did not acknowledge.
        """
        options = user_settings()
        limit = _limit(options, message.queue)
        call = enqueue_call(
            message=message,
            payload=payload,
            due=due,
            limit=limit,
            unique_key=unique_key(message.digest()) if unique_for else "",
            unique_ms=math.ceil(unique_for * 1000) if unique_for else 0,
        )
        replicas = int(options.get("QUEUE_WAIT_REPLICAS") or 0)  # as conf reads it
        reply, problem = self._run_durable(call, f"Task {message.id} was enqueued", replicas)
        if int(reply[0]) == 0:
            raise QueueFull(message.queue, limit)
        if int(reply[0]) == 2:
            return Enqueued(at_ms=0, duplicate_of=text(reply[1]))
        if problem:
            raise TaskNotDurable(problem, message.id)
        return Enqueued(at_ms=int(reply[1]))

    def _run(self, call: scripts.Call, *, raw: bool = False) -> Any:
        script, script_keys, args = call
        return script(self.client, script_keys, args, raw=raw)

    def _run_durable(
        self, call: scripts.Call, done: str, replicas: int | None = None
    ) -> tuple[Any, str]:
        """Run a script that creates or re-queues tasks, then (with ``QUEUE_WAIT_REPLICAS``,
        or ``replicas``) ``WAIT`` for that many replicas to have its writes: every such
        write is as durable as an enqueue. Returns the script's reply and what went
        wrong ("" when nothing did), a sentence that starts with ``done``."""
        if replicas is None:
            replicas = conf.QUEUE_WAIT_REPLICAS or 0
        if not replicas:
            return self._run(call), ""
        timeout = conf.QUEUE_WAIT_TIMEOUT
        reply, acknowledged = scripts.run_and_wait(self.client, call, replicas, timeout)
        if acknowledged >= replicas:
            return reply, ""
        return reply, (
            f"{done}, but {acknowledged} of {replicas} replicas acknowledged it within "
            f"{timeout:g} s"
        )

    def fetch(
        self,
        worker_id: str,
        worker_keys: list[str],
        mode: str,
        outcome: Outcome | None,
        *,
        queue: str = "",
        hour: int = 0,
        taken_ms: int = 0,
    ) -> Fetched:
        """Record ``outcome`` (if any), move due delayed tasks and take a task, in one script.

        ``worker_keys``: :func:`fetch_keys`. ``mode``: "take+move", "take" (leave delayed
        tasks to others) or "" (only record). ``queue`` is the outcome's queue, ``hour``
        the hour (since the epoch) whose throughput counts it; with ``METRICS`` the totals
        and durations count it too. ``taken_ms``: the ``now_ms`` of the fetch that took the
        outcome's task, when the caller knows it (the script then need not read it back).
        A worker calls it through its :class:`WorkerStore`, which owns the keys, the mode
        and the hour; its loop's gives it a
        :class:`~redis_components.connection.OneConnection`.
        """
        call = fetch_call(
            worker_id=worker_id,
            worker_keys=worker_keys,
            mode=mode,
            outcome=outcome,
            queue=queue,
            hour=hour,
            taken_ms=taken_ms,
        )
        payload, position, wait, recorded, now = self._run(call, raw=True)
        return Fetched(
            payload=payload,
            position=int(position),
            wait_ms=int(wait),
            recorded=bool(recorded),
            now_ms=int(now),
        )

    def heartbeat(
        self,
        worker_id: str,
        lease_ms: int,
        info: str,
        queues: Sequence[str],
        *,
        lead: bool = False,
        running_ids: Sequence[str] = (),
    ) -> Heartbeat:
        """Renew (or make) a worker's lease, and the scheduler's lease when ``lead``; say
        which workers' leases ran out and which of the tasks ``running_ids`` are to be
        terminated."""
        call = heartbeat_call(
            worker_id=worker_id,
            lease_ms=lease_ms,
            info=info,
            queues=queues,
            lead=lead,
            running_ids=running_ids,
        )
        expired, leader, terminate = self._run(call, raw=True)
        return Heartbeat(
            expired=expired, leader=bool(leader), terminate=[text(i) for i in terminate]
        )

    def recover_worker(
        self,
        worker_id: str,
        queues: Sequence[str],
        *,
        only_if_expired: bool,
        max_crashes: int,
    ) -> tuple[int, int] | None:
        """Put a worker's in-progress tasks back in their queues; deregister it.

        With ``only_if_expired``, nothing happens unless its lease has run out (``None`` is
        returned). ``max_crashes`` > 0 counts a crash against each task (and in its result)
        and dead-letters those that reach it. Returns ``(requeued, dead-lettered)``.
        """
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            raw(pipe, "ZRANGE", running_key(worker_id, queue), 0, -1)
        held = pipe.execute()
        found = {task_id: p for payloads in held for p in payloads if (task_id := task_id_of(p))}
        tasks = {task_id: flow_of(found[task_id]) for task_id in sorted(found)}
        call = recover_call(
            worker_id=worker_id,
            queues=queues,
            tasks=tasks,
            only_if_expired=only_if_expired,
            max_crashes=max_crashes,
        )
        result = self._run(call)
        if result is None:
            return None
        return int(result[0]), int(result[1])

    def renew_leases(self, worker_ids: Sequence[str], lease_ms: int) -> int:
        """Renew the leases that these workers hold (lua/queue_renew.lua); a worker with
        none is left without. Returns how many were renewed."""
        if not worker_ids:
            return 0
        renewed: int = self._run(renew_call(worker_ids=worker_ids, lease_ms=lease_ms))
        return renewed

    def drop_lease(self, raw_id: bytes) -> None:
        """Forget a lease whose owner is not a worker of ours (it holds no task)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(leases_key(), raw_id)
        pipe.hdel(workers_key(), raw_id)
        pipe.execute()

    def requeue_dead(self, queue: str, batch: int = 500) -> tuple[int, int]:
        """Put the dead letters of ``queue`` back on it with fresh retries.

        Returns ``(requeued, left)``: entries whose payload is not a task this version can
        run are left in the dead-letter list. Each batch moves atomically; an entry removed
        meanwhile (by another requeue) is skipped, so no task is requeued twice.
        """
        validate_queue(queue)
        moved = left = start = 0
        while True:
            entries = raw(self.client, "LRANGE", dead_key(queue), start, start + batch - 1)
            if not entries:
                return moved, left
            found = [(entry, _requeueable(entry)) for entry in entries]
            tasks = [(entry, message) for entry, message in found if message is not None]
            left += len(entries) - len(tasks)
            done = self._requeue(queue, tasks)
            moved += done
            start += len(entries) - done  # what stayed is before the next batch now
            if tasks and done == 0:  # another process is requeueing the same entries
                return moved, left

    def requeue_dead_entry(self, queue: str, entry: bytes) -> bool:
        """Put one dead letter back on its queue with fresh retries; False if it is gone or
        is not a task this app can run."""
        validate_queue(queue)
        message = _requeueable(entry)
        if message is None:
            return False
        return bool(self._requeue(queue, [(entry, message)]))

    def _requeue(self, queue: str, tasks: Sequence[tuple[bytes, TaskMessage]]) -> int:
        """Requeue these dead letters (each with its task); how many were moved."""
        if not tasks:
            return 0
        call = requeue_dead_call(queue=queue, entries=tasks)
        done, problem = self._run_durable(
            call, f"{len(tasks)} dead letters of {queue!r} were requeued"
        )
        if problem:
            logger.warning("%s", problem)
        return int(done)

    def delete_dead_entry(self, queue: str, entry: bytes) -> bool:
        """Delete one dead letter; False if it was gone."""
        validate_queue(queue)
        return bool(raw(self.client, "LREM", dead_key(queue), 1, entry))

    def cancel(
        self, task_id: str, *, terminate: bool = False
    ) -> Literal["cancelled", "terminating"]:
        """Cancel a task that has not started: it leaves its queue, its result is CANCELLED.

        A running task is refused with :class:`TaskNotCancellable`, unless ``terminate``:
        then its worker stops it at its next heartbeat (the worker process is replaced), and
        ``"terminating"`` is returned. A finished task, or an unknown id, is refused too.
        A cancelled unique task frees its key: an equal task may be enqueued at once.
        """
        keys.validate_name(task_id, "task_id", 100)
        fields = raw(self.client, "HMGET", result_key(task_id), "payload", "message", "unique")
        payload = fields[0] or fields[1]
        unique = (fields[2] or b"").decode("utf-8", "replace")
        try:
            message = TaskMessage.decode(fields[1]) if fields[1] else None
        except MalformedTask:
            message = None
        queue = message.queue if message else None
        if payload is None or queue is None:
            raise TaskNotCancellable(
                task_id, "no such task is kept (unknown, or its result expired)"
            )
        call = cancel_call(
            task_id=task_id,
            queue=queue,
            payload=payload,
            unique=unique if unique.startswith(unique_key("")) else "",  # only a key of ours
            terminate=terminate,
            flow=message.flow if message else None,
        )
        done = self._run(call)
        if done == 1:
            return "cancelled"
        if done == 2:
            return "terminating"
        if done == 0:
            raise TaskNotCancellable(
                task_id, "it is running; pass terminate=True (rc_queues --terminate) to stop it"
            )
        if done == -2:
            raise TaskNotCancellable(task_id, "it was already cancelled")
        raise TaskNotCancellable(task_id, "it is not waiting to run: it has finished")

    def purge(self, queue: str) -> int:
        """Delete the ready, delayed and dead tasks of ``queue`` (in one transaction); return
        how many. Tasks in progress are left to finish; results expire by themselves."""
        validate_queue(queue)
        pipe = self.client.pipeline(transaction=True)
        pipe.zcard(ready_key(queue))
        pipe.zcard(delayed_key(queue))
        pipe.llen(dead_key(queue))
        pipe.delete(ready_key(queue), delayed_key(queue), dead_key(queue))
        ready, delayed, dead, _ = pipe.execute()
        return int(ready) + int(delayed) + int(dead)

    def known_queue_names(self, extra: Iterable[str] = ()) -> set[str]:
        """Queues some worker has served, plus ``extra`` (names that are not text are skipped)."""
        names = set(extra)
        for name in raw(self.client, "SMEMBERS", queues_key()):
            try:
                names.add(validate_queue(name.decode()))
            except ValueError:  # UnicodeDecodeError too
                continue
        return names

    def forget_queues(self, names: Sequence[str]) -> int:
        """Drop from the known queues those of ``names`` that hold no task or dead letter and
        finished no task in the last RECENT_HOURS (one script: a task enqueued meanwhile
        keeps its queue known). Pass only queues no registered worker serves. Returns how
        many were forgotten."""
        if not names:
            return 0
        hour = int(time.time()) // 3600  # the client's clock: an hour more on each side
        hours = range(hour - RECENT_HOURS - 1, hour + 2)
        return int(self._run(forget_call(names=names, hours=hours)))

    def result_records(
        self, task_ids: Sequence[str]
    ) -> list[tuple[dict[bytes, bytes], Attempt | None]]:
        """Each task's result hash and its newest attempt in the running hash (``None``
        when it is not running), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            raw(pipe, "HGETALL", result_key(task_id))
            raw(pipe, "HGET", running_tasks_key(), task_id)
        replies = pipe.execute()
        return [
            (replies[2 * i], Attempt.all_of(replies[2 * i + 1])[-1] if replies[2 * i + 1] else None)
            for i in range(len(task_ids))
        ]

    def worker_records(self) -> tuple[dict[str, bytes], dict[str, float], int]:
        """Every registered worker's description (JSON, by id), each lease's expiry (ms, by
        id), and the server's time (ms), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", workers_key())
        raw(pipe, "ZRANGE", leases_key(), 0, -1, "WITHSCORES", withscores=True)
        pipe.time()
        described, leases, (seconds, micros) = pipe.execute()
        expiry = {_text(member): float(score) for member, score in leases}
        return _names(described), expiry, _ms(seconds, micros)

    def worker_description(self, worker_id: str) -> bytes | None:
        """The JSON description a worker registered (its queues, pid), if any."""
        found: bytes | None = raw(self.client, "HGET", workers_key(), worker_id)
        return found

    def queue_counts(self, serving: dict[str, list[str]]) -> dict[str, QueueCounts]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it), in one
        round trip."""
        pipe = self.client.pipeline(transaction=False)
        for name, worker_ids in serving.items():
            pipe.zcard(ready_key(name))
            pipe.zcard(delayed_key(name))
            pipe.llen(dead_key(name))
            for worker_id in worker_ids:
                pipe.zcard(running_key(worker_id, name))
        counts = iter(pipe.execute())
        found = {}
        for name, worker_ids in serving.items():
            ready, delayed, dead = next(counts), next(counts), next(counts)
            held = sum(next(counts) for _ in worker_ids)
            found[name] = QueueCounts(ready=ready, delayed=delayed, dead=dead, in_progress=held)
        return found

    def held_payloads(self, worker_id: str, queue: str) -> list[bytes]:
        """The payloads of the tasks that a worker has taken from ``queue``."""
        found: list[bytes] = raw(self.client, "ZRANGE", running_key(worker_id, queue), 0, -1)
        return found

    def dead_letter_entries(self, queue: str, first: int, last: int) -> list[bytes]:
        """Dead-letter entries of ``queue`` from ``first`` to ``last`` (LRANGE's indexes: the
        newest is last)."""
        found: list[bytes] = raw(self.client, "LRANGE", dead_key(queue), first, last)
        return found

    def dead_letter_at(self, queue: str, index: int) -> bytes | None:
        """The dead-letter entry at ``index`` (0: the newest), or ``None``."""
        found: bytes | None = raw(self.client, "LINDEX", dead_key(queue), -index - 1)
        return found

    def glimpses(
        self,
        queue: str,
        state: Literal["ready", "delayed", "dead"],
        first: int,
        last: int,
        **sizes: int,
    ) -> tuple[int, list[Glimpse]]:
        """How many entries the ``state`` set of ``queue`` holds, and a glimpse of those from
        ``first`` to ``last`` (negative: from the end): their first ``start_bytes`` and last
        ``end_bytes`` bytes, never a page of whole entries (one round trip)."""
        call = entry_heads_call(
            key={"ready": ready_key, "delayed": delayed_key, "dead": dead_key}[state](queue),
            first=first,
            last=last,
            start_bytes=sizes.get("start_bytes", 4096),
            end_bytes=sizes.get("end_bytes", 0),
        )
        total, *rest = self._run(call, raw=True)
        found = [
            Glimpse(start=rest[i], end=rest[i + 1], size=int(rest[i + 2]), score=rest[i + 3])
            for i in range(0, len(rest), 4)
        ]
        return int(total), found

    def running_records(self) -> list[RunningEntry]:
        """Every attempt running now, in two round trips."""
        attempts = _names(raw(self.client, "HGETALL", running_tasks_key()))
        pipe = self.client.pipeline(transaction=False)
        for task_id in attempts:
            raw(pipe, "HGET", result_key(task_id), "message")
        messages = pipe.execute() if attempts else []
        return [
            RunningEntry(task_id, attempt, message)
            for (task_id, held), message in zip(attempts.items(), messages, strict=True)
            for attempt in Attempt.all_of(held)
        ]

    def minute_counts(
        self, queues: Sequence[str], hours: int
    ) -> tuple[int, dict[str, dict[str, bytes]]]:
        """The server's minute (since the epoch) and, per queue, the per-minute counts of the
        last ``hours`` hours and this one ("<minute>:<kind>" -> count), in two round trips."""
        seconds, _ = self.client.time()
        now_minute = int(seconds) // 60
        hour = now_minute // 60
        pipe = self.client.pipeline(transaction=False)
        for name in queues:
            for h in range(hour - hours, hour + 1):
                raw(pipe, "HGETALL", stats_key(name, h))
        replies = iter(pipe.execute())
        found: dict[str, dict[str, bytes]] = {}
        for name in queues:
            merged: dict[str, bytes] = {}
            for _ in range(hours + 1):
                merged.update(_names(next(replies)))
            found[name] = merged
        return now_minute, found

    def totals(self) -> dict[str, bytes]:
        """The metrics' running totals ("<queue>:<outcome>:<bucket>" and "<queue>:us")."""
        return _names(raw(self.client, "HGETALL", totals_key()))

    def schedule_ticks(self) -> tuple[dict[str, bytes], int]:
        """Each schedule's next tick (epoch ms, as stored) and the server's time (ms)."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        pipe.time()
        stored, (seconds, micros) = pipe.execute()
        return _names(stored), _ms(seconds, micros)

    def start_schedule(self, name: str, first_tick: int) -> None:
        """Record a new schedule's first tick, unless a scheduler already did."""
        self.client.hsetnx(schedule_next_key(), name, first_tick)

    def schedule_records(self) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """Each schedule's next tick, and its last run ("<tick ms> <task id>"), as stored."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        raw(pipe, "HGETALL", schedule_last_key())
        next_ticks, last_runs = pipe.execute()
        return _names(next_ticks), _names(last_runs)

    def create_workflow(
        self,
        workflow_id: str,
        fields: Sequence[scripts.Arg],
        roots: Sequence[tuple[int, TaskMessage, str]],
    ) -> int | None:
        """Write a workflow and enqueue its first steps in one script; the server's time
        (ms) of the enqueue, or ``None`` if a workflow of this id exists (nothing done)."""
        call = flow_create_call(workflow_id=workflow_id, fields=fields, roots=roots)
        created, problem = self._run_durable(call, f"Workflow {workflow_id} was enqueued")
        if created is None:
            return None
        if problem:
            raise TaskNotDurable(problem, workflow_id)
        return int(created)

    def workflow_pages(self, workflow_id: str, pages: Sequence[Sequence[str]]) -> dict[str, bytes]:
        """These fields of a workflow's HASH (those it has), one HMGET per page of them,
        in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for page in pages:
            raw(pipe, "HMGET", flow_key(workflow_id), *page)
        replies = pipe.execute() if pages else []
        return {
            name: value
            for page, values in zip(pages, replies, strict=True)
            for name, value in zip(page, values, strict=True)
            if value is not None
        }

    def workflow_result(self, workflow_id: str, node: int) -> bytes | None:
        """The result (JSON) of a workflow's step or barrier, as stored (``None`` when it
        has none, or the workflow is not kept)."""
        value: bytes | None = raw(self.client, "HGET", flow_key(workflow_id), f"r:{node}")
        return value

    def cancel_workflow(
        self, workflow_id: str, steps: Sequence[tuple[str, str]], *, terminate: bool
    ) -> tuple[bool, str | None, int, int]:
        """Cancel a workflow whose steps are ``steps`` (task id, queue): whether this call
        cancelled it, its status before (``None``: no such workflow), how many steps
        were dropped, and how many still run."""
        call = flow_cancel_call(workflow_id=workflow_id, steps=steps, terminate=terminate)
        cancelled, status, dropped, running = self._run(call)
        return bool(cancelled), (None if status is None else text(status)), dropped, running

    def workflow_ids(self, limit: int) -> tuple[list[str], list[str]]:
        """The ids of the oldest ``limit`` live workflows and of the latest ``limit``
        finished ones still kept."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "ZRANGE", flows_live_key(), 0, limit - 1)
        raw(pipe, "ZREVRANGE", flows_done_key(), 0, limit - 1)
        live, done = pipe.execute()
        return [_text(i) for i in live], [_text(i) for i in done]

    def running_workflow_count(self) -> int:
        return int(self.client.zcard(flows_live_key()))

    def workflow_fields(
        self, workflow_ids: Sequence[str], fields: Sequence[str]
    ) -> list[dict[str, bytes]]:
        """These ``fields`` of each workflow's HASH (those it has: none for a workflow that
        is gone), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for workflow_id in workflow_ids:
            raw(pipe, "HMGET", flow_key(workflow_id), *fields)
        replies = pipe.execute() if workflow_ids else []
        return [
            {name: value for name, value in zip(fields, values, strict=True) if value is not None}
            for values in replies
        ]

    def claim_ticks(self, claims: Sequence[TickClaim]) -> list[bool]:
        """Claim due ticks in one script; for each, whether this call claimed it (and
        enqueued its task if ``run``): another scheduler may have been first."""
        claimed, problem = self._run_durable(
            claim_call(claims=claims), "Schedules' ticks were enqueued"
        )
        if problem:
            logger.warning("%s", problem)
        return [bool(done) for done in claimed]


class WorkerStore:
    """One worker's side of the store: what a worker process says of its own tasks.

    It owns what every such call needs: the worker's keys, whether its takes move due
    delayed tasks (``move_delayed``: a worker that runs the scheduler does; see
    :meth:`TaskStore.fetch`), and the server's time at its last call, whose hour files
    the throughput counts. ``client`` gives the client each call uses (on a cluster the
    keys' node may move; a worker's loop holds one connection of its own, which runs
    :meth:`take` and :meth:`record`, not the pipelines of :meth:`put_back` and
    :meth:`held`): one object per thread that talks to Redis. The worker's loop, its
    lease, ``rc_worker``'s supervisor and :mod:`redis_components.testing` all use it.
    """

    def __init__(
        self,
        worker_id: str,
        queues: Sequence[str],
        *,
        move_delayed: bool = True,
        client: Callable[[], Any] = tasks_client,
    ) -> None:
        self.worker_id = worker_id
        self.queues = list(queues)
        self.mode = "take+move" if move_delayed else "take"
        self.now_ms = int(time.time() * 1000)  # until the server says
        self._client = client
        self._keys = fetch_keys(worker_id, self.queues)

    @property
    def store(self) -> TaskStore:
        return TaskStore(self._client())

    def take(self, finished: Outcome | None = None, *, taken_ms: int = 0) -> Fetched:
        """Record ``finished`` (how a task it took ended), if given, and take the next
        task, in one script. ``taken_ms``: the ``now_ms`` of the take of ``finished``."""
        return self._fetch(self.mode, finished, taken_ms)

    def record(self, finished: Outcome, *, taken_ms: int = 0) -> Fetched:
        """Record how a task it took ended, and take nothing."""
        return self._fetch("", finished, taken_ms)

    def _fetch(self, mode: str, finished: Outcome | None, taken_ms: int) -> Fetched:
        fetched = self.store.fetch(
            self.worker_id,
            self._keys,
            mode,
            finished,
            queue=self.queues[finished.position - 1] if finished is not None else "",
            hour=self.now_ms // 3_600_000,
            taken_ms=taken_ms,
        )
        self.now_ms = fetched.now_ms
        return fetched

    def beat(
        self, lease_ms: int, info: str, *, lead: bool = False, running_ids: Sequence[str] = ()
    ) -> Heartbeat:
        """Renew (or make) its lease for ``lease_ms`` (see :meth:`TaskStore.heartbeat`)."""
        return self.store.heartbeat(
            self.worker_id, lease_ms, info, self.queues, lead=lead, running_ids=running_ids
        )

    def put_back(self, *, max_crashes: int = 0) -> tuple[int, int] | None:
        """Put the tasks it holds back on their queues (counting a crash against each
        with ``max_crashes``) and deregister it: ``(requeued, dead-lettered)``."""
        return self.store.recover_worker(
            self.worker_id, self.queues, only_if_expired=False, max_crashes=max_crashes
        )

    def held(self) -> list[tuple[int, bytes]]:
        """The tasks it holds, as ``(position of their queue, payload)``."""
        store = self.store
        return [
            (position, payload)
            for position, queue in enumerate(self.queues, 1)
            for payload in store.held_payloads(self.worker_id, queue)
        ]


def cancel(task_id: str, *, terminate: bool = False) -> Literal["cancelled", "terminating"]:
    """Cancel a task that has not started (see :meth:`TaskStore.cancel`)."""
    return TaskStore().cancel(task_id, terminate=terminate)
