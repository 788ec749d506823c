"""One builder per script: its KEYS and ARGV, as its header numbers them (a test checks
them against the scripts' headers)."""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Sequence

from django.core.signals import setting_changed

from ... import scripts
from ...conf import conf
from ..messages import NOW, FlowStep, TaskMessage, flow_of
from .layout import (
    counter_key,
    dead_key,
    delayed_key,
    flow_key,
    flow_section,
    head_of,
    lease_copy_key,
    leases_key,
    limits_key,
    limits_waiting_key,
    one_home,
    queues_key,
    rank,
    ready_key,
    registry,
    released_key,
    result_key,
    result_ttl_ms,
    running_key,
    running_tasks_key,
    schedule_last_key,
    schedule_next_key,
    scheduler_key,
    settled_elsewhere,
    stats_key,
    task_home,
    terminate_key,
    totals_key,
    unique_key,
    waiting_key,
    workers_key,
    workflow_keys,
)
from .records import (
    TERMINATE_WAIT_MS,
    WAIT_BUCKETS,
    Adding,
    Fetched,
    Move,
    Outcome,
    TickClaim,
    duration_bucket,
)


def fetch_keys(worker_id: str, queues: Sequence[str], head: str = "") -> list[str]:
    """The keys :func:`fetch_call` needs for a worker in ``queues``' one home (or ``head``:
    another count's partition), but the outcome's two, which it fills in."""
    head = head or one_home(queues)
    leases = lease_copy_key(head)
    script_keys = [leases, running_tasks_key(head), counter_key(head), leases, leases]
    script_keys.append(totals_key(head))
    for queue in queues:
        script_keys += [
            ready_key(queue, head),
            delayed_key(queue, head),
            running_key(worker_id, queue, head),
            dead_key(queue, head),
        ]
    return script_keys


def enqueue_call(adding: Adding) -> scripts.Call:
    """lua/queue_enqueue.lua: add a task and write its READY result, in the home its id
    names (its queue's, but a workflow's step's is the registry's)."""
    message = adding.message
    head = task_home(message.id)
    return (
        scripts.load("queue_enqueue"),
        [
            ready_key(message.queue, head),
            delayed_key(message.queue, head),
            counter_key(head),
            result_key(message.id),
            adding.unique_key or counter_key(head),
        ],
        [adding.payload, adding.due.argument(), message.id, _enqueue_options(adding)],
    )


# queue_enqueue.lua's options by what they are made of (a queue, a priority, the share
# of the queue's limit, a unique window): the same for every enqueue of a task, so made
# once, until a setting changes (the results' TTL, METRICS).
_made_options: dict[tuple[str, int, int, int], str] = {}


def _enqueue_options(adding: Adding) -> str:
    message = adding.message
    made = (message.queue, message.priority, adding.share, adding.unique_ms)
    found = _made_options.get(made)
    if found is None:
        options = {
            "rank": rank(message.priority),
            "limit": adding.share,
            "keep": result_ttl_ms(),
            "unique_ms": adding.unique_ms,
            "counted": message.queue if conf.METRICS else "",
        }
        # (Only what is set, as fetch_call's: each field costs the script time to decode.)
        found = json.dumps({k: v for k, v in options.items() if v}, ensure_ascii=False)
        if len(_made_options) >= 1024:  # (queues and priorities of tasks made at run time)
            _made_options.clear()
        _made_options[made] = found
    return found


def _forget_options(**kwargs: object) -> None:
    _made_options.clear()


setting_changed.connect(_forget_options)


