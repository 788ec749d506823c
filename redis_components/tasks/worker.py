"""One worker process: run queued tasks at least once, in priority order, without polling.

``manage.py rc_worker``'s supervisor (``supervisor.py``) forks worker processes, each
running a :class:`Worker`. What a worker promises is in docs/tasks.md ("Delivery: at
least once" and after); the scripts it runs and the keys they touch are in ``store/``.

**Taking** is one script (``store/worker_store.py``): it moves the due delayed tasks
(unless ``--no-scheduler``), takes the first ready task into the worker's in-progress
set, and records how the task before it ended: one round trip per task, and a task is
never only in the worker's memory. It refuses a worker that is not registered
(``lease.py``), so no task is held by a worker no one watches. Blocking pops are reliable
for one list, not across several, so **waiting** is apart (``waker.py``), on a
subscription confirmed before the first take, so a wake-up cannot be lost.

The loop runs no task code: it hands each task to a slot (``slots.py``) and takes the
next only while a slot of each kind is free (no prefetch). A slot's thread whose sync
task ended records it and takes its next task itself, in the same round trip
(:meth:`Worker._then`); after a short task, even some ahead (``TASK_TAKE_AHEAD``, while
it waits on Redis's replies), held (not started: no crash counts against them) until the
task before them has run :data:`AHEAD_FOR` (``conveyor.py``).
With ``threads=1`` too, the caller of :meth:`Worker.run` is the one slot (so a test's
database transaction is the task's). Each outcome carries its attempt, which the script
checks: an execution whose task was recovered and taken again records nothing.

Signal handlers only set a flag; a wake-up fd ends the idle wait at once. A
``KeyboardInterrupt`` in the caller of :meth:`Worker.run` stops it at once: its tasks go
back on their queues.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from ..connection import REDIS_DOWN, OneConnection, private_client, server_of
from ..exceptions import InvalidInput
from .conveyor import Conveyor
from .execution import abandoned, over_time, prepare
from .jobs import Job
from .lease import Lease, new_worker_id, put_back_tasks, validate_worker_id
from .messages import validate_queue
from .schedules import schedules
from .slots import MAX_ABANDONED, MAX_THREADS, Execution, LoopSlots, Pool, Slots, validate_slots
from .store import Fetched, Outcome, TaskStore, WorkerStore, find_nodes_again
from .store.layout import queue_homes, ready_key, registry, tasks_client
from .waker import Waker, backoff

logger = logging.getLogger("redis_components.worker")

# A task whose worker died running it this many times runs alone (no other task beside
# it in its process), so that a crash then is its own (see queue_recover.lua).
ALONE_AFTER = 2
# A slot takes a task ahead only after a task that ran less than this (seconds), and
# gives it back once the task before it has run this long.
AHEAD_FOR = 0.02
# rc_worker's supervisor replaces a process whose loop has not settled a task this long
# after its hard time limit: the loop could not run (a C call holding the GIL).
LAST_RESORT_GRACE = 5.0


def _go_on() -> None:
    """The loop's next turn comes at once."""


def validate_queues(queues: Sequence[str]) -> list[str]:
    """The queue names in priority order without repeats, or :class:`InvalidInput`."""
    if isinstance(queues, str):
        raise InvalidInput("queues", "must be a list of queue names, not a string")
    names = list(dict.fromkeys(validate_queue(queue, "queues") for queue in queues))
    if not names:
        raise InvalidInput("queues", "must name at least one queue")
    return names


def validate_options(
    queues: Sequence[str], max_tasks: int | None, threads: int, async_tasks: int | None
) -> list[str]:
    """The queue names (:func:`validate_queues`) once a worker's other options are valid
    too, or :class:`InvalidInput` naming the first that is not."""
    names = validate_queues(queues)
    if max_tasks is not None and max_tasks < 1:
        raise InvalidInput("max_tasks", f"must be a positive integer, not {max_tasks!r}")
    validate_slots(threads, "threads", MAX_THREADS)
    if async_tasks is not None:
        validate_slots(async_tasks, "async_tasks")
    return names


