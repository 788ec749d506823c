"""TaskStore: every command on the task system's keys."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar

import redis
from redis import Redis
from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError

from ... import keys, scripts
from ...conf import conf, user_settings
from ...connection import REDIS_DOWN, OneConnection, text
from ...exceptions import QueueFull, TaskNotCancellable, TaskNotDurable
from ..messages import NOW, Due, MalformedTask, TaskMessage, flow_of, task_id_of, validate_queue
from . import replies
from .calls import (
    cancel_call,
    claim_call,
    enqueue_call,
    entry_heads_call,
    flow_cancel_call,
    flow_create_call,
    flow_release_call,
    flow_settle_call,
    forget_call,
    heartbeat_call,
    purge_call,
    recover_call,
    renew_call,
    requeue_dead_call,
    tick_enqueue_call,
)
from .layout import (
    count_homes,
    dead_key,
    delayed_key,
    find_nodes_again,
    flow_key,
    flows_done_key,
    flows_live_key,
    head_of,
    home,
    homes,
    homes_of,
    lease_copy_key,
    leases_key,
    limit_held_key,
    limit_wait_key,
    limits_key,
    limits_waiting_key,
    own_homes,
    partitions,
    partitions_key,
    queue_homes,
    queues_key,
    ready_key,
    registry,
    released_key,
    result_key,
    result_ttl_ms,
    running_key,
    running_tasks_key,
    schedule_last_key,
    schedule_next_key,
    settled_elsewhere,
    settled_key,
    shared_home,
    stats_key,
    task_home,
    tasks_client,
    terminate_key,
    totals_key,
    unique_key,
    waiting_key,
    workers_key,
)
from .records import (
    Attempt,
    DeadLetter,
    Enqueued,
    Fetched,
    Glimpse,
    Heartbeat,
    LimitUse,
    LogLine,
    QueueCounts,
    RunningEntry,
    TaskRecord,
    TickClaim,
    WaitingTask,
    WorkerInfo,
)
from .replies import fields_of

logger = logging.getLogger("redis_components.tasks")


def raw(client: Any, *command: Any, **options: Any) -> Any:
    """Run a command whose reply holds payloads, which may not be UTF-8: never decoded.

    ``options`` go to redis-py's reply parser (``withscores=True`` for ZRANGE ... WITHSCORES).
    """
    return client.execute_command(*command, **options, **{NEVER_DECODE: True})


def _read(client: Any, key: str, task_ids: Sequence[str]) -> dict[bytes, bytes]:
    """The entries of these tasks in the outbox ``key`` (a HASH), those it holds."""
    values = raw(client, "HMGET", key, *task_ids) if task_ids else []
    return {i.encode(): v for i, v in zip(task_ids, values, strict=True) if v}


def _pairs(reply: list[bytes]) -> dict[bytes, bytes]:
    """A script's flat list of pairs as a dict."""
    return dict(zip(reply[::2], reply[1::2], strict=True))


def queue_limit(queue: str) -> int:
    """The maximum number of waiting tasks of ``queue`` (0: unbounded)."""
    return _limit(user_settings(), queue)


def _limit(options: dict[str, Any], queue: str) -> int:
    limits = options.get("TASK_QUEUE_LIMITS")
    return int(limits.get(queue, 0)) if isinstance(limits, dict) else 0


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


def _requeueable(entry: bytes) -> TaskMessage | None:
    try:
        data = json.loads(entry)
        message = TaskMessage.decode(data["task"]) if isinstance(data, dict) else None
    except (MalformedTask, ValueError, KeyError, TypeError, RecursionError):
        return None
    return message


# A list page reads at most this much of the start of an entry (a payload, a dead
# letter): enough for a task's names, never megabytes of arguments.
GLIMPSE_BYTES = 4096
# ... and of a dead letter's end: its traceback (at most MAX_TRACEBACK characters, mostly
# ASCII), which follows its reason and error.
DEAD_LETTER_END_BYTES = 32_768

# A queue with no task finished in this many hours (those the admin pages chart) is idle.
RECENT_HOURS = 6


def _ms(seconds: Any, micros: Any) -> int:
    return int(seconds) * 1000 + int(micros) // 1000


def _ticks(stored: Any) -> dict[str, int]:
    """Schedules' ticks by name, those that are integers."""
    ticks = {name: replies.integer(value) for name, value in fields_of(stored).items()}
    return {name: tick for name, tick in ticks.items() if tick is not None}


def _fetched(reply: list[Any]) -> Fetched:
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


_T = TypeVar("_T")


# What a call through a node's client meets when the cluster's map of slots it was given
# is out of date: the node is gone, is being replaced, or serves other slots now.
_STALE_NODES = (*REDIS_DOWN, redis.exceptions.MovedError, redis.exceptions.ReadOnlyError)