def enqueue_many_call(head: str, batch: Sequence[Adding]) -> scripts.Call:
    """lua/queue_enqueue_many.lua: add tasks of the home ``head`` (their ids name it)."""
    numbers: dict[str, int] = {}  # each queue's number in the call
    header: list[scripts.Arg] = []
    tasks: list[scripts.Arg] = []
    counted = "1" if conf.METRICS else ""
    for adding in batch:
        queue = adding.message.queue
        number = numbers.get(queue)
        if number is None:
            number = numbers[queue] = len(numbers) + 1
            header += [queue, adding.share, counted]
        unique = f"{adding.unique_ms} {adding.unique_key}" if adding.unique_ms else ""
        tasks += [number, adding.payload, adding.due.argument(), unique]
    args = [result_ttl_ms(), len(numbers), *header, *tasks]
    return scripts.load("queue_enqueue_many"), [counter_key(head)], args


def migrate_call(*, move: Move) -> scripts.Call:
    """lua/queue_migrate.lua: write a task of an earlier layout in its queue's home."""
    head = task_home(move.task_id)
    return (
        scripts.load("queue_migrate"),
        [result_key(move.task_id), move.into, move.unique_key or counter_key(head), move.wakes],
        [
            move.entry,
            "" if move.score is None else repr(move.score),
            json.dumps(move.fields, ensure_ascii=False),
            max(move.keep_ms, 0),
            move.unique_ms,
            move.task_id,
        ],
    )


def fetch_call(
    *,
    worker_id: str,
    worker_keys: list[str],  # fetch_keys(...)
    mode: str,  # "take+move", "take", "move" or ""
    outcome: Outcome | None,  # fenced by its delivery's attempt
    hour: int,
    start: Fetched | None = None,  # a task held ahead
    shift: int = 0,  # the lanes before the first of worker_keys (positions are the call's)
    ahead: bool = False,  # to hold the task taken ahead
    clock_ms: int = 0,  # the server's time as the worker reckons it (0: unknown)
    exact: bool = False,  # clock_ms is the time (else a floor to the clock's)
    limits: str = "",  # the TASK_LIMITS setting as JSON ("" for none)
    carried: Sequence[str] = (),  # steps carried from this home's outbox: their entries go
) -> scripts.Call:
    """lua/queue_fetch.lua: record ``outcome``, start ``start``, move due delayed tasks and
    take the next task, as ``mode`` says."""
    options: dict[str, object] = {
        "worker": worker_id,
        "take": mode.startswith("take"),
        "move": mode.endswith("move"),
        "ahead": ahead,
        "limits": limits,
        "metrics": conf.METRICS,
        "keep": result_ttl_ms(),
    }
    if clock_ms:
        options["now" if exact else "floor"] = clock_ms
    script_keys = worker_keys
    payloads: list[scripts.Arg] = ["", "", "", "", "", ""]
    if outcome is not None:
        head, delivery = head_of(worker_keys[0]), outcome.delivery
        script_keys = [
            *worker_keys[:3],
            result_key(outcome.task_id, head),
            stats_key(delivery.queue, hour, head),
            *worker_keys[5:],
        ]
        options |= {
            "done": delivery.position - shift,
            "id": outcome.task_id,
            "outcome": outcome.kind,
            "delay_ms": outcome.delay_ms,
            "first": outcome.first,
            "carried": list(carried),
            "attempt": str(delivery.attempt),
            "metadata": outcome.metadata,
            "progress": outcome.progress,
        }
        if outcome.kind == "bury":
            options["dead_max"] = conf.TASK_DEAD_LETTER_MAX
        if conf.METRICS:
            options |= {
                "queue": delivery.queue,
                "bucket": duration_bucket(outcome.seconds),
                "micros": round(outcome.seconds * 1_000_000),
            }
            if outcome.waited_ms is not None:  # (one field: see below)
                bucket = duration_bucket(outcome.waited_ms / 1000, WAIT_BUCKETS)
                options["wait"] = f"{bucket} {outcome.waited_ms}"
        payloads[:4] = [delivery.payload, outcome.data, outcome.again, outcome.dead_entry]
        flow = flow_of(delivery.payload)
        if flow is not None:
            section, step = flow_section(flow, outcome.task_id)
            script_keys = [*script_keys, *section]
            options["flow_keys"] = len(section)
            payloads[4] = step
    if start is not None:
        options |= {"start": start.position - shift, "start_score": start.score.decode()}
        payloads[5] = start.payload or b""
    # Only what is set: each field costs the script time to decode, and past 16 of them
    # (with what the script adds) a table twice the size.
    sent = json.dumps({name: value for name, value in options.items() if value})
    return scripts.load("queue_fetch"), script_keys, [sent, *payloads]