class Worker:
    """One process's task loop over ``queues``, highest priority first.

    ``scheduler``: also move the due delayed tasks of these queues, and claim the ticks
    of the schedules (``schedules.py``) while this worker holds the scheduler's lease.
    ``burst``: return when no task is ready. ``max_tasks``: return after running this
    many. ``threads``: run up to this many sync tasks at once, the first in the thread
    that calls :meth:`run`, and ``async_tasks`` (by default as many) ``async def`` ones on
    one event loop. ``deadline``: a shared value that ``rc_worker``'s supervisor watches
    (see :data:`LAST_RESORT_GRACE`). :meth:`stop` (any thread) or :meth:`request_stop` (a
    signal handler, with :attr:`wakeup_fd` given to ``signal.set_wakeup_fd``) make
    :meth:`run` return after the tasks it is running.
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
        threads: int = 1,
        async_tasks: int | None = None,
    ) -> None:
        self.queues = validate_options(queues, max_tasks, threads, async_tasks)
        self.id = validate_worker_id(new_worker_id() if worker_id is None else worker_id)
        self.scheduler = scheduler
        self.burst = burst
        self.max_tasks = max_tasks
        self.processed = 0
        self._stopping = False
        # Each queue's wake-up channel is named like its ready set, in each of its homes.
        channels = [ready_key(queue, head) for queue in self.queues for head in queue_homes(queue)]
        self._waker = Waker(list(dict.fromkeys(channels)))
        # The worker's side of the store: the loop's, on its held connection (hearing the
        # wake-ups of the homes it left out), and the lease's, on the worker's client.
        self._tasks = WorkerStore(
            self.id,
            self.queues,
            move_delayed=scheduler,
            client=self._loop_connection,
            heard=self._waker.heard,
        )
        self._lease: Lease[Execution] = Lease(
            WorkerStore(self.id, self.queues, move_delayed=scheduler, client=self.client_at),
            running=self._now_running,
            terminate=self._terminate_running,
            schedules=schedules() if scheduler else [],
            threads=threads,
            revived=self._taken_for_dead,
        )
        # Held by whoever records, takes and hands out: the loop's thread, or a slot's
        # thread whose task just ended (see _then). Never while waiting or running a task.
        self._step_lock = threading.Lock()
        self._revived = False  # taken for dead: the permits of what runs are held again
        self._loop_wakes_at = -math.inf  # when the loop's current wait ends (-inf: none)
        self._conveyor = Conveyor(self._tasks, self._lease, AHEAD_FOR)
        self._threads = Slots(threads, self._then, self._waker.wake)
        self._loop_slots = LoopSlots(async_tasks or threads, self._waker.wake)
        self._pools: list[Pool] = [self._threads, self._loop_slots]
        self._alone: Execution | None = None  # to run alone, once the others end (ALONE_AFTER)
        self.worn_out = False  # too many tasks it gave up on: to be replaced (see _may_take)
        self._deadline = deadline
        self._interrupted = False  # the caller was interrupted: stop at once
        #: What ended the worker's loop with an error (run() raises it), if anything.
        self.failure: BaseException | None = None
        #: Set once the worker has deregistered and closed, even while a task it gave up
        #: on still runs in the thread that called run().
        self.stopped = threading.Event()
        # Per server (on a cluster, per node, so a queue of many partitions opens no more
        # connections than the nodes it is on): the shared client it was made for, and its own.
        self._own_clients: dict[tuple[Any, ...], tuple[redis.Redis, redis.Redis]] = {}
        self._held_connections: dict[tuple[Any, ...], OneConnection] = {}
        self._down_since: float | None = None

    @property
    def client(self) -> redis.Redis:
        """The worker's own client for the task registry (looked up each time: on a
        cluster the keys' node may move)."""
        return self.client_at(registry())

    def client_at(self, head: str) -> redis.Redis:
        """The worker's own client for the home ``head``: one per server (cluster: per node)."""
        shared = tasks_client(head)
        node = server_of(shared)
        own = self._own_clients.get(node)
        if own is None or own[0] is not shared:
            own = self._own_clients[node] = (shared, private_client(shared))
        return own[1]

    @property
    def store(self) -> TaskStore:
        """The task store on this worker's own client."""
        return TaskStore(self.client)

    def _loop_connection(self, head: str) -> OneConnection:
        """The held connection of the loop's fetches in ``head`` (see OneConnection), used
        under the step lock only. Homes on one node share it: the reply to a take sent
        ahead is read before any other fetch is sent (see Conveyor)."""
        client = self.client_at(head)
        node = server_of(client)
        held = self._held_connections.get(node)
        if held is None or held.client is not client:
            if held is not None:
                held.close()
            held = self._held_connections[node] = OneConnection(client)
        return held

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
        """Run tasks until stopped (or done, with ``burst``/``max_tasks``); return how many
        ran. The calling thread is the first thread slot: it returns once the loop has
        ended and the task it runs (if any) returned."""
        logger.info("Worker %s serving %s", self.id, ", ".join(self.queues))
        loop = threading.Thread(target=self._run_loop, name="rc-worker-loop", daemon=True)
        try:
            registered = self._register()
            if registered:
                self._lease.start()
                for pool in self._pools:  # (the system may refuse their threads)
                    pool.start()
                loop.start()
        except BaseException as error:
            self.failure = error
            self._end(crashed=True)
            raise
        if not registered:
            self._end(crashed=False)
            return 0
        try:
            self._threads.serve_here()  # until the loop ends, or this slot is abandoned
            loop.join()
        except BaseException:  # KeyboardInterrupt: the loop stops without waiting
            self._interrupted = True
            self._waker.wake()
            loop.join()
            raise
        if self.failure is not None:
            raise self.failure
        return self.processed

    def _run_loop(self) -> None:
        """The loop's thread: it ends the worker (what it raises, :meth:`run` raises)."""
        crashed = True
        try:
            self._loop()
            crashed = self._interrupted
        except BaseException as error:
            self.failure = error
        finally:
            with contextlib.suppress(BaseException):  # it is the failure now
                self._end(crashed)

    def _end(self, crashed: bool) -> None:
        """Stop the slots and the lease, deregister (putting back what is still held) and
        close; then :attr:`stopped` is set, after :attr:`failure` and the last log line:
        rc_worker's process reads the failure and may exit as soon as it is set."""
        try:
            for pool in self._pools:
                pool.stop()
            self._lease.stop()
            self._leave(crashed)
            if not crashed:
                logger.info(
                    "Worker %s stopped after %d task%s",
                    *(self.id, self.processed, "" if self.processed == 1 else "s"),
                )
        except BaseException as error:
            self.failure = self.failure or error
            raise
        finally:
            self.close()
            self.stopped.set()

    def close(self) -> None:
        """Close the worker's connections and wake-up pipe (:meth:`run` does, on return)."""
        for held in self._held_connections.values():
            held.close()
        for _, own in self._own_clients.values():
            own.connection_pool.disconnect()
        self._waker.close()

    def _loop(self) -> None:
        while not (self._stopping or self._interrupted):
            with self._step_lock:
                wait = self._step()
            if wait is None:
                break
            try:
                wait()
            except REDIS_DOWN as error:  # the idle wait's subscription
                self._disconnected(error)
        if not self._interrupted:
            self._finish()

    def _step(self) -> Callable[[], None] | None:
        """One turn under the step lock: what to wait for next (unlocked), or ``None`` to end."""
        self._loop_wakes_at = -math.inf  # awake: a slot need not wake it
        pause = min(self._collect(), self._lease.interval)
        self._start_alone()
        take = self._may_take()
        conveyor = self._conveyor
        try:
            if conveyor.holding:
                left = conveyor.hold_left()
                stale = left <= 0
                if take and not stale:  # a slot is free: the task held ahead runs there
                    conveyor.receive()
                    held = conveyor.hand_out()
                    if held is not None:
                        self._start(held, held=True)
                        return _go_on
                elif stale or not self._threads.busy:
                    conveyor.give_back()
                else:
                    pause = min(pause, left)
            conveyor.reclaim(self._busy)
            if take and self._tasks.listens:  # its takes hear wake-ups even while busy
                self._waker.subscribe(self.client)
            if not take and not conveyor.outcomes:
                return self._pause(pause) if self._busy else None  # None: max_tasks, worn out
            fetched = conveyor.fetch(take)
            if fetched.position < 0:
                logger.warning(
                    "Worker %s was taken for dead (its lease ran out) and registers again",
                    self.id,
                )
                self._lease.beat()
                self._taken_for_dead()
                return _go_on
            self._connected()
            if fetched.payload is None:
                if not take or fetched.next_ms == 0:
                    return _go_on
                if self.burst:
                    return self._pause(pause) if self._busy else None
                self._loop_wakes_at = time.monotonic() + pause
                # Until a wake-up message, the next due time, a signal or a finished task.
                timeout = pause if fetched.next_ms < 0 else min(fetched.next_ms / 1000, pause)
                return lambda: self._waker.wait(self.client, timeout)
        except REDIS_DOWN as error:
            conveyor.reclaiming = True
            return functools.partial(self._disconnected, error)
        self._start(fetched)
        return _go_on

    def _pause(self, seconds: float) -> Callable[[], None]:
        """Wait for a slot to wake the loop, or ``seconds`` (when a limit is due)."""
        self._loop_wakes_at = time.monotonic() + seconds
        return functools.partial(self._waker.pause, seconds)

    def _then(self, execution: Execution) -> Execution | None:
        """In a slot's thread whose sync task just ended: record it and take the next task
        in one round trip, to run in this same thread (a busy worker hands nothing between
        threads). Anything out of the ordinary (no task ready, an async one, one to run
        alone, stopping, Redis lost) goes to the loop, woken for it (``None``)."""
        conveyor = self._conveyor
        with self._step_lock:
            if execution.abandoned or self._stopping or self._interrupted or conveyor.reclaiming:
                self._threads.finished_with(execution)  # the loop gathers it
                return None
            self._threads.finished_with(execution, here=True)
            self._ended(execution)
            quick = execution.outcome is not None and execution.outcome.seconds < AHEAD_FOR
            try:
                while True:  # (hand_out reads the replies it needs; the rest stay unread)
                    self._collect()
                    if not self._may_take():
                        break
                    held = conveyor.hand_out()
                    if held is not None:  # started by the script that records
                        after = self._start(held, here=True, held=True, quick=quick)
                    elif conveyor.outcomes:
                        fetched = conveyor.fetch(take=True)
                        if fetched.position < 0 or fetched.payload is None:
                            break  # the loop registers again, or waits
                        self._connected()
                        after = self._start(fetched, here=True, quick=quick)
                    else:
                        break  # nothing to record (no outcome: see _ended)
                    if after is not None:
                        if conveyor.sent_before(self._loop_wakes_at):
                            self._waker.wake()  # to give the task held ahead back in time
                        return after
            except REDIS_DOWN:
                conveyor.reclaiming = True  # the loop retries, and reclaims a take it lost
            self._waker.wake()
            return None

    @property
    def _busy(self) -> bool:
        return any(pool.busy for pool in self._pools)

    @property
    def _running(self) -> list[Execution]:
        return [execution for pool in self._pools for execution in list(pool.running)]

    def _room_for(self, count: int) -> bool:
        return count <= self._room()

    def _room(self) -> float:
        """How many more tasks it may take under ``max_tasks`` (``inf``: no limit)."""
        if self.max_tasks is None:
            return math.inf
        return self.max_tasks - self.processed - len(self._running)

    def _may_take(self) -> bool:
        if not self._room_for(1):
            return False
        for pool in self._pools:
            if pool.stuck >= MAX_ABANDONED and not self.worn_out:
                self.worn_out = True
                logger.error(
                    "Worker %s has its %s stuck in tasks it gave up on: it takes no more "
                    "tasks, lets the others finish, and exits to be replaced",
                    self.id,
                    f"{pool.stuck} threads" if isinstance(pool, Slots) else "event loop",
                )
        # A task's kind is known only once taken: take while each kind has room.
        return (
            not self.worn_out and self._alone is None and all(pool.free > 0 for pool in self._pools)
        )

    def _may_take_ahead(self, job: Job) -> bool:
        """Whether a slot about to run ``job`` may take a task ahead (see :meth:`_start`)."""
        return (
            self._conveyor.takes_ahead
            and self._room_for(2 + self._conveyor.held)
            and job.message.crashes < ALONE_AFTER
            and self._alone is None
            and (self._tasks.pipelines or not self._conveyor.holding)
            and self._tasks.may_take_ahead
            and not (self._stopping or self._interrupted or self.worn_out)
        )

    def _collect(self) -> float:
        """Gather what the slots finished and apply their limits; seconds until the next due."""
        pause = math.inf
        if self._revived:
            # Its tasks went back on their queues (their permits to others), but the code
            # of those it still runs goes on: their permits are held again, until it ends.
            self._revived = False
            try:  # (those held ahead went back with them, unless taken since)
                self._conveyor.give_back()
            except REDIS_DOWN:
                self._conveyor.reclaiming = True
            for pool in self._pools:
                for execution in pool.alive:
                    self._hold_run(execution)
        for pool in self._pools:
            for execution in pool.finished():
                self._ended(execution)
            while pool.ended_late:  # abandoned, its code has ended: its permits go now
                self._hold_run(pool.ended_late.pop(), hold=False)
            abandoned, until_due = pool.enforce_limits()
            for execution in abandoned:
                self._settle(execution)
            pause = min(pause, until_due)
        self._publish_deadline()
        return pause

    def _publish_deadline(self) -> None:
        """Tell rc_worker's supervisor when to replace this process (:data:`LAST_RESORT_GRACE`)."""
        if self._deadline is None:
            return
        resorts = [e.last_resort for e in self._running if e.last_resort]
        self._deadline.value = min(resorts, default=0.0)

    def _start_alone(self) -> None:
        """Start the task that runs alone once nothing else runs."""
        alone = self._alone
        if alone is None or alone.submitted or self._busy:
            return
        assert alone.job is not None
        logger.warning(
            "Task %s[%s] was running when its worker died, %d times: it runs alone now",
            *(alone.job.message.task, alone.job.message.id, alone.job.message.crashes),
        )
        self._submit(alone)

    def _submit(self, execution: Execution, here: bool = False) -> bool:
        """Hand the execution out; True if it is a sync one to run in this slot's thread
        (``here``: the caller is one, whose task just ended)."""
        job = execution.job
        assert job is not None
        execution.submitted = True
        execution.limit(job, LAST_RESORT_GRACE)
        if job.is_async:
            self._loop_slots.submit(execution)
        else:
            self._threads.submit(execution, here=here)
        self._publish_deadline()
        if min(execution.soft_at, execution.hard_at) < self._loop_wakes_at:
            self._waker.wake()  # its limit is due before the loop's wait ends
        return here and not job.is_async

    def _ended(self, execution: Execution) -> None:
        if execution is self._alone:
            self._alone = None
        if execution.run_held:
            self._hold_run(execution, hold=False)
        if execution.called:
            self.processed += 1
        if execution.outcome is None:
            logger.error(
                "Task %s has no outcome to record: it stays held until this worker stops, "
                "then goes back on its queue",
                execution.task_id or "(not a task)",
            )
            return
        self._conveyor.outcomes.append(execution)

    def _settle(self, execution: Execution) -> None:
        """Record the end of an abandoned task: cancelled, or failed at its hard time limit."""
        if execution is self._alone:
            self._alone = None
        self.processed += 1
        left = "its coroutine is cancelled" if execution.coroutine else "its thread is abandoned"
        if execution.terminate:
            logger.warning("Task %s was cancelled while running: %s", execution.task_id, left)
            execution.outcome = Outcome(
                delivery=execution.delivery, task_id=execution.task_id, kind="cancel"
            )
        else:
            stopped = left if execution.coroutine else f"{left} and a new one takes its slot"
            execution.outcome = over_time(execution.delivery, self.id, stopped)
        if execution.outcome is not None:
            if execution.job is not None:
                why = "terminated" if execution.terminate else "time limit"
                execution.outcome = abandoned(execution.outcome, execution.job, why)
            self._conveyor.outcomes.append(execution)
        # Its code may run on: its permits stay held until it ends (see _collect).
        self._hold_run(execution)

    def _hold_run(self, execution: Execution, *, hold: bool = True) -> None:
        """Keep (``hold``) or give back the permits of an execution whose code outlives its
        record (WorkerStore.hold_run). Without Redis they go with its record (or recovery)."""
        if not execution.called:
            return
        try:
            self._conveyor.receive()  # (the replies unread on the loop's connection first)
            self._tasks.hold_run(execution.delivery, execution.task_id, hold=hold)
        except REDIS_DOWN as error:
            logger.warning(
                "Could not %s the permits of task %s: %s",
                *("keep" if hold else "give back", execution.task_id, error),
            )
            return
        execution.run_held = hold

    def _finish(self) -> None:
        """Once stopped: let the running tasks finish, recording each as it ends."""
        conveyor = self._conveyor
        while not self._interrupted:
            with self._step_lock:
                if not (self._busy or conveyor.outcomes):
                    return
                pause = self._collect()
                try:
                    conveyor.give_back()
                    conveyor.reclaim(self._busy)
                    if conveyor.outcomes:
                        conveyor.record()
                        continue
                except REDIS_DOWN as error:
                    if not self._busy:
                        logger.warning(
                            "Worker %s could not record its last task: %s", self.id, error
                        )
                        return
                    wait: Callable[[], None] = functools.partial(self._disconnected, error)
                else:
                    wait = self._pause(min(pause, self._lease.interval))
            wait()

    def _start(
        self, fetched: Fetched, here: bool = False, *, held: bool = False, quick: bool = False
    ) -> Execution | None:
        """Hand the task taken to a thread slot or the event loop; the execution if it is
        to run in the calling slot's thread (``here``). ``held``: the task held ahead,
        started by the script that records. ``quick``: the slot's last task was short: if
        this one runs here too, the slot takes one more ahead in that script (or its own)."""
        assert fetched.payload is not None
        execution = Execution(self._tasks.delivery(fetched))
        prepared = prepare(execution.delivery, self.id)
        if isinstance(prepared, Outcome):  # not a task it can run: dead-lettered
            execution.outcome = prepared
            self._ended(execution)
            return None
        execution.job = prepared
        ahead = quick and here and not prepared.is_async and self._may_take_ahead(prepared)
        # (It runs now: room for the others it holds ahead, beside it.)
        self._conveyor.start(fetched if held else None, ahead=ahead, room=self._room() - 1)
        if prepared.message.crashes >= ALONE_AFTER:
            self._alone = execution
            self._start_alone()
            return None
        return execution if self._submit(execution, here) else None

    def _register(self) -> bool:
        """Register (and move its queues' tasks of an earlier layout: store/migration.py)
        before taking any task, waiting for Redis if need be; False if stopped."""
        while not self._stopping:
            try:
                self._lease.beat()
                self.store.migrate_layout(self.queues)
                self._connected()
                return True
            except REDIS_DOWN as error:
                self._disconnected(error)
        return False

    def _now_running(self) -> dict[str, Execution]:
        """The tasks running now by id (any thread: the lease asks)."""
        return {e.task_id: e for e in self._running if e.task_id}

    def _taken_for_dead(self) -> None:
        """Taken for dead, it registers again (any thread): the loop holds its runs' permits."""
        self._revived = True
        self._waker.wake()

    def _terminate_running(self, execution: Execution) -> None:
        """Stop a task cancelled with ``terminate=True`` (the lease's thread asks)."""
        execution.terminate = True
        self._waker.wake()

    def _leave(self, crashed: bool) -> None:
        """Deregister; a task still held (after an error) goes back on its queue. Its
        outboxes are left empty (without Redis, another worker's heartbeat empties them)."""
        try:
            self._conveyor.receive()  # (the replies unread on the loop's connection first)
            self._tasks.clear_carried()
        except REDIS_DOWN as error:
            logger.warning("Worker %s left workflow outcomes in an outbox: %s", self.id, error)
        for execution in self._conveyor.outcomes:  # not recorded: how they ended is still said
            if execution.outcome is not None and execution.outcome.said is not None:
                execution.outcome.said()
        put_back_tasks(
            self.store,
            self.id,
            self.queues,
            f"Worker {self.id} stopped holding tasks",
            crashed=crashed,
            quiet_if_none=True,
        )

    def _disconnected(self, error: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            logger.warning("Worker %s lost Redis (%s); retrying", self.id, error)
        with self._step_lock:
            self._conveyor.reclaiming = True
        self._waker.unsubscribe()
        find_nodes_again()  # (on a cluster, a replica may have taken over)
        self._waker.pause(backoff(now - self._down_since))  # (a stop request ends it)

    def _connected(self) -> None:
        if self._down_since is not None:
            down_for = time.monotonic() - self._down_since
            logger.warning("Worker %s reached Redis again after %.1f s", self.id, down_for)
            self._down_since = None
