"""A worker's lease: its registration, the thread that renews it and recovers the
tasks of workers whose lease ran out, and the scheduler thread it may lead.

The heartbeat thread renews the lease (1.5 x ``TASK_HEARTBEAT_INTERVAL``) twice per
interval, whatever the task is doing, and puts the tasks of workers whose lease ran out
back in their queues (atomically, rechecking the lease): a killed worker's tasks run
again within 2 x the interval, however long tasks may legitimately run. Each recovery
counts a crash against the task; at ``TASK_MAX_CRASHES`` it is dead-lettered instead of
killing workers forever. One worker at a time also holds the scheduler's lease.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..conf import conf
from ..connection import REDIS_DOWN
from ..exceptions import InvalidInput
from .schedules import Schedule, Scheduler
from .store import Heartbeat, TaskStore, WorkerStore, find_nodes_again

logger = logging.getLogger("redis_components.worker")

Running = TypeVar("Running")

# Worker ids are parts of key names and of the results' worker lists.
WORKER_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")


def new_worker_id(slot: int = 0) -> str:
    """A unique worker id: host, supervisor pid, slot, random part (never a ``:``)."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host[:50] or 'host'}.{os.getpid()}.{slot}.{uuid.uuid4().hex[:6]}"


def put_back_tasks(
    store: TaskStore,
    worker_id: str,
    queues: Sequence[str],
    why: str,
    *,
    crashed: bool,
    only_if_expired: bool = False,
    level: int = logging.WARNING,
    then: str = "",
    quiet_if_none: bool = False,
) -> None:
    """Put the tasks that worker ``worker_id`` holds back on their queues, deregister it,
    and log ``why`` with what was done (and ``then``).

    ``crashed``: count a crash against each task (dead-lettered at ``TASK_MAX_CRASHES``).
    ``only_if_expired``: only if its lease has run out (it may have been renewed since).
    ``quiet_if_none``: log only if it held a task. Without Redis, nothing is done but
    the log: the tasks go back when a live worker finds the lease run out.
    """
    try:
        result = store.recover_worker(
            worker_id,
            queues,
            only_if_expired=only_if_expired,
            max_crashes=conf.TASK_MAX_CRASHES if crashed else 0,
        )
    except REDIS_DOWN as error:
        logger.log(
            level,
            "%s; Redis cannot be reached (%s), so its tasks go back once a live worker "
            "finds its lease run out%s",
            why,
            error,
            then,
        )
        return
    if result is None or (quiet_if_none and result == (0, 0)):
        return
    logger.log(level, "%s: put back %d of its tasks, dead-lettered %d%s", why, *result, then)


def description(queues: Sequence[str], threads: int = 1) -> str:
    """What a worker registers of itself with its lease (the status pages show it)."""
    return json.dumps(
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "started_at": round(time.time(), 3),
            "threads": threads,
        }
    )


def lease_ms(interval: float) -> int:
    """How long a lease renewed every ``interval`` seconds lasts: 1.5 intervals, in ms."""
    return round(interval * 1500)