def metadata_call(
    *, task_id: str, attempt: str, metadata: str = "", progress: str = "", trace: str = ""
) -> scripts.Call:
    """lua/queue_metadata.lua: save a running task's metadata, its progress and/or its
    attempt's trace context ("": not that one), fenced by its attempt."""
    head = task_home(task_id)
    return (
        scripts.load("queue_metadata"),
        [running_tasks_key(head), result_key(task_id)],
        [task_id, attempt, metadata, progress, trace],
    )


# For at least this long (ms) a tick's task is not enqueued again in its queue's home
# (a scheduler killed between the enqueue and the claim leaves the tick due meanwhile).
TICK_REFUSED_MS = 3_600_000


def tick_enqueue_call(claim: TickClaim) -> scripts.Call:
    """lua/queue_enqueue.lua for the task of a schedule's tick whose queue has a home of
    its own, before the tick is claimed: refused when it was enqueued already."""
    return enqueue_call(
        Adding(
            message=claim.message,
            payload=claim.payload,
            due=NOW,
            limit=0,
            shares=1,
            unique_key=unique_key(f"tick:{claim.message.id}", task_home(claim.message.id)),
            unique_ms=max(result_ttl_ms(), TICK_REFUSED_MS),
        )
    )


def put_back_call(*, worker_id: str, queue: str, held: Fetched, task_id: str) -> scripts.Call:
    """lua/queue_put_back.lua: give back a task held ahead, unstarted."""
    head = task_home(task_id)
    return (
        scripts.load("queue_put_back"),
        [running_tasks_key(head), running_key(worker_id, queue, head), ready_key(queue, head)],
        [worker_id, held.payload or b"", task_id, held.now_ms, queue],
    )


def limits_run_call(
    *, worker_id: str, head: str, task_id: str, payload: bytes, hold: bool
) -> scripts.Call:
    """lua/limits_run.lua: keep (``hold``) or free the permits of a task's run that goes
    on beyond its recorded end, in the home ``head`` it was taken in."""
    return (
        scripts.load("limits_run"),
        [counter_key(head)],
        ["hold" if hold else "free", worker_id, task_id, payload],
    )


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


def renew_call(*, worker_ids: Sequence[str], lease_ms: int, head: str = "") -> scripts.Call:
    """lua/queue_renew.lua: renew these workers' leases (their copies in ``head``; by
    default the registry's)."""
    return (
        scripts.load("queue_renew"),
        [lease_copy_key(head or registry())],
        [lease_ms, *worker_ids],
    )


def recover_call(
    *,
    worker_id: str,
    queues: Sequence[str],
    tasks: dict[str, FlowStep | None],  # by id, each with its workflow step or None
    only_if_expired: bool,
    max_crashes: int,
    head: str = "",
    started_elsewhere: int = 0,  # the tasks it started in its other homes
) -> scripts.Call:
    """lua/queue_recover.lua: put back the tasks a worker holds in ``queues`` of ``head``,
    fenced by its lease's copy there; on the registry's home, deregister it."""
    head = head or one_home(queues)
    script_keys = [lease_copy_key(head), workers_key(head), running_tasks_key(head)]
    for queue in queues:
        script_keys += [
            running_key(worker_id, queue, head),
            ready_key(queue, head),
            dead_key(queue, head),
        ]
    script_keys += [result_key(task_id, head) for task_id in tasks]
    args: list[scripts.Arg] = [
        worker_id,
        "expired" if only_if_expired else "now",
        max_crashes,
        conf.TASK_DEAD_LETTER_MAX,
        result_ttl_ms(),
        len(queues),
        started_elsewhere,
        *queues,
    ]
    for task_id, flow in tasks.items():
        section, step = flow_section(flow, task_id) if flow else ([], "0")
        args += [task_id, len(script_keys) + 1 if flow else 0, step]
        script_keys += section
    return scripts.load("queue_recover"), script_keys, args