def _finding_nodes_again(cls: type[_T]) -> type[_T]:
    """Make every public method of ``cls``, when a node's client meets a stale map of the
    slots (a lost connection, ``CLUSTERDOWN``, ``MOVED``), have a Redis Cluster's client
    read again which node serves which slots before the error goes on (nothing on one
    server). A failover promotes a replica, and the node clients that
    :func:`~.layout.tasks_client` hands out go on naming the dead master until then: a
    web process's next call after the failover reaches the new one. A store given its
    clients (a worker's) leaves it to the worker, which does so outside its locks; a
    call made within another reads the map once."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def finding(store: TaskStore, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(store, *args, **kwargs)
            except _STALE_NODES as error:
                mine = store._client is None and store._at is None
                if mine and not getattr(error, "nodes_found_again", False):
                    find_nodes_again()
                    error.nodes_found_again = True  # type: ignore[union-attr]
                raise

        return finding

    for name, method in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(method):
            setattr(cls, name, wrap(method))
    return cls


@_finding_nodes_again
class TaskStore:
    """The task system's keys in Redis, read and written for the rest of the app.

    ``TaskStore()`` uses the task system's client (on a cluster, the node of the
    registry's hash tag); a worker gives its own (a pool no task shares, and for its
    loop a :class:`~redis_components.connection.OneConnection`), and ``at``, which
    gives its client for any other home. A store holds no state of its own: make one
    where it is needed.
    """

    def __init__(self, client: Any = None, at: Callable[[str], Any] | None = None) -> None:
        self._client = client
        self._at = at

    @property
    def client(self) -> Any:
        """The client for the registry's home: the given one, else ``at``'s, else the
        task system's (looked up each time: on a cluster the node of its hash tag may
        move)."""
        if self._client is not None:
            return self._client
        return tasks_client() if self._at is None else self._at(registry())

    def at(self, head: str) -> Any:
        """The client for the home ``head`` (:attr:`client` for the registry's, unless
        ``at`` was given)."""
        if self._at is not None:
            return self._at(head)
        return self.client if head == registry() else tasks_client(head)

    def _on(self, script_keys: Sequence[str]) -> Any:
        """The client for a script whose keys are ``script_keys`` (all of one home)."""
        return self.at(head_of(script_keys[0])) if script_keys else self.client

    def _homes(self) -> list[str]:
        return homes(self.known_queue_names)

    def _by_client(self, heads: Sequence[str]) -> list[tuple[Any, list[int]]]:
        """The clients of the homes ``heads``, each with the positions of its heads in
        ``heads`` (on a cluster, one client per node, whatever the homes there)."""
        clients: dict[str, Any] = {}
        by_client: dict[int, tuple[Any, list[int]]] = {}
        for i, head in enumerate(heads):
            if head not in clients:
                clients[head] = self.at(head)
            client = clients[head]
            by_client.setdefault(id(client), (client, []))[1].append(i)
        return list(by_client.values())

    def _each_home(self, commands: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run ``commands`` (each: the head of the home of its keys, then the command),
        never decoded, in one pipeline per client of their homes: their replies, in
        order."""
        found: list[Any] = [None] * len(commands)
        for client, indexes in self._by_client([head for head, _ in commands]):
            pipe = client.pipeline(transaction=False)
            for i in indexes:
                raw(pipe, *commands[i][1])
            for i, reply in zip(indexes, pipe.execute(), strict=True):
                found[i] = reply
        return found

    def _run_each(self, calls: Sequence[scripts.Call]) -> list[Any]:
        """Run ``calls`` (each in one home) in one pipeline per client of their homes:
        their replies, in order. A script's error is raised once all have run."""
        found: list[Any] = [None] * len(calls)
        for client, indexes in self._by_client([head_of(call[1][0]) for call in calls]):
            replies = scripts.run_many(client, [calls[i] for i in indexes])
            for i, reply in zip(indexes, replies, strict=True):
                found[i] = reply
        for reply in found:
            if isinstance(reply, Exception):
                raise reply
        return found

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
        limit, shares = _limit(options, message.queue), partitions(message.queue)
        call = enqueue_call(
            message=message,
            payload=payload,
            due=due,
            limit=-(-limit // shares),  # (each partition holds its share, rounded up)
            unique_key=(unique_key(message.digest(), task_home(message.id)) if unique_for else ""),
            unique_ms=math.ceil(unique_for * 1000) if unique_for else 0,
        )
        replicas = int(options.get("QUEUE_WAIT_REPLICAS") or 0)  # as conf reads it
        reply, problem = self._run_durable(call, f"Task {message.id} was enqueued", replicas)
        if int(reply[0]) == 0:
            raise QueueFull(message.queue, limit, shares)
        if int(reply[0]) == 2:
            return Enqueued(at_ms=0, duplicate_of=text(reply[1]))
        if problem:
            raise TaskNotDurable(problem, message.id)
        return Enqueued(at_ms=int(reply[1]))

    def _run(
        self, call: scripts.Call, *, raw: bool = False, meanwhile: Callable[[], None] | None = None
    ) -> Any:
        script, script_keys, args = call
        return script(self._on(script_keys), script_keys, args, raw=raw, meanwhile=meanwhile)

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
        reply, acknowledged = scripts.run_and_wait(self._on(call[1]), call, replicas, timeout)
        if acknowledged >= replicas:
            return reply, ""
        return reply, (
            f"{done}, but {acknowledged} of {replicas} replicas acknowledged it within "
            f"{timeout:g} s"
        )

    def fetch(self, call: scripts.Call, *, meanwhile: LogLine | None = None) -> Fetched:
        """Run a :func:`fetch_call`: record an outcome, start a task held ahead, move due
        delayed tasks and take a task, in one script.

        A worker calls it through its :class:`WorkerStore`, which owns the keys, the mode
        and the hour; its loop's gives it a
        :class:`~redis_components.connection.OneConnection`. ``meanwhile``: a
        :class:`LogLine` to write while the server runs the script (on such a
        connection), or else after it.
        """
        script, script_keys, args = call
        client = self._on(script_keys)
        held = isinstance(client, OneConnection)
        try:
            reply = script(
                client, script_keys, args, raw=True, meanwhile=meanwhile if held else None
            )
        finally:
            if meanwhile is not None:
                meanwhile()  # (written once: again, it writes nothing)
        return _fetched(reply)

    def send_fetch(self, call: scripts.Call, *, meanwhile: LogLine | None = None) -> None:
        """Send a :func:`fetch_call` down the store's
        :class:`~redis_components.connection.OneConnection` without waiting for its
        reply, which :meth:`receive_fetch` reads (before any other command on it)."""
        script, script_keys, args = call
        client: Any = self._on(script_keys)
        try:
            client.send("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
        finally:
            if meanwhile is not None:
                meanwhile()

    def receive_fetch(self, call: scripts.Call) -> Fetched:
        """The reply to :meth:`send_fetch` of ``call`` (run again if the server had
        forgotten the script: then it had not run)."""
        client: Any = self._on(call[1])
        try:
            reply = client.read(**{NEVER_DECODE: True})
        except NoScriptError:
            reply = self._run(call, raw=True)
        return _fetched(reply)

    def put_back_ahead(self, call: scripts.Call) -> bool:
        """Run a :func:`put_back_call`: whether the task went back to its queue."""
        return bool(self._run(call))

    def limits_run(self, call: scripts.Call) -> None:
        """Run a :func:`limits_run_call`."""
        self._run(call)

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
        terminated.

        The lease is the registry's; the copy in each other home of ``queues`` (the fence
        of the fetches there) gets its expiry, in a pipeline per node that also reads the
        termination requests of the running tasks of those homes."""
        here = registry()
        by_home: dict[str, list[str]] = {head: [] for head in homes_of(queues)}
        by_home.pop(here, None)
        for task_id in running_ids:
            by_home.setdefault(task_home(task_id), []).append(task_id)
        call = heartbeat_call(
            worker_id=worker_id,
            lease_ms=lease_ms,
            info=info,
            queues=queues,
            lead=lead,
            running_ids=by_home.pop(here, []),
        )
        expired, leader, terminate, expiry, registered = self._run(call, raw=True)
        stop = [text(i) for i in terminate]
        commands: list[tuple[str, tuple[Any, ...]]] = []
        asked: list[str | None] = []  # the task each reply is about (None: a copy's)
        for head, ids in by_home.items():
            commands.append((head, ("ZADD", lease_copy_key(head), expiry, worker_id)))
            commands += [(head, ("DEL", terminate_key(task_id))) for task_id in ids]
            asked += [None, *ids]
        replies = self._each_home(commands)  # (a pipeline per node, whatever the homes)
        stop += [i for i, gone in zip(asked, replies, strict=True) if i is not None and gone]
        return Heartbeat(
            expired=expired, leader=bool(leader), terminate=stop, registered=bool(registered)
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

        Each home of ``queues`` is recovered by a script of its own, fenced by the copy of
        the lease there (so with ``only_if_expired``, a home whose copy is alive is left
        as it is); the registry's last, where the lease and the description go. A copy
        can outlive the registry's lease (it is renewed a round trip later, on another
        node's clock): when a home refused, the registry's step waits for a later call
        (``None`` is returned), or nothing would ever recover that home.
        """
        here = registry()
        by_home = homes_of(queues)
        shared = shared_home()
        if shared is not None:  # where it may hold older tasks
            by_home[shared] = list(queues)
        held: dict[str, list[bytes]] = {}
        started: dict[str, int] = {}  # in each home: a crash with others is shared
        for head, served in by_home.items():
            pipe = self.at(head).pipeline(transaction=False)
            for queue in served:
                key = running_key(worker_id, queue, head)
                raw(pipe, "ZRANGE", key, 0, -1, "WITHSCORES", withscores=True)
            pairs = [pair for reply in pipe.execute() for pair in reply]
            held[head] = [payload for payload, _ in pairs]
            started[head] = sum(float(score) >= 0 for _, score in pairs)
        total = sum(started.values())
        order = sorted(by_home, key=lambda head: head == here)
        if here not in by_home:
            order.append(here)  # (no queue: the lease and the description only)
        if only_if_expired and len(order) > 1 and self._lease_alive(worker_id, order):
            return None  # recovered in no home, so that each later counts the others'
        found_any, refused, requeued, buried = False, False, 0, 0
        for head in order:
            if head == here and refused:
                return None  # the lease stays, so that a later pass recovers that home
            payloads = {task_id_of(p): p for p in held.get(head, ())}
            payloads.pop("", None)
            own = started.get(head, 0)
            call = recover_call(
                worker_id=worker_id,
                queues=by_home.get(head, []),
                head=head,
                tasks={task_id: flow_of(payloads[task_id]) for task_id in sorted(payloads)},
                only_if_expired=only_if_expired,
                max_crashes=max_crashes,
                started_elsewhere=total - own,
            )
            result = self._run(call)
            if result is None:  # its lease copy still looked alive: its tasks stay held
                refused, total = True, total - own
            else:
                found_any = True
                requeued, buried = requeued + int(result[0]), buried + int(result[1])
                steps = [task_id for task_id, p in payloads.items() if flow_of(p)]
                if steps and settled_elsewhere(steps[0]):  # (one home: all or none)
                    self.carry_outcomes(head, steps)  # those it dead-lettered or cancelled
        return (requeued, buried) if found_any else None

    def _lease_alive(self, worker_id: str, heads: Sequence[str]) -> bool:
        """Whether the copy of the worker's lease in any of these homes has not run out
        (by the clock of its node)."""
        replies = self._each_home(
            [
                c
                for head in heads
                for c in ((head, ("ZSCORE", lease_copy_key(head), worker_id)), (head, ("TIME",)))
            ]
        )
        for score, (seconds, micros) in zip(replies[::2], replies[1::2], strict=True):
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            if score is not None and float(score) >= now_ms:
                return True
        return False

    def renew_leases(
        self, worker_ids: Sequence[str], lease_ms: int, queues: Sequence[str] = ()
    ) -> int:
        """Renew the leases that these workers (serving ``queues``) hold, and their
        copies in the queues' homes (lua/queue_renew.lua); a worker with none is left
        without. Returns how many of the registry's leases were renewed."""
        if not worker_ids:
            return 0
        heads = ["", *sorted(set(homes_of(queues)) - {registry()})]  # "": the registry's
        calls = [renew_call(head=head, worker_ids=worker_ids, lease_ms=lease_ms) for head in heads]
        return int(self._run_each(calls)[0])  # (a pipeline per node)

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
        moved = left = 0
        for head in queue_homes(queue):  # each home's dead letters go back there
            start = 0
            while True:
                last = start + batch - 1
                entries = raw(self.at(head), "LRANGE", dead_key(queue, head), start, last)
                if not entries:
                    break
                found = [(entry, _requeueable(entry)) for entry in entries]
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
        message = _requeueable(entry)
        if message is None:
            return False
        # In its task's home, or (an id that names none of the queue's) in any of them.
        named = task_home(message.id)
        heads = sorted(queue_homes(queue), key=lambda head: head != named)
        return any(self._requeue(queue, [(entry, message)], head) for head in heads)

    def _requeue(self, queue: str, tasks: Sequence[tuple[bytes, TaskMessage]], head: str) -> int:
        """Requeue these dead letters (each with its task) of the home ``head``; how many
        were moved."""
        if not tasks:
            return 0
        call = requeue_dead_call(queue=queue, entries=tasks, head=head)
        done, problem = self._run_durable(
            call, f"{len(tasks)} dead letters of {queue!r} were requeued"
        )
        if problem:
            logger.warning("%s", problem)
        return int(done)

    def delete_dead_entry(self, queue: str, entry: bytes) -> bool:
        """Delete one dead letter; False if it was gone."""
        validate_queue(queue)
        return any(
            raw(self.at(head), "LREM", dead_key(queue, head), 1, entry)
            for head in queue_homes(queue)
        )

    def cancel(
        self, task_id: str, *, terminate: bool = False
    ) -> Literal["cancelled", "terminating"]:
        """Cancel a task that has not started: it leaves its queue, its result is CANCELLED.

        A running task is refused with :class:`TaskNotCancellable`, unless ``terminate``:
        then its worker settles it at its next heartbeat and leaves its thread behind (told
        to stop; its concurrency permits stay held until its code ends), and
        ``"terminating"`` is returned. A finished task, or an unknown id, is refused too.
        A cancelled unique task frees its key: an equal task may be enqueued at once.
        """
        keys.validate_name(task_id, "task_id", 100)
        done = self._cancel(task_id, terminate=terminate)
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

    def _cancel(self, task_id: str, *, terminate: bool, workflow_cancelled: bool = False) -> int:
        """lua/queue_cancel.lua's reply for the task ``task_id``; a workflow's step in its
        queue's home has its outcome carried to its workflow at once."""
        head = task_home(task_id)
        pipe = self.at(head).pipeline(transaction=False)
        raw(pipe, "HMGET", result_key(task_id), "payload", "message", "unique")
        if settled_elsewhere(task_id):  # a workflow's step waits as this, if it waits
            raw(pipe, "HGET", waiting_key(head), task_id)
        fields, *waits = pipe.execute()
        waiting = waits[0] if waits else None
        payload = waiting or fields[0] or fields[1]
        unique = (fields[2] or b"").decode("utf-8", "replace")
        written = fields[1] or waiting
        try:
            message = TaskMessage.decode(written) if written else None
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
            # (only a key of ours)
            unique=unique if unique.startswith(unique_key("", task_home(task_id))) else "",
            terminate=terminate,
            flow=message.flow if message else None,
            workflow_cancelled=workflow_cancelled,
        )
        done = int(self._run(call))
        if done in (1, -1) and message and message.flow:  # (-1: maybe a gone one's)
            self.carry_step(task_id)
        return done

    def purge(self, queue: str) -> int:
        """Delete the ready, delayed and dead tasks of ``queue``, and those waiting on a
        concurrency limit (in one script per home); return how many. Tasks in progress are
        left to finish; results expire by themselves."""
        validate_queue(queue)
        return sum(int(self._run(purge_call(queue=queue, head=h))) for h in queue_homes(queue))

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
        here = registry()
        forgotten = 0
        local = [name for name in names if home(name) == here]
        if local:
            forgotten = int(self._run(forget_call(names=local, hours=hours)))
        # A queue of another home: its name goes if it was idle, and comes back if it is
        # not idle after that (a task enqueued meanwhile keeps it known, as above).
        elsewhere = [name for name in names if home(name) != here]
        idle = [name for name in elsewhere if self._idle(name, hours)]
        if idle:
            removed = raw(self.client, "SREM", queues_key(), *idle)
            back = [name for name in idle if not self._idle(name, hours)]
            if back:
                raw(self.client, "SADD", queues_key(), *back)
            forgotten += max(0, int(removed) - len(back))
        return forgotten

    def _idle(self, name: str, hours: Iterable[int], heads: Sequence[str] | None = None) -> bool:
        """Whether queue ``name`` holds no task or dead letter, has no task waiting on a
        limit and finished none in ``hours``, in any of its homes (see
        lua/queue_forget.lua); or in the homes ``heads`` only, where no task of any
        queue runs either."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for head in queue_homes(name) if heads is None else heads:
            queue_keys = [ready_key(name, head), delayed_key(name, head), dead_key(name, head)]
            queue_keys += [stats_key(name, hour, head) for hour in hours]
            queue_keys += [running_tasks_key(head)] if heads is not None else []
            commands += [
                (head, ("EXISTS", *queue_keys)),
                (head, ("HEXISTS", limits_waiting_key(head), name)),
            ]
        return not any(int(found) for found in self._each_home(commands))

    def task_records(self, task_ids: Sequence[str]) -> list[TaskRecord | None]:
        """Each task's record (``None`` where none is kept, or it is not one of ours), from
        its result hash and the running hash, in one round trip per home."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for task_id in task_ids:
            head = task_home(task_id)
            commands += [
                (head, ("HGETALL", result_key(task_id))),
                (head, ("HGET", running_tasks_key(head), task_id)),
            ]
        found = self._each_home(commands)
        return [
            replies.task_record(task_id, found[2 * i], found[2 * i + 1])
            for i, task_id in enumerate(task_ids)
        ]

    def queued_message(self, task_id: str) -> TaskMessage | None:
        """The message a task was queued with, while its result is kept (``None`` if it
        is not, or is not one of ours)."""
        found = raw(self.at(task_home(task_id)), "HGET", result_key(task_id), "message")
        try:
            return TaskMessage.decode(found) if found else None
        except MalformedTask:
            return None

    def workers(self) -> list[WorkerInfo]:
        """Every registered worker, live or not yet recovered, by id, with the seconds
        until its lease runs out (by the server's clock), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", workers_key())
        raw(pipe, "ZRANGE", leases_key(), 0, -1, "WITHSCORES", withscores=True)
        pipe.time()
        described, leases, (seconds, micros) = pipe.execute()
        now_ms = _ms(seconds, micros)
        expiry = {replies.text(member): float(score) for member, score in leases}
        found = [
            replies.worker_info(
                worker_id,
                info,
                (expiry[worker_id] - now_ms) / 1000 if worker_id in expiry else -math.inf,
            )
            for worker_id, info in fields_of(described).items()
        ]
        return sorted(found, key=lambda worker: worker.id)

    def worker_queues(self, worker_id: str) -> list[str]:
        """The queues a worker registered to serve ([] if it is gone, or they cannot be
        read)."""
        described = replies.worker_description(raw(self.client, "HGET", workers_key(), worker_id))
        queues = replies.worker_queues(described or {}) or []
        valid = []
        for queue in queues:
            try:
                valid.append(validate_queue(queue))
            except ValueError:
                return []
        return valid

    def queue_counts(self, serving: dict[str, list[str]]) -> dict[str, QueueCounts]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it), in one
        round trip per home."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        heads = {name: queue_homes(name) for name in serving}  # (read once: see layout)
        for name, worker_ids in serving.items():
            for head in heads[name]:
                commands += [
                    (head, ("ZCARD", ready_key(name, head))),
                    (head, ("ZCARD", delayed_key(name, head))),
                    (head, ("LLEN", dead_key(name, head))),
                    (head, ("HGET", limits_waiting_key(head), name)),
                    *(
                        (head, ("ZCARD", running_key(worker_id, name, head)))
                        for worker_id in worker_ids
                    ),
                ]
        counts = iter(self._each_home(commands))
        found = {}
        for name, worker_ids in serving.items():
            summed = [0] * 5
            for _ in heads[name]:
                ready, delayed, dead, on_limits = (next(counts) for _ in range(4))
                held = sum(next(counts) for _ in worker_ids)
                for i, count in enumerate([ready, delayed, dead, held, int(on_limits or 0)]):
                    summed[i] += count
            ready, delayed, dead, held, on_limits = summed
            found[name] = QueueCounts(
                ready=ready, delayed=delayed, dead=dead, in_progress=held, on_limits=on_limits
            )
        return found

    def copy_lease(self, worker_id: str, head: str) -> None:
        """Copy the worker's lease to the home ``head``, which its takes start to serve
        (the heartbeat renews it from then on: see :meth:`heartbeat`)."""
        expiry = raw(self.client, "ZSCORE", leases_key(), worker_id)
        if expiry is not None:
            raw(self.at(head), "ZADD", lease_copy_key(head), expiry, worker_id)

    def forget_count(self, queue: str, count: int, noted_before_ms: int) -> bool:
        """Forget the count ``count`` of partitions noted for ``queue`` (see
        layout.noted_counts) if no process noted it since ``noted_before_ms`` and the
        homes of its partitions (but those of the queue's own count) hold none of its
        tasks, ready, delayed, dead or waiting on a limit, nor any running task. Whether
        it did: not when a process notes it meanwhile (it is watched)."""
        key, field = partitions_key(), f"{queue}#{count}"
        own = own_homes(queue)
        heads = [head for head in count_homes(queue, count) if head not in own]
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

    def holds_tasks(self, head: str, queues: Sequence[str], worker_id: str) -> bool:
        """Whether the home ``head`` holds tasks of ``queues`` (ready, delayed, or taken by
        the worker ``worker_id``), in one round trip."""
        queue_keys = [ready_key(queue, head) for queue in queues]
        queue_keys += [delayed_key(queue, head) for queue in queues]
        queue_keys += [running_key(worker_id, queue, head) for queue in queues]
        return bool(raw(self.at(head), "EXISTS", *queue_keys))

    def dead_letters(self, queue: str, first: int, last: int) -> list[DeadLetter]:
        """The dead letters of ``queue`` from ``first`` to ``last`` (LRANGE's indexes: the
        newest is last), read whole."""
        found = [
            entry
            for head, start, end in self._dead_spans(queue, first, last)[1]
            for entry in raw(self.at(head), "LRANGE", dead_key(queue, head), start, end)
        ]
        return [replies.read_dead_letter(queue, entry) for entry in found]

    def _dead_spans(
        self, queue: str, first: int, last: int
    ) -> tuple[int | None, list[tuple[str, int, int]]]:
        """Where the dead letters of ``queue`` from ``first`` to ``last`` (LRANGE's
        indexes) are (see :meth:`_spans`): the lists of its homes read as one, the older
        home's first."""
        heads = queue_homes(queue)[::-1]
        return self._spans(heads, lambda head: ("LLEN", dead_key(queue, head)), first, last)

    def _spans(
        self,
        heads: Sequence[str],
        count: Callable[[str], tuple[str, str]],
        first: int,
        last: int,
    ) -> tuple[int | None, list[tuple[str, int, int]]]:
        """Where the entries from ``first`` to ``last`` (indexes, negative from the end)
        of a key in each of these homes, read as one in their order, are: a home's head
        and the indexes there, for each home that holds some (``count``: the command
        that counts a home's). The total of them is given, or ``None`` for one home: its
        indexes are its key's."""
        if len(heads) == 1:
            return None, [(heads[0], first, last)]
        counted = self._each_home([(head, count(head)) for head in heads])
        lengths = [int(length) for length in counted]
        total = sum(lengths)
        low = max(0, first + total if first < 0 else first)
        high = min(total - 1, last + total if last < 0 else last)
        spans, offset = [], 0
        for head, length in zip(heads, lengths, strict=True):
            start, end = max(low, offset), min(high, offset + length - 1)
            if start <= end:
                spans.append((head, start - offset, end - offset))
            offset += length
        return total, spans

    def dead_letter_glimpses(
        self, queue: str, first: int, last: int
    ) -> tuple[int, list[DeadLetter]]:
        """How many dead letters ``queue`` holds, and those from ``first`` to ``last``
        (LRANGE's indexes), each read in part when it is long (see
        :func:`replies.glimpsed_dead_letter`), in one round trip per home (and one for
        their lengths, when there are several)."""
        total, spans = self._dead_spans(queue, first, last)
        found: list[Glimpse] = []
        for head, start, end in spans:
            listed, glimpsed = self._glimpses(
                dead_key(queue, head),
                start,
                end,
                start_bytes=GLIMPSE_BYTES,
                end_bytes=DEAD_LETTER_END_BYTES,
            )
            found += glimpsed
            total = listed if total is None else total  # (one home: its list's length)
        return total or 0, [
            replies.glimpsed_dead_letter(queue, glimpse.start, glimpse.end, glimpse.size)
            for glimpse in found
        ]

    def waiting(
        self, queue: str, state: Literal["ready", "delayed"], offset: int, count: int
    ) -> tuple[int, list[WaitingTask]]:
        """How many tasks wait in the ``state`` set of ``queue``, and ``count`` of them from
        ``offset`` in the order they will run, each read in part when it is long, in one
        round trip per home (and one for their sizes, when there are several: the queue's
        own home's, partition by partition, then those of the shared home, written by an
        earlier release)."""
        key_of = ready_key if state == "ready" else delayed_key
        total, spans = self._spans(
            queue_homes(queue),
            lambda head: ("ZCARD", key_of(queue, head)),
            offset,
            offset + count - 1,
        )
        found: list[Glimpse] = []
        for head, start, end in spans:
            held, glimpsed = self._glimpses(
                key_of(queue, head), start, end, start_bytes=GLIMPSE_BYTES
            )
            found += glimpsed
            total = held if total is None else total  # (one home: its set's size)
        waiting = []
        for glimpse in found:
            score = float(glimpse.score)
            due_ms = int(score) if state == "delayed" and math.isfinite(score) else None
            waiting.append(replies.waiting_task(glimpse.start, glimpse.size, due_ms))
        return total or 0, waiting

    def dead_letter_at(self, queue: str, index: int) -> bytes | None:
        """The dead-letter entry at ``index`` (0: the newest), or ``None``."""
        for head, at, _ in self._dead_spans(queue, -index - 1, -index - 1)[1]:
            found: bytes | None = raw(self.at(head), "LINDEX", dead_key(queue, head), at)
            return found
        return None

    def _glimpses(
        self, key: str, first: int, last: int, *, start_bytes: int, end_bytes: int = 0
    ) -> tuple[int, list[Glimpse]]:
        """How many entries ``key`` (a ZSET or LIST) holds, and a glimpse of those from
        ``first`` to ``last`` (negative: from the end): their first ``start_bytes`` and last
        ``end_bytes`` bytes, never a page of whole entries (one round trip)."""
        call = entry_heads_call(
            key=key, first=first, last=last, start_bytes=start_bytes, end_bytes=end_bytes
        )
        total, *rest = self._run(call, raw=True)
        found = [
            Glimpse(start=rest[i], end=rest[i + 1], size=int(rest[i + 2]), score=rest[i + 3])
            for i in range(0, len(rest), 4)
        ]
        return int(total), found

    def running_records(self) -> list[RunningEntry]:
        """Every attempt running now, in two round trips per home."""
        running = self._each_home(
            [(head, ("HGETALL", running_tasks_key(head))) for head in self._homes()]
        )
        attempts = {k: v for found in running for k, v in fields_of(found).items()}
        messages = self._each_home(
            [(task_home(i), ("HGET", result_key(i), "message")) for i in attempts]
        )
        return [
            RunningEntry(task_id, attempt, replies.task_name(message))
            for (task_id, held), message in zip(attempts.items(), messages, strict=True)
            for attempt in Attempt.all_of(held)
        ]

    def minute_counts(
        self, queues: Sequence[str], hours: int
    ) -> tuple[int, dict[str, dict[int, dict[str, int]]]]:
        """The server's minute (since the epoch) and, per queue, what its workers finished
        in each minute of the last ``hours`` hours (by minute, then kind: "processed",
        "failed", "retried"), in a round trip per home after one for the clock."""
        seconds, _ = self.client.time()
        now_minute = int(seconds) // 60
        hour = now_minute // 60
        first = now_minute - hours * 60 + 1
        heads = {name: queue_homes(name) for name in queues}  # (read once: see layout)
        found_hours = iter(
            self._each_home(
                [
                    (head, ("HGETALL", stats_key(name, h, head)))
                    for name in queues
                    for head in heads[name]
                    for h in range(hour - hours, hour + 1)
                ]
            )
        )
        found: dict[str, dict[int, dict[str, int]]] = {}
        for name in queues:
            summed = found[name] = {}
            for _ in heads[name]:
                merged: dict[str, bytes] = {}
                for _ in range(hours + 1):
                    merged.update(fields_of(next(found_hours)))
                for minute, kinds in replies.minute_counts(merged, first).items():
                    for kind, count in kinds.items():
                        at = summed.setdefault(minute, {})
                        at[kind] = at.get(kind, 0) + count
        return now_minute, found

    def totals(self) -> dict[str, float]:
        """The metrics' running totals ("<queue>:<outcome>:<bucket>" and "<queue>:us"),
        those that are numbers."""
        found: dict[str, float] = {}
        for head in self._homes():
            for name, value in fields_of(raw(self.at(head), "HGETALL", totals_key(head))).items():
                try:
                    found[name] = found.get(name, 0.0) + float(value)
                except ValueError:
                    continue
        return found

    def schedule_ticks(self) -> tuple[dict[str, int], int]:
        """Each schedule's next tick (epoch ms; those that are numbers) and the server's
        time (ms)."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        pipe.time()
        stored, (seconds, micros) = pipe.execute()
        return _ticks(stored), _ms(seconds, micros)

    def start_schedule(self, name: str, first_tick: int) -> None:
        """Record a new schedule's first tick, unless a scheduler already did."""
        self.client.hsetnx(schedule_next_key(), name, first_tick)

    def schedule_records(self) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
        """Each schedule's next tick (epoch ms), and its last run (its tick and the task it
        enqueued); what cannot be read is left out."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        raw(pipe, "HGETALL", schedule_last_key())
        next_ticks, last_runs = pipe.execute()
        lasts = {}
        for name, value in fields_of(last_runs).items():
            tick, _, task_id = value.decode("utf-8", "replace").partition(" ")
            try:
                lasts[name] = (int(tick), keys.validate_name(task_id, "task_id", 100))
            except ValueError:
                continue
        return _ticks(next_ticks), lasts

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
        elsewhere = [message.id for _, message, _ in roots if settled_elsewhere(message.id)]
        # Written to the workflows' outbox: enqueued in their homes now.
        if elsewhere and self.carry_released(elsewhere) < len(elsewhere) and not problem:
            problem = (
                f"Workflow {workflow_id} was enqueued, but some of its first steps did not "
                "reach enough replicas in time (a worker's heartbeat enqueues them again)"
            )
        if problem:
            raise TaskNotDurable(problem, workflow_id)
        return int(created)

    def carry_step(self, task_id: str, known: bytes | None = None, *, delete: bool = True) -> int:
        """Carry the outcome of the workflow's step ``task_id`` from its home's outbox
        (:meth:`carry_outcomes`; ``known``: its entry, when the caller knows it), if it
        lives in another home than its workflow (no round trip when it does not); how
        many entries (0 or 1) it carried."""
        if not settled_elsewhere(task_id):
            return 0
        entries = None if known is None else {task_id.encode(): known}
        return self.carry_outcomes(task_home(task_id), [task_id], entries, delete=delete)

    def carry_outcomes(
        self,
        head: str,
        task_ids: Sequence[str],
        entries: dict[bytes, bytes] | None = None,
        *,
        delete: bool = True,
    ) -> int:
        """Carry the final outcomes of workflows' steps that the home ``head`` holds in
        its outbox (those of ``task_ids`` that are there, unless the caller knows their
        ``entries``) to their workflows' home: each is settled there
        (lua/flow_settle.lua), the steps it releases are enqueued in their homes, and
        the entries go (unless not ``delete``: then the caller deletes them, see
        lua/queue_fetch.lua). Any process may carry any entry, as often as it likes:
        each counts once (see lua/lib/flow.lua). How many entries it carried."""
        client, key = self.at(head), settled_key(head)
        if entries is None:
            entries = _read(client, key, task_ids)
        for entry in entries.values():
            self._settle(entry)
        if delete and entries:
            raw(client, "HDEL", key, *entries)
        return len(entries)

    def _settle(self, entry: bytes) -> None:
        """Settle an entry of a home's outbox in its workflow's home, and enqueue the
        steps that this releases."""
        step, workflow, _, state, record = entry.split(b" ", 4)
        call = flow_settle_call(
            workflow_id=workflow.decode(), step=int(step), state=state.decode(), record=record
        )
        self.carry_released(_pairs(self._run(call, raw=True)))

    def outbox_entries(self, queues: Sequence[str]) -> set[tuple[str, str]]:
        """The entries in the outboxes of ``queues``' homes and in the workflows' outbox,
        each as (its outbox's key, its task id), read in one pipeline per node."""
        if shared_home() is None:  # one server: every workflow settles in place
            return set()
        keys = [settled_key(head) for head in sorted(homes_of(queues))] + [released_key()]
        replies = self._each_home([(head_of(key), ("HKEYS", key)) for key in keys])
        return {(key, text(i)) for key, ids in zip(keys, replies, strict=True) for i in ids}

    def carry_left(self, entries: Iterable[tuple[str, str]]) -> int:
        """Carry these entries of :meth:`outbox_entries` (left by a process that died,
        or lost Redis, before it carried them), those that are still there: how many."""
        by_key: dict[str, list[str]] = {}
        for key, task_id in entries:
            by_key.setdefault(key, []).append(task_id)
        released = by_key.pop(released_key(), [])
        carried = sum(self.carry_outcomes(head_of(key), ids) for key, ids in by_key.items())
        return carried + (self.carry_released(released) if released else 0)

    def carry_released(self, entries: Sequence[str] | dict[bytes, bytes]) -> int:
        """Enqueue in their queues' homes the steps waiting in the workflows' outbox
        (``entries``: their ids, or the entries read already), each once
        (lua/flow_release.lua), in one pipeline per node, and take them out of it: with
        ``QUEUE_WAIT_REPLICAS``, once the replicas have them, as for any enqueue (one
        ``WAIT`` per node; the steps of a node whose replicas were late stay, for a
        later carry). How many it carried."""
        key = released_key()
        if not isinstance(entries, dict):
            entries = _read(self.client, key, entries)
        ids = list(entries)
        calls = [flow_release_call(task_id=i.decode(), entry=entries[i]) for i in ids]
        replicas, timeout = conf.QUEUE_WAIT_REPLICAS or 0, conf.QUEUE_WAIT_TIMEOUT
        carried: list[bytes] = []
        errors: list[Exception] = []
        for client, indexes in self._by_client([head_of(call[1][0]) for call in calls]):
            mine = [calls[i] for i in indexes]
            if replicas:
                replies, acknowledged = scripts.run_many_and_wait(client, mine, replicas, timeout)
            else:
                replies, acknowledged = scripts.run_many(client, mine), 0
            late = acknowledged < replicas
            if late:
                logger.warning(
                    "Workflow steps released: %d, but %d of %d replicas acknowledged "
                    "them within %g s; they stay in the workflows' outbox for now",
                    *(len(mine), acknowledged, replicas, timeout),
                )
            for i, reply in zip(indexes, replies, strict=True):
                if isinstance(reply, Exception):
                    errors.append(reply)
                elif not late:
                    carried.append(ids[i])
        if carried:
            raw(self.client, "HDEL", key, *carried)
        if errors:  # (after the others are out of the outbox)
            raise errors[0]
        return len(carried)

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
        cancelled, status, dropped, running, *elsewhere = self._run(call, raw=True)
        queued, outboxed = ([text(task_id) for task_id in ids] for ids in elsewhere)
        for task_id in outboxed:  # (its result, or a tombstone: see flow_release.lua)
            pipe = self.at(task_home(task_id)).pipeline(transaction=False)
            raw(pipe, "HSETNX", result_key(task_id), "status", "CANCELLED")
            raw(pipe, "PEXPIRE", result_key(task_id), result_ttl_ms())
            pipe.execute()
        # The steps in their queues' homes, each cancelled there (and those it took out
        # of the workflows' outbox, lest a carrier that read them enqueued them since).
        for task_id in [*queued, *outboxed]:
            with contextlib.suppress(TaskNotCancellable):  # (its result expired)
                done = self._cancel(task_id, terminate=terminate, workflow_cancelled=True)
                running += done in (0, 2)
                dropped += done == 1 and task_id in queued
        return bool(cancelled), (None if status is None else text(status)), dropped, running

    def limits_in_use(self, count: int = 100) -> tuple[int, list[LimitUse]]:
        """How many concurrency limits are in use, and the first ``count`` of them, by key
        (a limit in use in several homes once per home)."""
        total, uses = 0, list[LimitUse]()
        for head in self._homes():
            client = self.at(head)
            total += int(client.hlen(limits_key(head)))
            found: dict[bytes, bytes] = {}
            cursor = 0
            while len(uses) + len(found) < count:
                cursor, page = raw(client, "HSCAN", limits_key(head), cursor, "COUNT", count)
                found.update(page)
                if int(cursor) == 0:
                    break
            found = dict(list(found.items())[: count - len(uses)])
            pipe = client.pipeline(transaction=False)
            for key in found:
                name = text(key)
                pipe.scard(limit_held_key(head, name))
                pipe.zcard(limit_wait_key(head, name))
            counts = pipe.execute()
            uses += [
                LimitUse(text(key), int(limit), int(counts[2 * i]), int(counts[2 * i + 1]))
                for i, (key, limit) in enumerate(found.items())
            ]
        return total, sorted(uses, key=lambda use: use.key)

    def workflow_ids(self, limit: int) -> tuple[list[str], list[str]]:
        """The ids of the oldest ``limit`` live workflows and of the latest ``limit``
        finished ones still kept."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "ZRANGE", flows_live_key(), 0, limit - 1)
        raw(pipe, "ZREVRANGE", flows_done_key(), 0, limit - 1)
        live, done = pipe.execute()
        return [replies.text(i) for i in live], [replies.text(i) for i in done]

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
        enqueued its task if ``run``): another scheduler may have been first.

        A task whose queue has a home of its own is enqueued there first (refused when
        it was already: its id is the tick's), then its tick is claimed with the others.
        A tick that another scheduler has claimed meanwhile enqueues nothing there.
        """
        elsewhere = [c for c in claims if c.run and task_home(c.message.id) != registry()]
        if elsewhere:
            nexts = self.client.hmget(schedule_next_key(), [c.schedule for c in elsewhere])
            for claim, following in zip(elsewhere, nexts, strict=True):
                if following is None or int(following) != claim.tick:
                    continue  # claimed or skipped by another scheduler meanwhile
                _, problem = self._run_durable(
                    tick_enqueue_call(claim), f"Task {claim.message.id} was enqueued"
                )
                if problem:
                    logger.warning("%s", problem)
        claimed, problem = self._run_durable(
            claim_call(claims=claims), "Schedules' ticks were enqueued"
        )
        if problem:
            logger.warning("%s", problem)
        return [bool(done) for done in claimed]


def cancel(task_id: str, *, terminate: bool = False) -> Literal["cancelled", "terminating"]:
    """Cancel a task that has not started (see :meth:`TaskStore.cancel`)."""
    return TaskStore().cancel(task_id, terminate=terminate)
