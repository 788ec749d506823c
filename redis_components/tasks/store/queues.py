"""The queues facet of the task store: enqueue, the worker's fetches, dead letters put
back or deleted, cancel (a workflow's too: built on the flows facet), purge, and
forgetting idle queues and counts of partitions no process notes any more."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import redis
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError

from ... import keys, scripts
from ...conf import user_settings
from ...connection import OneConnection, text
from ...exceptions import InvalidInput, QueueFull, TaskNotCancellable, TaskNotDurable
from ..messages import NOW, Due, TaskMessage, validate_queue
from . import calls, layout, replies
from .flows import Flows
from .records import Adding, Enqueued, Fetched, LogLine
from .router import raw

logger = logging.getLogger("redis_components.tasks")


def queue_limit(queue: str) -> int:
    """The maximum number of waiting tasks of ``queue`` (0: unbounded)."""
    limits = user_settings().get("TASK_QUEUE_LIMITS")
    return int(limits.get(queue, 0)) if isinstance(limits, dict) else 0


# The most tasks Queues.enqueue_many adds in one script call: each call blocks the server
# while it runs (about 5 µs per task), so a large batch takes several, one round trip each.
ENQUEUE_BATCH = 1000


def _adding(
    message: TaskMessage,
    payload: str,
    due: Due,
    unique_for: float | None,
    limits: dict[str, tuple[int, int]],
) -> Adding:
    """How to add a task (``limits``: each queue's limit and partitions, read once)."""
    if len(message.id) != 36 and layout.shared_home() is not None:
        raise InvalidInput(
            "id", f"{message.id!r} names no queue's home: make it with new_task_id(queue)"
        )
    queue = message.queue
    if queue not in limits:
        limits[queue] = (queue_limit(queue), layout.partitions(queue))
    limit, shares = limits[queue]
    head = layout.task_home(message.id)
    return Adding(
        message=message,
        payload=payload,
        due=due,
        limit=limit,
        shares=shares,
        unique_key=layout.unique_key(message.digest(), head) if unique_for else "",
        unique_ms=math.ceil(unique_for * 1000) if unique_for else 0,
    )


def _enqueued(reply: Any) -> Enqueued:
    """What queue_enqueue.lua's reply says of a task it did not refuse."""
    if int(reply[0]) == 2:
        return Enqueued(at_ms=0, duplicate_of=text(reply[1]))
    return Enqueued(at_ms=int(reply[1]))


# A queue with no task finished in this many hours (those the admin pages chart) is idle.
RECENT_HOURS = 6


class Queues(Flows):
    """Enqueue, fetch, dead letters, cancel, purge and forget: what moves tasks."""

    def enqueue(
        self, message: TaskMessage, payload: str, due: Due = NOW, *, unique_for: float | None = None
    ) -> Enqueued:
        """Add a task to its queue, to run when it is ``due``, and write its READY result.

        With ``unique_for`` (seconds), nothing is added when an equal task
        (:meth:`TaskMessage.digest`) was enqueued within that time (``duplicate_of`` names
        it). Raises :class:`QueueFull` when the queue is at its limit, :class:`TaskNotDurable`
        when ``QUEUE_WAIT_REPLICAS`` replicas did not acknowledge, and :class:`InvalidInput`
        for an id that names no queue's home (``new_task_id``): on a cluster, one of 32
        digits would put it where no worker takes."""
        adding = _adding(message, payload, due, unique_for, {})
        call = calls.enqueue_call(adding)
        replicas = int(user_settings().get("QUEUE_WAIT_REPLICAS") or 0)  # as conf reads it
        reply, problem = self._run_durable(call, f"Task {message.id} was enqueued", replicas)
        if int(reply[0]) == 0:
            raise QueueFull(message.queue, adding.limit, adding.shares)
        enqueued = _enqueued(reply)
        if problem and enqueued.duplicate_of is None:  # (a duplicate wrote nothing)
            raise TaskNotDurable(problem, message.id)
        return enqueued

    def enqueue_many(
        self, batch: Sequence[tuple[TaskMessage, str, Due, float | None]]
    ) -> list[Enqueued]:
        """:meth:`enqueue` each of ``batch`` (message, payload, due, unique_for), in one
        script call per home and ``ENQUEUE_BATCH`` tasks (lua/queue_enqueue_many.lua),
        in order. A call is all or nothing: when a queue's limit would be passed, none of
        its tasks is added, and :class:`QueueFull` says how many of the batch the calls
        before it added (they stay: ``QueueFull.written``, by their place in ``batch``).
        The same errors as :meth:`enqueue`, for all; :class:`TaskNotDurable` once all
        are written, naming the first task added by a call the replicas missed."""
        limits: dict[str, tuple[int, int]] = {}
        addings = [_adding(*item, limits) for item in batch]
        homes: dict[str, list[int]] = {}
        for number, adding in enumerate(addings):
            homes.setdefault(layout.task_home(adding.message.id), []).append(number)
        found: dict[int, Enqueued] = {}
        problem = first = ""
        replicas = int(user_settings().get("QUEUE_WAIT_REPLICAS") or 0)
        for head, numbers in homes.items():
            for start in range(0, len(numbers), ENQUEUE_BATCH):
                part = numbers[start : start + ENQUEUE_BATCH]
                call = calls.enqueue_many_call(head, [addings[n] for n in part])
                said = f"{len(part)} tasks were enqueued"
                reply, trouble = self._run_durable(call, said, replicas)
                if not isinstance(reply[0], list):  # {0, the refused one's number}
                    refused = addings[part[int(reply[1]) - 1]]
                    queue = refused.message.queue
                    count = sum(done.duplicate_of is None for done in found.values())
                    full = QueueFull(queue, refused.limit, refused.shares, enqueued=count)
                    full.written = found
                    raise full
                written = dict(zip(part, map(_enqueued, reply), strict=True))
                found.update(written)
                added = [n for n, done in written.items() if done.duplicate_of is None]
                if trouble and added and not problem:
                    problem, first = trouble, addings[added[0]].message.id
        if problem:
            raise TaskNotDurable(problem, first)
        return [found[number] for number in range(len(addings))]

    def fetch(self, call: scripts.Call, *, meanwhile: LogLine | None = None) -> Fetched:
        """Run a :func:`fetch_call` (a :class:`WorkerStore` builds it). ``meanwhile``: a
        :class:`LogLine` to write while the server runs the script (on a ``OneConnection``,
        as a worker's loop gives it), or else after it."""
        script, script_keys, args = call
        client = self._on(script_keys)
        during = meanwhile if isinstance(client, OneConnection) else None
        try:
            reply = script(client, script_keys, args, raw=True, meanwhile=during)
        finally:
            if meanwhile is not None:
                meanwhile()  # (written once: again, it writes nothing)
        return replies.fetched(reply)

    def send_fetch(self, call: scripts.Call, *, meanwhile: LogLine | None = None) -> None:
        """Send a :func:`fetch_call` down the store's ``OneConnection`` without waiting for
        its reply, which :meth:`receive_fetch` reads (before any other command on it)."""
        script, script_keys, args = call
        client: Any = self._on(script_keys)
        try:
            client.send("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
        finally:
            if meanwhile is not None:
                meanwhile()

    def receive_fetch(self, call: scripts.Call, *, again: bool = True) -> Fetched:
        """The reply to :meth:`send_fetch` of ``call`` (run again if the server had
        forgotten the script: then it had not run). ``again=False``: later replies are
        unread, so it is not run again; the connection is closed as lost instead."""
        client: Any = self._on(call[1])
        try:
            reply = client.read(**{NEVER_DECODE: True})
        except NoScriptError:
            if not again:
                client.close(broken=True)
                raise redis.exceptions.ConnectionError(
                    "the server forgot a script while later calls were under way"
                ) from None
            reply = self._run(call, raw=True)
        return replies.fetched(reply)

    def put_back_ahead(self, call: scripts.Call) -> bool:
        """Run a :func:`put_back_call`: whether the task went back to its queue."""
        return bool(self._run(call))

    def save_metadata(self, task_id: str, attempt: str, metadata: str, progress: str = "") -> bool:
        """Save the metadata (JSON) and/or the progress (JSON, no "at"; "": leave it) of a
        task that ``attempt`` ("<take ms> <worker id>") runs, in one script; False when it
        no longer runs it, or its result expired."""
        call = calls.metadata_call(
            task_id=task_id, attempt=attempt, metadata=metadata, progress=progress
        )
        return bool(self._run(call))

    def keep_traces(self, kept: Sequence[tuple[str, str, str]]) -> None:
        """Keep the trace contexts of running attempts (task id, attempt, W3C
        traceparent), each fenced by its attempt, in one pipeline per server."""
        self._run_each([calls.metadata_call(task_id=i, attempt=a, trace=t) for i, a, t in kept])

    def limits_run(self, call: scripts.Call) -> None:
        """Run a :func:`limits_run_call`."""
        self._run(call)

    def requeue_dead(self, queue: str, batch: int = 500) -> tuple[int, int]:
        """Put the dead letters of ``queue`` back on it with fresh retries.

        Returns ``(requeued, left)``: entries that are not a task this version can run are
        left. Each batch moves atomically; an entry removed meanwhile (by another requeue) is
        skipped, so no task is requeued twice."""
        validate_queue(queue)
        moved = left = 0
        for head in layout.queue_homes(queue):  # each home's dead letters go back there
            key, start = layout.dead_key(queue, head), 0
            while True:
                entries = raw(self.at(head), "LRANGE", key, start, start + batch - 1)
                if not entries:
                    break
                found = [(entry, replies.requeueable(entry)) for entry in entries]
                tasks = [(entry, message) for entry, message in found if message is not None]
                left += len(entries) - len(tasks)
                done = self._requeue(queue, tasks, head)
                moved += done
                start += len(entries) - done  # what stayed is before the next batch now
                if tasks and done == 0:  # another process is requeueing the same entries
                    break
        return moved, left

    def requeue_dead_entry(self, queue: str, entry: bytes) -> bool:
        """Put one dead letter back on its queue with fresh retries; False if it is gone or
        is not a task this app can run."""
        validate_queue(queue)
        message = replies.requeueable(entry)
        if message is None:
            return False
        # In its task's home, or (an id that names none of the queue's) in any of them.
        named = layout.task_home(message.id)
        heads = sorted(layout.queue_homes(queue), key=lambda head: head != named)
        return any(self._requeue(queue, [(entry, message)], head) for head in heads)

    def _requeue(self, queue: str, tasks: Sequence[tuple[bytes, TaskMessage]], head: str) -> int:
        """Requeue these dead letters (each with its task) of ``head``; how many moved."""
        if not tasks:
            return 0
        call = calls.requeue_dead_call(queue=queue, entries=tasks, head=head)
        said = f"{len(tasks)} dead letters of {queue!r} were requeued"
        done, problem = self._run_durable(call, said)
        if problem:
            logger.warning("%s", problem)
        return int(done)

    def delete_dead_entry(self, queue: str, entry: bytes) -> bool:
        """Delete one dead letter; False if it was gone."""
        validate_queue(queue)
        return any(
            raw(self.at(head), "LREM", layout.dead_key(queue, head), 1, entry)
            for head in layout.queue_homes(queue)
        )

    def cancel(
        self, task_id: str, *, terminate: bool = False
    ) -> Literal["cancelled", "terminating"]:
        """Cancel a task that has not started: it leaves its queue, its result is CANCELLED.

        A running task is refused with :class:`TaskNotCancellable`, unless ``terminate``: then
        its worker settles it at its next heartbeat and leaves its thread behind (told to stop;
        its concurrency permits stay held until its code ends): ``"terminating"``. A finished
        task, or an unknown id, is refused too. A cancelled unique task frees its key."""
        keys.validate_name(task_id, "task_id", 100)
        task_id = self.current_id(task_id)
        done = self._cancel(task_id, terminate=terminate)
        if done in (1, 2):
            return "cancelled" if done == 1 else "terminating"
        refused = {
            0: "it is running; pass terminate=True (rc_queues --terminate) to stop it",
            -2: "it was already cancelled",
        }
        raise TaskNotCancellable(
            task_id, refused.get(done, "it is not waiting to run: it has finished")
        )

    def _cancel(self, task_id: str, *, terminate: bool, workflow_cancelled: bool = False) -> int:
        """lua/queue_cancel.lua's reply for ``task_id``; a workflow's step in its queue's home
        has its outcome carried to its workflow at once."""
        head = layout.task_home(task_id)
        pipe = self.at(head).pipeline(transaction=False)
        raw(pipe, "HMGET", layout.result_key(task_id), "payload", "message", "unique")
        if layout.settled_elsewhere(task_id):  # a workflow's step waits as this, if it waits
            raw(pipe, "HGET", layout.waiting_key(head), task_id)
        fields, *waits = pipe.execute()
        waiting = waits[0] if waits else None
        payload = waiting or fields[0] or fields[1]
        unique = (fields[2] or b"").decode("utf-8", "replace")
        message = replies.task_message(fields[1] or waiting)
        if payload is None or message is None:
            raise TaskNotCancellable(
                task_id, "no such task is kept (unknown, or its result expired)"
            )
        call = calls.cancel_call(
            task_id=task_id,
            queue=message.queue,
            payload=payload,
            # (only a key of ours)
            unique=unique if unique.startswith(layout.unique_key("", head)) else "",
            terminate=terminate,
            flow=message.flow,
            workflow_cancelled=workflow_cancelled,
        )
        done = int(self._run(call))
        if done in (1, -1) and message.flow:  # (-1: maybe a gone one's)
            self.carry_step(task_id)
        return done

    def purge(self, queue: str) -> int:
        """Delete the ready, delayed and dead tasks of ``queue`` and those waiting on a
        concurrency limit: how many. Tasks in progress are left to finish."""
        validate_queue(queue)
        heads = layout.queue_homes(queue)
        return sum(int(self._run(calls.purge_call(queue=queue, head=head))) for head in heads)

    def forget_queues(self, names: Sequence[str]) -> int:
        """Drop from the known queues those of ``names`` that hold no task or dead letter and
        finished none in the last RECENT_HOURS (a task enqueued meanwhile keeps its queue
        known). Pass only queues no registered worker serves. Returns how many were forgotten."""
        if not names:
            return 0
        hour = int(time.time()) // 3600  # the client's clock: an hour more on each side
        hours = range(hour - RECENT_HOURS - 1, hour + 2)
        here = layout.registry()
        forgotten = 0
        local = [name for name in names if layout.home(name) == here]
        if local:
            forgotten = int(self._run(calls.forget_call(names=local, hours=hours)))
        # A queue of another home: its name goes if it was idle, and comes back if it is
        # not idle after that (a task enqueued meanwhile keeps it known, as above).
        idle = [name for name in names if layout.home(name) != here and self._idle(name, hours)]
        if idle:
            removed = raw(self.client, "SREM", layout.queues_key(), *idle)
            back = [name for name in idle if not self._idle(name, hours)]
            if back:
                raw(self.client, "SADD", layout.queues_key(), *back)
            forgotten += max(0, int(removed) - len(back))
        return forgotten

    def _idle(self, name: str, hours: Iterable[int], heads: Sequence[str] | None = None) -> bool:
        """Whether queue ``name`` holds no task or dead letter, has none waiting on a limit and
        finished none in ``hours``, in any of its homes (as lua/queue_forget.lua checks); or in
        the homes ``heads`` only, where no task of any queue runs either."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for head in layout.queue_homes(name) if heads is None else heads:
            queue_keys = [
                layout.ready_key(name, head),
                layout.delayed_key(name, head),
                layout.dead_key(name, head),
            ]
            queue_keys += [layout.stats_key(name, hour, head) for hour in hours]
            queue_keys += [layout.running_tasks_key(head)] if heads is not None else []
            commands += [
                (head, ("EXISTS", *queue_keys)),
                (head, ("HEXISTS", layout.limits_waiting_key(head), name)),
            ]
        return not any(int(found) for found in self._each_home(commands))

    def forget_count(self, queue: str, count: int, noted_before_ms: int) -> bool:
        """Forget the count ``count`` of partitions noted for ``queue`` (layout.noted_counts) if
        no process noted it since ``noted_before_ms`` and the homes of its partitions (but the
        queue's own) hold none of its tasks, nor any running task. Whether it did (not when a
        process notes it meanwhile: the key is watched)."""
        key, field = layout.partitions_key(), f"{queue}#{count}"
        own = layout.own_homes(queue)
        heads = [head for head in layout.count_homes(queue, count) if head not in own]
        with self.client.pipeline(transaction=True) as pipe:
            pipe.watch(key)
            noted = pipe.hget(key, field)
            if noted is None or int(noted) >= noted_before_ms or not self._idle(queue, (), heads):
                return False
            pipe.multi()
            pipe.hdel(key, field)
            try:
                pipe.execute()
            except redis.WatchError:
                return False
        return True

    def cancel_workflow(
        self, workflow_id: str, steps: Sequence[tuple[str, str]], *, terminate: bool
    ) -> tuple[bool, str | None, int, int]:
        """Cancel a workflow of ``steps`` (task id, queue): whether this call cancelled it, its
        status before (``None``: no such workflow), how many steps were dropped, and how many
        still run."""
        call = calls.flow_cancel_call(workflow_id=workflow_id, steps=steps, terminate=terminate)
        cancelled, status, dropped, running, *elsewhere = self._run(call, raw=True)
        queued, outboxed = ([text(task_id) for task_id in ids] for ids in elsewhere)
        for task_id in outboxed:  # (its result, or a tombstone: see flow_release.lua)
            pipe = self.at(layout.task_home(task_id)).pipeline(transaction=False)
            raw(pipe, "HSETNX", layout.result_key(task_id), "status", "CANCELLED")
            raw(pipe, "PEXPIRE", layout.result_key(task_id), layout.result_ttl_ms())
            pipe.execute()
        # The steps in their queues' homes, each cancelled there (and those it took out
        # of the workflows' outbox, lest a carrier that read them enqueued them since).
        for task_id in [*queued, *outboxed]:
            with contextlib.suppress(TaskNotCancellable):  # (its result expired)
                done = self._cancel(task_id, terminate=terminate, workflow_cancelled=True)
                running += done in (0, 2)
                dropped += done == 1 and task_id in queued
        return bool(cancelled), (None if status is None else text(status)), dropped, running
