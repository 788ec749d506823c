"""Workers: run queued tasks at least once, in priority order, without polling Redis.

``manage.py rc_worker`` starts a :class:`Supervisor`, which forks ``--concurrency``
worker processes, each running a :class:`Worker`. Keys are described in
``queues.py``; every one shares the ``{tasks}`` hash tag, so every script below runs
on Redis Cluster.

Reliable fetch across several queues
------------------------------------
``BLMOVE`` is reliable but watches one list; ``BLPOP`` watches several but a popped
task lives only in the worker's memory (kill the worker and it is gone). So taking a
task and waiting for one are separate:

* **Taking** is one script (``queue_fetch.lua``): it moves the due delayed tasks of
  the worker's queues to their ready lists, then ``LMOVE``\\ s the head of the first
  non-empty queue, in the worker's priority order, into the worker's own in-progress
  list. It also acknowledges the task the worker just finished, so a busy worker needs
  one round trip per task. A task is never only in the worker's memory.
* **Waiting** happens only after a take found nothing, on a Pub/Sub subscription to
  the queues' wake-up channels that is confirmed before the first take. A script
  that makes an empty ready list non-empty (enqueue, the delayed mover, a retry,
  recovery) publishes on the queue's channel, and one that adds a new earliest
  delayed task publishes too, because idle workers sleep until the earliest due time.
  A wake-up cannot be lost: a worker whose take found its queues empty is subscribed
  already, so the first task pushed after that take reaches it; if the subscription
  drops, redis-py resubscribes and the confirmation itself makes the worker take
  again. Idle workers wait with a client-side ``select`` (no blocking command, so the
  server's ``hz`` does not delay them): until the next delayed task is due, a message,
  a signal, or at most one heartbeat interval, the last only as a safety net. An
  idle worker sends nothing to Redis but its heartbeat and that one take per interval.

Every idle worker of a queue wakes for the first task of an empty queue (Pub/Sub is a
broadcast); they race for it with the take script, and each one that finds nothing
goes back to sleep. That costs one take per idle worker per burst of tasks, not per
task: a queue that is not empty publishes nothing.

Delayed tasks are moved by every worker that serves their queue, in the take script,
so several workers (or ``rc_worker --no-scheduler`` ones that do not move) may run at
once: a script is atomic, so each task moves exactly once and no lock is needed.

Heartbeats and recovery
-----------------------
A worker registers (a lease in a ZSET, its queues in a hash) before it takes a task,
and a thread renews the lease (1.5 x ``TASK_HEARTBEAT_INTERVAL``) twice per interval,
whatever the task is doing. The same thread looks for workers whose lease ran out and
moves their in-progress tasks back to the head of their queues (``queue_recover.lua``,
atomic, rechecking the lease), so a killed worker's tasks run again within 2 x the
interval, however long tasks may legitimately run. The supervisor does it at once
for a child process that dies. Each recovery counts a crash against the task; at
``TASK_MAX_CRASHES`` the task is dead-lettered instead of killing workers forever.
The take script refuses to hand a task to a worker that is not registered (recovered
while it was cut off from Redis), so no task is ever held by a worker no one watches.

Signals
-------
Signal handlers only set a flag; a wake-up fd makes the idle wait return at once.
SIGTERM or SIGINT: each worker finishes its task, acknowledges it and exits. A second
signal to the supervisor kills the workers and puts their tasks back at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import multiprocessing
import os
import select
import signal
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import redis
from django.db import close_old_connections, connections
from redis.client import PubSub

from . import scripts
from .conf import conf
from .connection import pubsub as new_pubsub
from .connection import text
from .exceptions import InvalidInput
from .queues import (
    Retry,
    RunningTask,
    Task,
    TaskMessage,
    _current,
    _registry,
    backoff,
    dead_entry,
    dead_key,
    delayed_key,
    leases_key,
    queues_key,
    ready_key,
    running_key,
    tasks_client,
    validate_queue,
    workers_key,
)

logger = logging.getLogger("redis_components.worker")

# Errors that mean "Redis cannot be reached now": wait and try again.
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
# A worker process that dies sooner than this after its start is restarted after a pause.
QUICK_DEATH = 1.0
FORK = multiprocessing.get_context("fork")


def new_worker_id(slot: int = 0) -> str:
    """A unique worker id: host, supervisor pid, slot, random part (never a ``:``)."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host or 'host'}.{os.getpid()}.{slot}.{uuid.uuid4().hex[:6]}"