def requeue_dead_call(
    *, queue: str, entries: Sequence[tuple[bytes, TaskMessage]], head: str
) -> scripts.Call:
    """lua/queue_requeue_dead.lua: put dead letters (each with its task) back, fresh, in
    their home ``head``."""
    script_keys = [dead_key(queue, head), ready_key(queue, head), counter_key(head)]
    args: list[scripts.Arg] = [result_ttl_ms()]
    for entry, message in entries:
        fresh = dataclasses.replace(message, retries=0, crashes=0, enqueued_at=None, due_at=None)
        script_keys.append(result_key(message.id, head))
        args += [entry, fresh.encode(), rank(fresh.priority), message.id]
    return scripts.load("queue_requeue_dead"), script_keys, args


def cancel_call(
    *,
    task_id: str,
    queue: str,
    payload: bytes,
    unique: str,  # the key that made it unique, freed with it ("" for none)
    terminate: bool,
    flow: FlowStep | None = None,  # its workflow step, whose later steps it fails
    workflow_cancelled: bool = False,  # a running step in another home is not run again
) -> scripts.Call:
    """lua/queue_cancel.lua: cancel a waiting task (or ask its worker to stop it)."""
    head = task_home(task_id)
    section, step = flow_section(flow, task_id) if flow else ([], "0")
    script_keys = [
        ready_key(queue, head),
        delayed_key(queue, head),
        result_key(task_id),
        running_tasks_key(head),
        terminate_key(task_id),
        unique or counter_key(head),
        *section,
    ]
    args: list[scripts.Arg] = [
        task_id,
        payload,
        "terminate" if terminate else "",
        result_ttl_ms(),
        TERMINATE_WAIT_MS,
        "unique" if unique else "",
        step,
        queue,
        "workflow" if workflow_cancelled else "",
    ]
    return scripts.load("queue_cancel"), script_keys, args


def purge_call(*, queue: str, head: str) -> scripts.Call:
    """lua/queue_purge.lua: delete a queue's waiting tasks and dead letters in ``head``."""
    queue_keys = [ready_key(queue, head), delayed_key(queue, head), dead_key(queue, head)]
    script_keys = [*queue_keys, limits_key(head), waiting_key(head)]
    return scripts.load("queue_purge"), script_keys, [queue]


def forget_call(*, names: Sequence[str], hours: Sequence[int]) -> scripts.Call:
    """lua/queue_forget.lua: forget the idle queues among ``names`` (counts of ``hours``)."""
    head = one_home(names)
    script_keys = [queues_key(), limits_waiting_key(head)]
    for name in names:
        script_keys += [ready_key(name), delayed_key(name), dead_key(name)]
        script_keys += [stats_key(name, hour) for hour in hours]
    return scripts.load("queue_forget"), script_keys, [3 + len(hours), *names]


def health_call(*, queue: str, head: str) -> scripts.Call:
    """lua/queue_health.lua: since when the oldest ready task of ``queue`` in its home
    ``head`` has been ready, by that home's clock."""
    keys = [ready_key(queue, head), delayed_key(queue, head), counter_key(head)]
    return scripts.load("queue_health"), keys, []


def entry_heads_call(
    *, key: str, first: int, last: int, start_bytes: int, end_bytes: int
) -> scripts.Call:
    """lua/entry_heads.lua: a glimpse of the entries of ``key`` from ``first`` to ``last``."""
    return scripts.load("entry_heads"), [key], [first, last, start_bytes, end_bytes]


