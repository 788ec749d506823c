"""One worker process: run queued tasks at least once, in priority order, without polling.

``manage.py rc_worker`` starts a :class:`~redis_components.tasks.supervisor.Supervisor`,
which forks worker processes, each running a :class:`Worker`. The scripts it runs and
the keys they touch are described in ``store.py``.

Reliable fetch across several queues
------------------------------------
Blocking pops are reliable for one list but not across several, so taking a task and
waiting for one are separate:

* **Taking** is one script (``queue_fetch.lua``): it moves the due delayed tasks of
  the worker's queues to their ready sets, then takes the first task of the first
  non-empty queue, in the worker's priority order, into the worker's own in-progress
  set. It also records how the task the worker just ran ended (done, to be retried,
  deferred or dead-lettered), so a busy worker needs one round trip per task. A task
  is never only in the worker's memory.
* **Waiting** happens only after a take found nothing, on a Pub/Sub subscription to
  the queues' wake-up channels that is confirmed before the first take. A script
  that makes an empty ready set non-empty (enqueue, the delayed mover, recovery)
  publishes on the queue's channel, and one that adds a new earliest delayed task
  publishes too, because idle workers sleep until the earliest due time. A wake-up
  cannot be lost: a worker whose take found its queues empty is subscribed already,
  so the first task pushed after that take reaches it; if the subscription drops,
  redis-py resubscribes and the confirmation itself makes the worker take again. Idle
  workers wait with a client-side ``select`` (no blocking command, so the server's
  ``hz`` does not delay them): until the next delayed task is due, a message, a
  signal, or at most one heartbeat interval, the last only as a safety net
  (``waker.py``; the running task's time limits are in ``limits.py``).

Every idle worker of a queue wakes for the first task of an empty queue (Pub/Sub is a
broadcast); they race for it with the take script, and each one that finds nothing
goes back to sleep. That costs one take per idle worker per burst of tasks, not per
task: a queue that is not empty publishes nothing.

Delayed tasks are moved by every worker that serves their queue, in the take script,
so several workers (or ``rc_worker --no-scheduler`` ones that do not move) may run at
once: a script is atomic, so each task moves exactly once and no lock is needed.

Leases and recovery
-------------------
A worker registers a lease before it takes a task, and a thread renews it whatever
the task is doing; the same thread puts back the tasks of workers whose lease ran out
(``lease.py``). The supervisor does it at once for a child process that dies. The
take script refuses to hand a task to a worker that is not registered (recovered
while it was cut off from Redis), so no task is ever held by a worker no one watches.

Bad data
--------
A payload that is not a task (not UTF-8, not JSON, nested too deeply, the wrong
shape), or names a task this worker does not have, is dead-lettered with the reason
on its first take, and the worker goes on: decoding catches everything a decoder can
raise.

Signals
-------
Signal handlers only set a flag; a wake-up fd makes the idle wait return at once.
SIGTERM or SIGINT: the worker finishes its task, records it and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import redis

from ..connection import OneConnection, private_client
from ..exceptions import InvalidInput
from .execution import execute
from .jobs import Job
from .lease import REDIS_DOWN, Lease, new_worker_id, put_back_tasks, validate_worker_id
from .limits import TimeLimits
from .messages import validate_queue
from .schedules import schedules
from .store import Fetched, Outcome, TaskStore, fetch_keys, ready_key, tasks_client
from .waker import Waker

logger = logging.getLogger("redis_components.worker")


def _end_forked_child(error: BaseException | None) -> NoReturn:
    """End a process forked by a task that came back into the worker's code.

    It exits as the child of a plain program would (the ``sys.exit`` code, 1 after an
    exception), without running the worker's clean-up, which belongs to its parent.
    """
    if isinstance(error, SystemExit):
        code = error.code if isinstance(error.code, int) else int(error.code is not None)
    else:
        code = 0 if error is None else 1
        if error is not None:
            traceback.print_exception(error)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def validate_queues(queues: Sequence[str]) -> list[str]:
    """The queue names in priority order without repeats, or :class:`InvalidInput`."""
    if isinstance(queues, str):
        raise InvalidInput("queues", "must be a list of queue names, not a string")
    names = list(dict.fromkeys(validate_queue(queue, "queues") for queue in queues))
    if not names:
        raise InvalidInput("queues", "must name at least one queue")
    return names


class Running(NamedTuple):
    """The task a worker runs now, as a termination request needs it."""

    position: int
    payload: bytes
    task_id: str


class Worker:
    """One process's task loop over ``queues``, highest priority first.

    ``scheduler``: also move due delayed tasks of these queues to their ready sets, and
    claim the ticks of the schedules (see ``schedules.py``) when this worker holds the
    scheduler's lease. ``deadline`` and ``terminate`` come from ``rc_worker``'s
    supervisor: a shared value it watches for the hard time limit, and what stops this
    process when a running task is to be terminated.
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
        deadline: Any = None,
        terminate: Callable[[], None] | None = None,
    ) -> None:
        self.queues = validate_queues(queues)
        if max_tasks is not None and max_tasks < 1:
            raise InvalidInput("max_tasks", f"must be a positive integer, not {max_tasks!r}")
        self.id = validate_worker_id(new_worker_id() if worker_id is None else worker_id)
        self.scheduler = scheduler
        self.burst = burst
        self.max_tasks = max_tasks
        self.processed = 0
        self._stopping = False
        self._keys = fetch_keys(self.id, self.queues)
        # Each queue's wake-up channel is named like its ready set.
        self._waker = Waker([ready_key(queue) for queue in self.queues])
        self._mode = "take+move" if scheduler else "take"
        self._lease: Lease[Running] = Lease(
            self.id,
            self.queues,
            store=lambda: self.store,
            running=self._now_running,
            terminate=self._terminate_running,
            schedules=schedules() if scheduler else [],
        )
        # How the last task ended, to record with the next fetch (kept until recorded).
        self._outcome: Outcome | None = None
        # The task running now, for a termination request.
        self._running: Running | None = None
        # The server's time at the last fetch (ms): its hour files the throughput counts.
        self._now_ms = int(time.time() * 1000)
        self._limits = TimeLimits(deadline)
        self._terminate = terminate
        self._pid = os.getpid()
        self._own_client: tuple[redis.Redis, redis.Redis] | None = None
        self._loop_connection: OneConnection | None = None
        # The server's time (ms) when the running (or last) task was taken.
        self._taken_ms = 0
        # After a lost connection: a take's reply may have been lost with it.
        self._reclaim = False
        self._down_since: float | None = None

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between two renewals of the lease (``TASK_HEARTBEAT_INTERVAL``)."""
        return self._lease.interval

    @property
    def client(self) -> redis.Redis:
        """The worker's own client for the task system's keys, on a pool no task uses.

        Looked up each time: on a cluster the keys' node may move.
        """
        shared = tasks_client()
        own = self._own_client
        if own is None or own[0] is not shared:
            own = self._own_client = (shared, private_client(shared))
        return own[1]

    @property
    def store(self) -> TaskStore:
        """The task store on this worker's own client."""
        return TaskStore(self.client)

    @property
    def _loop_store(self) -> TaskStore:
        """The store of the loop's fetches, on one held connection: one script call per
        task, so it skips the client's layers (see OneConnection). Only the loop's thread
        uses it."""
        client = self.client
        held = self._loop_connection
        if held is None or held.client is not client:
            if held is not None:
                held.close()
            held = self._loop_connection = OneConnection(client)
        return TaskStore(held)

    @property
    def wakeup_fd(self) -> int:
        """A non-blocking fd to pass to ``signal.set_wakeup_fd``: a signal ends an idle wait."""
        return self._waker.fd

    def request_stop(self) -> None:
        """Stop after the running task. Only sets a flag: safe in a signal handler."""
        self._stopping = True

    def stop(self) -> None:
        """Stop after the running task, waking an idle wait at once (from any thread)."""
        self._stopping = True
        self._waker.wake()

    def run(self) -> int:
        """Run tasks until stopped (or done, with ``burst``/``max_tasks``); return how many ran."""
        logger.info("Worker %s serving %s", self.id, ", ".join(self.queues))
        self._pid = os.getpid()  # a process forked by a task has another
        self._limits.catch_soft_limits()
        crashed = True
        try:
            if not self._register():
                crashed = False
                return 0
            self._lease.start()
            self._loop()
            crashed = False
        finally:
            self._lease.stop()
            self._limits.release_signal()
            self._leave(crashed)
            self.close()
        logger.info(
            "Worker %s stopped after %d task%s",
            *(self.id, self.processed, "" if self.processed == 1 else "s"),
        )
        return self.processed

    def close(self) -> None:
        """Close the worker's connections and wake-up pipe (:meth:`run` does, on return)."""
        if self._loop_connection is not None:
            self._loop_connection.close()
        if self._own_client is not None:
            self._own_client[1].connection_pool.disconnect()
        self._waker.close()

    # -- the loop ---------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            take = self.max_tasks is None or self.processed < self.max_tasks
            try:
                self._reclaim_lost_take()
                fetched = self._fetch(take)
                if fetched.position < 0:
                    logger.warning(
                        "Worker %s was taken for dead (its lease ran out) and registers again",
                        self.id,
                    )
                    self._lease.beat()
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
            self._run(fetched)
        try:
            self._reclaim_lost_take()
            if self._outcome is not None:
                self._fetch(take=False)
        except REDIS_DOWN as error:
            logger.warning("Worker %s could not record its last task: %s", self.id, error)

    def _reclaim_lost_take(self) -> None:
        """After an outage: record the last outcome, and put back a take we never saw."""
        if not self._reclaim:
            return
        if self._outcome is not None:
            self._fetch(take=False)
        # A take whose reply was lost left a task in our in-progress set that we do not
        # know of: put it back (we run nothing now) and register again.
        self.store.recover_worker(self.id, self.queues, only_if_expired=False, max_crashes=0)
        self._lease.beat()
        self._reclaim = False

    def _fetch(self, take: bool) -> Fetched:
        outcome = self._outcome
        mode = self._mode if take else ""
        queue = self.queues[outcome.position - 1] if outcome else ""
        fetched = self._loop_store.fetch(
            self.id,
            self._keys,
            mode,
            outcome,
            queue=queue,
            hour=self._hour,
            taken_ms=self._taken_ms,
        )
        self._outcome = None
        self._now_ms = fetched.now_ms
        # After an outage the outcome may have been recorded by a call whose reply was lost.
        if outcome is not None and not fetched.recorded and not self._reclaim:
            logger.warning(
                "Task %s was put back on its queue while this worker ran it (the worker's "
                "lease had run out); it will run again",
                outcome.task_id or "(not a task)",
            )
        return fetched

    @property
    def _hour(self) -> int:
        return self._now_ms // 3_600_000

    def _idle(self, wait_ms: int) -> None:
        """Wait for a wake-up message, the next due time, a signal, or one interval."""
        interval = self.heartbeat_interval
        self._waker.wait(self.client, interval if wait_ms < 0 else min(wait_ms / 1000, interval))

    # -- running one task ---------------------------------------------------------------

    def _run(self, fetched: Fetched) -> None:
        position, payload = fetched.position, fetched.payload
        assert payload is not None
        self._taken_ms = fetched.now_ms

        def call(job: Job) -> Any:
            self._running = Running(position, payload, job.message.id)
            self._limits.start(job)
            try:
                return self._call(job)
            finally:
                self._limits.stop()
                self._running = None
                self.processed += 1

        self._outcome = execute(
            payload,
            position=position,
            queue=self.queues[position - 1],
            worker_id=self.id,
            now_ms=fetched.now_ms,
            call=call,
        )

    def _call(self, job: Job) -> Any:
        """Run the task's code; a process the task forked ends here, whatever happened.

        A forked child that returns (or raises, ``sys.exit`` included) into this code
        would otherwise go on as a second worker with this worker's id.
        """
        try:
            value = job.call()
        except BaseException as error:
            if os.getpid() != self._pid:
                _end_forked_child(error)
            raise
        if os.getpid() != self._pid:
            _end_forked_child(None)
        return value

    # -- registration, termination -------------------------------------------------------

    def _register(self) -> bool:
        """Register before taking any task, waiting for Redis if need be; False if stopped."""
        while not self._stopping:
            try:
                self._lease.beat()
                self._connected()
                return True
            except REDIS_DOWN as error:
                self._disconnected(error)
        return False

    def _now_running(self) -> tuple[str, Running] | None:
        running_task = self._running
        return None if running_task is None else (running_task.task_id, running_task)

    def _terminate_running(self, running_task: Running) -> None:
        """Record the running task as cancelled, then stop this process (asked by cancel)."""
        position, payload, task_id = running_task
        if self._terminate is None:
            logger.warning(
                "Task %s is to be terminated, but this worker runs outside rc_worker's "
                "supervisor, which alone can stop it; it runs on",
                task_id,
            )
            return
        outcome = Outcome(position=position, payload=payload, task_id=task_id, kind="cancel")
        queue = self.queues[position - 1]
        fetched = self.store.fetch(self.id, self._keys, "", outcome, queue=queue, hour=self._hour)
        if fetched.recorded:  # still running it: it finished otherwise
            logger.warning("Task %s was cancelled while running: stopping this process", task_id)
            self._terminate()

    def _leave(self, crashed: bool) -> None:
        """Deregister; a task still held (after an error) goes back on its queue."""
        put_back_tasks(
            self.store,
            self.id,
            self.queues,
            f"Worker {self.id} stopped holding tasks",
            crashed=crashed,
            quiet_if_none=True,
        )

    # -- connection trouble --------------------------------------------------------------

    def _disconnected(self, error: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            logger.warning("Worker %s lost Redis (%s); retrying", self.id, error)
        self._reclaim = True
        self._waker.unsubscribe()
        # Back off from 0.1 s to 5 s while Redis stays away; a stop request ends the wait.
        pause = min(5.0, 0.1 * 2 ** min(6, int((now - self._down_since) / 0.5)))
        self._waker.pause(pause)

    def _connected(self) -> None:
        if self._down_since is not None:
            logger.warning(
                "Worker %s reached Redis again after %.1f s",
                self.id,
                time.monotonic() - self._down_since,
            )
            self._down_since = None