def recover_worker(
    client: redis.Redis,
    worker_id: str,
    queues: Sequence[str],
    *,
    only_if_expired: bool,
    max_crashes: int,
) -> tuple[int, int] | None:
    """Put a worker's in-progress tasks back at the head of their queues; deregister it.

    With ``only_if_expired``, nothing happens unless its lease has run out (``None`` is
    returned). ``max_crashes`` > 0 counts a crash against each task and dead-letters
    those that reach it. Returns ``(requeued, dead-lettered)``.
    """
    script_keys = [leases_key(), workers_key()]
    args: list[scripts.Arg] = [
        worker_id,
        "expired" if only_if_expired else "now",
        max_crashes,
        conf.TASK_DEAD_LETTER_MAX,
    ]
    for queue in queues:
        script_keys += [running_key(worker_id, queue), ready_key(queue), dead_key(queue)]
        args.append(queue)
    result = scripts.load("queue_recover")(client, script_keys, args)
    if result is None:
        return None
    return int(result[0]), int(result[1])


def server_warnings(client: redis.Redis) -> list[str]:
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


def checked_queues(queues: Sequence[str]) -> list[str]:
    """The queue names in priority order without repeats, or :class:`InvalidInput`."""
    if isinstance(queues, str):
        raise InvalidInput("queues", "must be a list of queue names, not a string")
    names = list(dict.fromkeys(validate_queue(queue, "queues") for queue in queues))
    if not names:
        raise InvalidInput("queues", "must name at least one queue")
    return names


@dataclass
class _Fetched:
    payload: str | None
    position: int  # 1-based index into the worker's queues; -1: the worker is unregistered
    wait_ms: int  # until the next delayed task is due; 0: more are due; -1: none