class Lease(Generic[Running]):
    """The lease of a worker on its queues, and its two threads.

    ``tasks``: the worker's side of the store. ``running``: what the worker runs now, by
    task id, as ``terminate`` takes it; a heartbeat calls ``terminate`` for each task to
    be terminated, and ``revived`` when it finds the worker taken for dead (its lease ran
    out and its tasks were recovered: it registers again). ``schedules``: those to claim
    while it holds the scheduler's lease (none: it never asks for it). ``threads``: how
    many tasks it runs at once, for its description.
    """

    def __init__(
        self,
        tasks: WorkerStore,
        *,
        running: Callable[[], dict[str, Running]],
        terminate: Callable[[Running], None],
        schedules: list[Schedule],
        threads: int = 1,
        revived: Callable[[], None] = lambda: None,
    ) -> None:
        self.tasks = tasks
        self.worker_id = tasks.worker_id
        self.interval = conf.TASK_HEARTBEAT_INTERVAL
        self.leader = False
        self._running = running
        self._terminate = terminate
        self._revived = revived
        self._schedules = schedules
        self._info = description(tasks.queues, threads)
        self._stop = threading.Event()
        self._leading = threading.Event()  # set while this worker holds the scheduler's lease
        self._threads: list[threading.Thread] = []
        # The outboxes' entries at its last heartbeat (see _carry_left).
        self._outboxed: set[tuple[str, str]] = set()

    def beat(self) -> Heartbeat:
        """Renew the lease (registering the worker if it was not), and the scheduler's
        if this worker may lead; terminate the running tasks to be terminated."""
        running = self._running()
        beat = self.tasks.beat(
            lease_ms(self.interval),
            self._info,
            lead=bool(self._schedules),
            running_ids=list(running),
        )
        if beat.leader != self.leader:
            logger.info(
                "Worker %s %s the scheduler",
                self.worker_id,
                "now runs" if beat.leader else "no longer runs",
            )
            self.leader = beat.leader
            if beat.leader:
                self._leading.set()
            else:
                self._leading.clear()
        for task_id in beat.terminate:
            self._terminate(running[task_id])
        return beat

    def start(self) -> None:
        """Start the heartbeat thread (and the scheduler's, with schedules)."""
        self._threads = [threading.Thread(target=self._heartbeat, name="rc-heartbeat", daemon=True)]
        if self._schedules:
            self._threads.append(
                threading.Thread(target=self._schedule, name="rc-scheduler", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the threads and wait for them (the lease itself stays until deregistered)."""
        self._stop.set()
        self._leading.set()  # wakes the scheduler thread, which then sees the stop
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _heartbeat(self) -> None:
        # After an outage, give every worker a full interval to renew its lease before
        # taking any of them for dead.
        recover_after = 0.0
        while not self._stop.wait(self.interval / 2):
            try:
                beat = self.beat()
                if beat.registered:  # (the worker registered before its thread started)
                    logger.warning(
                        "Worker %s was taken for dead (its lease ran out) and registers again",
                        self.worker_id,
                    )
                    self._revived()
                if time.monotonic() >= recover_after:
                    for worker_id in beat.expired:
                        self._recover_expired(worker_id)
                    self._carry_left()
            except REDIS_DOWN as error:
                logger.debug("Heartbeat of %s failed: %s", self.worker_id, error)
                find_nodes_again()  # (on a cluster, a replica may have taken over)
                recover_after = time.monotonic() + self.interval
            except Exception:
                logger.exception("Heartbeat of worker %s failed", self.worker_id)

    def _schedule(self) -> None:
        """Claim the schedules' due ticks while this worker holds the scheduler's lease,
        sleeping until the next is due (at most a minute, to notice schedules moved by
        another scheduler): an idle scheduler costs one read and one claim per due tick."""
        scheduler = Scheduler(self._schedules)
        while not self._stop.is_set():
            if not self.leader:
                self._leading.wait(self.interval)
                continue
            try:
                wait = min(60.0, scheduler.run_due())
            except REDIS_DOWN as error:
                logger.debug("Scheduler of %s cannot reach Redis: %s", self.worker_id, error)
                wait = self.interval
            except Exception:
                logger.exception("Scheduler of worker %s failed", self.worker_id)
                wait = self.interval
            self._stop.wait(wait)

    def _carry_left(self) -> None:
        """Carry the workflows' outcomes and released steps that a process left in the
        outboxes of this worker's homes (see lua/lib/flow.lua): those that were there at
        its last heartbeat already (a live carrier's are gone by then)."""
        store = self.tasks.store
        found = store.outbox_entries(self.tasks.queues)
        left, self._outboxed = found & self._outboxed, found
        carried = store.carry_left(left) if left else 0
        if carried:
            logger.info(
                "Worker %s carried %d workflow entries left in an outbox since its last heartbeat",
                self.worker_id,
                carried,
            )

    def _recover_expired(self, raw_id: bytes) -> None:
        store = self.tasks.store
        try:
            worker_id = validate_worker_id(raw_id.decode())
        except ValueError:  # not a worker of ours: drop its lease, or it blocks the others
            store.drop_lease(raw_id)
            logger.warning("Dropped the expired lease of %r, which is not a worker id", raw_id)
            return
        put_back_tasks(
            store,
            worker_id,
            store.worker_queues(worker_id),
            f"Worker {worker_id} stopped renewing its lease",
            crashed=True,
            only_if_expired=True,
        )


def validate_worker_id(worker_id: object) -> str:
    """``worker_id`` if it is 1-100 letters, digits, ``.``, ``_`` or ``-``; else InvalidInput
    (a ``:`` would make two workers' key names collide, a space their result entries)."""
    if not isinstance(worker_id, str) or not WORKER_ID.fullmatch(worker_id):
        raise InvalidInput(
            "worker_id",
            f"must be 1-100 letters, digits, '.', '_' or '-', not {str(worker_id)[:120]!r}",
        )
    return worker_id