def flow_create_call(
    *,
    workflow_id: str,
    fields: Sequence[scripts.Arg],  # its HASH's, flat
    roots: Sequence[tuple[int, TaskMessage, str]],  # each step's number, message and payload
    queues: Sequence[str],  # each step's queue, counted in the metrics' tasks added
) -> scripts.Call:
    """lua/flow_create.lua: write a workflow and enqueue its ``roots``."""
    script_keys = workflow_keys(workflow_id)
    counted = collections.Counter(queues) if conf.METRICS else {}
    added = "".join(f"{queue}\n{count}\n" for queue, count in counted.items())
    args: list[scripts.Arg] = [workflow_id, result_ttl_ms(), added, len(fields) // 2, *fields]
    for number, message, payload in roots:
        if settled_elsewhere(message.id):  # released through the outbox
            script_keys = [*script_keys[:4], released_key()]
        else:
            script_keys += [ready_key(message.queue, registry()), result_key(message.id)]
        args += [number, payload, rank(message.priority)]
    return scripts.load("flow_create"), script_keys, args


def flow_settle_call(*, workflow_id: str, step: int, state: str, record: bytes) -> scripts.Call:
    """lua/flow_settle.lua: settle the final outcome (``state``: S, F or C; ``record``:
    its return value or failure record) of a step that ran in another home."""
    script_keys = [*workflow_keys(workflow_id), released_key()]
    return scripts.load("flow_settle"), script_keys, [step, state, record, result_ttl_ms()]


def flow_release_call(*, task_id: str, entry: bytes) -> scripts.Call:
    """lua/flow_release.lua: enqueue a released step in its home, unless it was already
    (``entry``: its entry in the workflows' outbox, lines of its queue, rank, payload)."""
    queue = entry.split(b"\n", 1)[0].decode("utf-8", "replace")
    head = task_home(task_id)
    script_keys = [result_key(task_id), ready_key(queue, head), counter_key(head)]
    script_keys.append(waiting_key(head))
    return scripts.load("flow_release"), script_keys, [task_id, entry, result_ttl_ms()]


def flow_cancel_call(
    *, workflow_id: str, steps: Sequence[tuple[str, str]], terminate: bool
) -> scripts.Call:
    """lua/flow_cancel.lua: cancel a workflow (``steps``: each step's task id and queue)."""
    script_keys = [*workflow_keys(workflow_id), running_tasks_key(registry())]
    elsewhere = ""  # (a step in another home: see the script)
    for task_id, queue in steps:
        if settled_elsewhere(task_id):
            script_keys += [released_key(), *[flow_key(workflow_id)] * 3]
            elsewhere += "1"
            continue
        elsewhere += "0"
        script_keys += [
            result_key(task_id),
            ready_key(queue, task_home(task_id)),
            delayed_key(queue, task_home(task_id)),
            terminate_key(task_id),
        ]
    args: list[scripts.Arg] = [
        "terminate" if terminate else "",
        result_ttl_ms(),
        TERMINATE_WAIT_MS,
        elsewhere,
    ]
    return scripts.load("flow_cancel"), script_keys, args


def claim_call(*, claims: Sequence[TickClaim]) -> scripts.Call:
    """lua/schedule_claim.lua: claim due ticks of schedules, enqueueing the tasks of queues
    in the registry's home (the others' are enqueued before: :func:`tick_enqueue_call`)."""
    here = registry()
    script_keys = [schedule_next_key(), schedule_last_key(), counter_key(here)]
    args: list[scripts.Arg] = [result_ttl_ms()]
    for claim in claims:
        action = "skip"
        if claim.run:
            action = "run" if task_home(claim.message.id) == here else "ran"
        if action == "run":
            script_keys += [ready_key(claim.message.queue), result_key(claim.message.id)]
        else:
            script_keys += [schedule_next_key(), schedule_last_key()]
        args += [
            claim.schedule,
            claim.tick,
            claim.following,
            action,
            claim.payload,
            rank(claim.message.priority),
            claim.message.id,
            claim.message.queue if conf.METRICS and action == "run" else "",
        ]
    return scripts.load("schedule_claim"), script_keys, args