class Worker:
    """One process's task loop over ``queues``, highest priority first.

    ``scheduler``: also move due delayed tasks of these queues to their ready lists.
    ``burst``: return when no task is ready. ``max_tasks``: return after running this
    many. :meth:`run` blocks; :meth:`stop` (any thread) or :meth:`request_stop` (a
    signal handler, with :attr:`wakeup_fd` given to ``signal.set_wakeup_fd``) make it
    return after the task it is running.
    """

    def __init__(
        self,
        queues: Sequence[str],
        *,
        worker_id: str | None = None,
        scheduler: bool = True,
        burst: bool = False,
        max_tasks: int | None = None,
    ) -> None:
        self.queues = checked_queues(queues)
        if max_tasks is not None and max_tasks < 1:
            raise InvalidInput("max_tasks", f"must be a positive integer, not {max_tasks!r}")
        self.id = worker_id or new_worker_id()
        self.scheduler = scheduler
        self.burst = burst
        self.max_tasks = max_tasks
        self.heartbeat_interval = conf.TASK_HEARTBEAT_INTERVAL
        self.processed = 0
        self._stopping = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._heartbeat_stop = threading.Event()
        self._keys = [leases_key()]
        for queue in self.queues:
            self._keys += [ready_key(queue), delayed_key(queue), running_key(self.id, queue)]
        # Each queue's wake-up channel is named like its ready list.
        self._channels = [ready_key(queue) for queue in self.queues]
        self._mode = "take+move" if scheduler else "take"
        self._info = json.dumps(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": self.queues,
                "started_at": round(time.time(), 3),
            }
        )
        self._pubsub: PubSub | None = None
        # The finished task to acknowledge in the next take: (position, payload).
        self._ack: tuple[int, str] | None = None
        # A rescheduling or dead-lettering still to write (Redis was unreachable).
        self._pending: Callable[[], None] | None = None
        # After a lost connection: a take's reply may have been lost with it.
        self._reclaim = False
        self._down_since: float | None = None

    @property
    def client(self) -> redis.Redis:
        """The client for the task system's keys (looked up each time: it may move)."""
        return tasks_client()

    @property
    def wakeup_fd(self) -> int:
        """A non-blocking fd to pass to ``signal.set_wakeup_fd``: a signal ends an idle wait."""
        return self._wake_w

    def request_stop(self) -> None:
        """Stop after the running task. Only sets a flag: safe in a signal handler."""
        self._stopping = True

    def stop(self) -> None:
        """Stop after the running task, waking an idle wait at once (from any thread)."""
        self._stopping = True
        # A full pipe already holds a wake-up.
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"s")

    def run(self) -> int:
        """Run tasks until stopped (or done, with ``burst``/``max_tasks``); return how many ran."""
        logger.info("Worker %s serving %s", self.id, ", ".join(self.queues))
        heartbeat = threading.Thread(target=self._heartbeat, name="rc-heartbeat", daemon=True)
        crashed = True
        try:
            if not self._register():
                crashed = False
                return 0
            heartbeat.start()
            self._loop()
            crashed = False
        finally:
            self._heartbeat_stop.set()
            if heartbeat.is_alive():
                heartbeat.join()
            self._leave(crashed)
            if self._pubsub is not None:
                self._pubsub.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
        logger.info("Worker %s stopped after %d tasks", self.id, self.processed)
        return self.processed

    # -- the loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            take = self.max_tasks is None or self.processed < self.max_tasks
            try:
                self._settle()
                fetched = self._fetch(take)
                if fetched.position < 0:
                    logger.warning(
                        "Worker %s was taken for dead (its lease ran out) and registers again",
                        self.id,
                    )
                    self._beat()
                    continue
                self._connected()
                if fetched.payload is None:
                    if not take or (self.burst and fetched.wait_ms != 0):
                        break
                    if fetched.wait_ms != 0:
                        self._idle(fetched.wait_ms)
                    continue
            except REDIS_DOWN as error:
                self._disconnected(error)
                continue
            self._run(fetched.position, fetched.payload)
        try:
            self._settle()
            if self._ack is not None:
                self._fetch(take=False)
        except REDIS_DOWN as error:
            logger.warning("Worker %s could not record its last task: %s", self.id, error)

    def _settle(self) -> None:
        """Write what a lost connection left unwritten, then reclaim a lost take."""
        if self._pending is not None:
            self._pending()
            self._pending = None
        if self._reclaim:
            if self._ack is not None:
                self._fetch(take=False)
            # A take whose reply was lost left a task in our in-progress list that we
            # do not know of: put it back (we run nothing now) and register again.
            recover_worker(self.client, self.id, self.queues, only_if_expired=False, max_crashes=0)
            self._beat()
            self._reclaim = False

    def _fetch(self, take: bool) -> _Fetched:
        position, payload = self._ack or (0, "")
        mode = self._mode if take else ""
        reply = scripts.load("queue_fetch")(
            self.client, self._keys, [self.id, position, payload, mode]
        )
        self._ack = None
        raw, position, wait = reply
        return _Fetched(text(raw) if raw is not None else None, int(position), int(wait))

    def _idle(self, wait_ms: int) -> None:
        """Wait for a wake-up message, the next due time, a signal, or one interval."""
        interval = self.heartbeat_interval
        timeout = interval if wait_ms < 0 else min(wait_ms / 1000, interval)
        if self._pubsub is None:
            self._subscribe()
            return  # take again: a task may have come before the subscription
        if self._drain_messages():
            return
        sock = getattr(self._pubsub.connection, "_sock", None)
        if sock is None:  # pragma: no cover - redis-py reconnects lazily
            self._pubsub.get_message(timeout=min(timeout, 0.1))
            return
        select.select([sock, self._wake_r], [], [], timeout)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass
        self._drain_messages()

    def _subscribe(self) -> None:
        pubsub: PubSub = new_pubsub(self.client)
        try:
            pubsub.subscribe(*self._channels)
            confirmed = 0
            deadline = time.monotonic() + 10
            while confirmed < len(self._channels):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise redis.exceptions.TimeoutError("Redis did not confirm the subscription")
                message = pubsub.get_message(timeout=left)
                if message is not None and message["type"] == "subscribe":
                    confirmed += 1
        except BaseException:
            pubsub.close()
            raise
        self._pubsub = pubsub

    def _drain_messages(self) -> bool:
        """Read every pending wake-up (or resubscription) message; True if there was one."""
        assert self._pubsub is not None
        got = False
        while self._pubsub.get_message(timeout=0) is not None:
            got = True
        return got

    # -- running one task ---------------------------------------------------------------

    def _run(self, position: int, payload: str) -> None:
        queue = self.queues[position - 1]
        try:
            message = TaskMessage.decode(payload)
        except ValueError as error:
            logger.error("Dead-lettered a payload in queue %r that is not a task: %s", queue, error)
            self._bury(position, payload, "", "undecodable", f"not a task: {error}", "")
            return
        task = _registry.get(message.task)
        if task is None:
            logger.error(
                "Dead-lettered task %s[%s]: no task is registered under that name",
                message.task,
                message.id,
            )
            problem = f"no task is registered as {message.task!r} in this worker"
            self._bury(position, payload, message.id, "unknown task", problem, "")
            return

        running = RunningTask(message)
        token = _current.set(running)
        close_old_connections()
        started = time.perf_counter()
        try:
            task.func(*message.args, **message.kwargs)
        except Exception as error:
            ms = (time.perf_counter() - started) * 1000
            self._failed(position, payload, message, task, error, ms)
        else:
            ms = (time.perf_counter() - started) * 1000
            if running.deferred_for is not None:
                logger.info(
                    "Task %s[%s] deferred for %.3g s after %.1f ms",
                    message.task,
                    message.id,
                    running.deferred_for,
                    ms,
                )
                self._reschedule(position, payload, message, payload, running.deferred_for)
            else:
                logger.info("Task %s[%s] done in %.1f ms", message.task, message.id, ms)
                self._ack = (position, payload)
        finally:
            _current.reset(token)
            close_old_connections()
        self.processed += 1

    def _failed(
        self,
        position: int,
        payload: str,
        message: TaskMessage,
        task: Task[Any, Any],
        error: Exception,
        ms: float,
    ) -> None:
        name, task_id, max_retries = message.task, message.id, task.max_retries
        described = f"{type(error).__name__}: {error}"
        if isinstance(error, Retry):
            described = f"retry requested: {error.reason}" if error.reason else "retry requested"
        if message.retries < max_retries:
            delay = (
                error.delay
                if isinstance(error, Retry) and error.delay is not None
                else backoff(message.retries, task.retry_backoff)
            )
            logger.warning(
                "Task %s[%s] failed in %.1f ms (%s); retry %d of %d in %.3g s",
                name,
                task_id,
                ms,
                described,
                message.retries + 1,
                max_retries,
                delay,
                exc_info=not isinstance(error, Retry),
            )
            retried = dataclasses.replace(message, retries=message.retries + 1)
            self._reschedule(position, payload, message, retried.encode(), delay)
        else:
            logger.error(
                "Task %s[%s] failed in %.1f ms (%s); dead-lettered after %d retries",
                name,
                task_id,
                ms,
                described,
                message.retries,
                exc_info=not isinstance(error, Retry),
            )
            trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            self._bury(position, payload, task_id, "failed", described, trace)

    def _reschedule(
        self, position: int, payload: str, message: TaskMessage, new_payload: str, delay: float
    ) -> None:
        queue = self.queues[position - 1]

        def write() -> None:
            moved = scripts.load("queue_reschedule")(
                self.client,
                [running_key(self.id, queue), delayed_key(queue), ready_key(queue)],
                [payload, new_payload, round(delay * 1000)],
            )
            if not moved:
                self._was_recovered(message.task, message.id)

        self._pending = write

    def _bury(
        self, position: int, payload: str, task_id: str, reason: str, error: str, trace: str
    ) -> None:
        queue = self.queues[position - 1]
        entry = dead_entry(payload, queue, reason, error, trace)

        def write() -> None:
            buried = scripts.load("queue_bury")(
                self.client,
                [running_key(self.id, queue), dead_key(queue)],
                [payload, entry, conf.TASK_DEAD_LETTER_MAX],
            )
            if not buried:
                self._was_recovered("a task", task_id)

        self._pending = write

    def _was_recovered(self, name: str, task_id: str) -> None:
        logger.warning(
            "Task %s[%s] was put back on its queue while this worker ran it (the worker's "
            "lease had run out); it will run again",
            name,
            task_id,
        )

    # -- registration, heartbeats, recovery ---------------------------------------------

    def _register(self) -> bool:
        """Register before taking any task, waiting for Redis if need be; False if stopped."""
        while not self._stopping:
            try:
                self._beat()
                self._connected()
                return True
            except REDIS_DOWN as error:
                self._disconnected(error)
        return False

    def _beat(self) -> list[str]:
        """Renew this worker's lease; return the ids of workers whose lease ran out."""
        expired = scripts.load("queue_heartbeat")(
            self.client,
            [leases_key(), workers_key(), queues_key()],
            [self.id, round(self.heartbeat_interval * 1500), self._info, 10, *self.queues],
        )
        return [text(worker_id) for worker_id in expired]

    def _heartbeat(self) -> None:
        interval = self.heartbeat_interval / 2
        # After an outage, give every worker a full interval to renew its lease before
        # taking any of them for dead.
        recover_after = 0.0
        while not self._heartbeat_stop.wait(interval):
            try:
                expired = self._beat()
                if time.monotonic() >= recover_after:
                    for worker_id in expired:
                        self._recover_expired(worker_id)
            except REDIS_DOWN as error:
                logger.debug("Heartbeat of %s failed: %s", self.id, error)
                recover_after = time.monotonic() + self.heartbeat_interval
            except Exception:
                logger.exception("Heartbeat of worker %s failed", self.id)

    def _recover_expired(self, worker_id: str) -> None:
        raw = self.client.hget(workers_key(), worker_id)
        try:
            queues = [str(queue) for queue in json.loads(raw)["queues"]] if raw else []
        except (ValueError, KeyError, TypeError):
            queues = []
        result = recover_worker(
            self.client,
            worker_id,
            queues,
            only_if_expired=True,
            max_crashes=conf.TASK_MAX_CRASHES,
        )
        if result is not None:
            requeued, buried = result
            logger.warning(
                "Worker %s stopped renewing its lease: put %d of its tasks back on their "
                "queues, dead-lettered %d that had crashed workers %d times",
                worker_id,
                requeued,
                buried,
                conf.TASK_MAX_CRASHES,
            )

    def _leave(self, crashed: bool) -> None:
        """Deregister; a task still held (after an error) goes back on its queue."""
        try:
            result = recover_worker(
                self.client,
                self.id,
                self.queues,
                only_if_expired=False,
                max_crashes=conf.TASK_MAX_CRASHES if crashed else 0,
            )
        except REDIS_DOWN as error:
            logger.warning(
                "Worker %s could not deregister (%s); a live worker will put back its "
                "tasks when its lease runs out",
                self.id,
                error,
            )
            return
        if result and (result[0] or result[1]):
            logger.warning(
                "Worker %s put back %d unfinished tasks (dead-lettered %d)", self.id, *result
            )

    # -- connection trouble --------------------------------------------------------------

    def _disconnected(self, error: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            logger.warning("Worker %s lost Redis (%s); retrying", self.id, error)
        self._reclaim = True
        if self._pubsub is not None:
            self._pubsub.close()
            self._pubsub = None
        # Back off from 0.1 s to 5 s while Redis stays away; a stop request ends the wait.
        pause = min(5.0, 0.1 * 2 ** min(6, int((now - self._down_since) / 0.5)))
        select.select([self._wake_r], [], [], pause)

    def _connected(self) -> None:
        if self._down_since is not None:
            logger.warning(
                "Worker %s reached Redis again after %.1f s",
                self.id,
                time.monotonic() - self._down_since,
            )
            self._down_since = None


# -- the supervisor ----------------------------------------------------------------------


@dataclass
class _Child:
    slot: int
    worker_id: str
    process: BaseProcess
    started: float = field(default_factory=time.monotonic)


def _child_main(worker_id: str, options: dict[str, Any], parent: int) -> None:
    """Entry point of a worker process: stop on SIGTERM/SIGINT and when the parent dies."""
    from .embedded import die_with_parent

    die_with_parent()
    if os.getppid() != parent:  # the supervisor died before we asked to follow it
        return
    worker = Worker(worker_id=worker_id, **options)

    def handle(signum: int, frame: FrameType | None) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    signal.set_wakeup_fd(worker.wakeup_fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    worker.run()


class Supervisor:
    """Runs ``concurrency`` worker processes; restarts and recovers those that die.

    A child that dies (a crash, SIGKILL, the OOM killer) has its in-progress tasks put
    back at once, counting a crash against each, and is replaced. One SIGTERM or
    SIGINT: the children finish their tasks and exit. A second one: they are killed
    and their tasks put back at once. Children that exit by themselves (``burst``,
    ``max_tasks``) are not replaced; :meth:`run` returns when none is left.
    """

    def __init__(
        self,
        queues: Sequence[str],
        *,
        concurrency: int = 1,
        scheduler: bool = True,
        burst: bool = False,
        max_tasks: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise InvalidInput("concurrency", f"must be a positive integer, not {concurrency!r}")
        if max_tasks is not None and max_tasks < 1:
            raise InvalidInput("max_tasks", f"must be a positive integer, not {max_tasks!r}")
        self.queues = checked_queues(queues)
        self.concurrency = concurrency
        self.options: dict[str, Any] = {
            "queues": self.queues,
            "scheduler": scheduler,
            "burst": burst,
            "max_tasks": max_tasks,
        }
        self._signals = 0
        self._children: dict[int, _Child] = {}

    def run(self) -> int:
        """Run until stopped by signals or until every worker process has finished."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        handled = (signal.SIGTERM, signal.SIGINT)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in handled}
        previous_fd = signal.set_wakeup_fd(wake_w)
        try:
            connections.close_all()  # children must not share the parent's DB sockets
            for slot in range(1, self.concurrency + 1):
                self._start(slot)
            self._supervise(wake_r)
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(wake_r)
            os.close(wake_w)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def _start(self, slot: int) -> None:
        worker_id = new_worker_id(slot)
        process = FORK.Process(
            target=_child_main,
            args=(worker_id, self.options, os.getpid()),
            name=f"rc-worker-{slot}",
        )
        # Signals wait until the child has installed its own handlers.
        blocked = {signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        assert process.pid is not None
        self._children[process.pid] = _Child(slot, worker_id, process)
        logger.info("Started worker process %d (pid %d)", slot, process.pid)

    def _supervise(self, wake_r: int) -> None:
        stopping = killed = False
        restarts: list[tuple[float, int]] = []  # (when, slot)
        while self._children or (restarts and not stopping):
            timeout = 1.0
            if restarts:
                timeout = max(0.0, min(when for when, _ in restarts) - time.monotonic())
            sentinels = [child.process.sentinel for child in self._children.values()]
            wait_for([*sentinels, wake_r], timeout)
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            if self._signals and not stopping:
                stopping = True
                restarts.clear()
                logger.warning(
                    "Stopping: worker processes finish their tasks (signal again to stop at once)"
                )
                for child in self._children.values():
                    child.process.terminate()
            if self._signals >= 2 and not killed:
                killed = True
                self._kill_all()
            for pid, child in list(self._children.items()):
                if child.process.is_alive():
                    continue
                child.process.join()
                del self._children[pid]
                if self._exited(child, stopping) and not stopping:
                    pause = QUICK_DEATH if time.monotonic() - child.started < QUICK_DEATH else 0
                    restarts.append((time.monotonic() + pause, child.slot))
            now = time.monotonic()
            for when, slot in [entry for entry in restarts if entry[0] <= now]:
                restarts.remove((when, slot))
                if not stopping:
                    self._start(slot)

    def _exited(self, child: _Child, stopping: bool) -> bool:
        """Handle a child that exited; True if it died and should be replaced."""
        code = child.process.exitcode
        if code == 0:
            logger.info("Worker process %d (pid %s) finished", child.slot, child.process.pid)
            return False
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        try:
            result = recover_worker(
                tasks_client(),
                child.worker_id,
                self.queues,
                only_if_expired=False,
                max_crashes=conf.TASK_MAX_CRASHES,
            )
        except REDIS_DOWN as error:
            logger.error(
                "Worker process %d (pid %s) died (%s); Redis is unreachable (%s), so its "
                "tasks go back when its lease runs out",
                child.slot,
                child.process.pid,
                how,
                error,
            )
        else:
            requeued, buried = result or (0, 0)
            logger.error(
                "Worker process %d (pid %s) died (%s): put back %d of its tasks, "
                "dead-lettered %d%s",
                child.slot,
                child.process.pid,
                how,
                requeued,
                buried,
                "" if stopping else "; restarting it",
            )
        return True

    def _kill_all(self) -> None:
        logger.warning("Stopping at once: killing the worker processes")
        for child in self._children.values():
            child.process.kill()
        for child in list(self._children.values()):
            child.process.join()
            try:
                result = recover_worker(
                    tasks_client(),
                    child.worker_id,
                    self.queues,
                    only_if_expired=False,
                    max_crashes=0,
                )
            except REDIS_DOWN as error:
                logger.error("Could not put back the tasks of %s: %s", child.worker_id, error)
            else:
                requeued = result[0] if result else 0
                logger.warning(
                    "Worker process %d killed; put back %d of its tasks", child.slot, requeued
                )
        self._children.clear()
