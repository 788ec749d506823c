"""The processes of ``manage.py rc_worker``: a :class:`Supervisor` forks worker
processes, each running a :class:`~redis_components.tasks.worker.Worker`, and recovers
and replaces those that die. It holds no task itself.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from django.db import connections

from ..conf import conf
from ..connection import REDIS_DOWN
from ..exceptions import InvalidInput
from .lease import lease_ms, new_worker_id, put_back_tasks
from .store import TaskStore
from .waker import backoff, empty_pipe
from .worker import Worker, validate_options

logger = logging.getLogger("redis_components.worker")

# A worker process that dies sooner than this after its start is restarted after a pause.
QUICK_DEATH = 1.0
# The exit code of a worker process that stopped to be replaced (stuck threads or loop).
WORN_OUT = 75
# The exit code of a worker process that the system refused a thread (EX_OSERR): it is
# not replaced, since a new one would be refused too; rc_worker stops.
NO_THREADS = 71
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
FORK = multiprocessing.get_context("fork")


@dataclass
class _Child:
    slot: int
    worker_id: str
    process: BaseProcess
    deadline: Any  # a shared double: past this monotonic time, the process is replaced
    finished: Any  # a shared flag the child sets when its worker's run() returned
    started: float = field(default_factory=time.monotonic)


def _child_main(
    worker_id: str, options: dict[str, Any], parent: int, deadline: Any, finished: Any
) -> None:
    """Entry point of a worker process: stop on SIGTERM/SIGINT and when the parent dies.
    ``finished`` is set once the worker has stopped by itself: any other exit, even with
    code 0 (a task's ``os._exit(0)``), is a death."""
    from ..embedded import die_with_parent

    die_with_parent()
    if os.getppid() != parent:  # the supervisor died before we asked to follow it
        return
    worker = _new_worker(worker_id, options, deadline)
    if worker is None:  # stopped before Redis answered
        finished.value = 1
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: worker.request_stop())
    signal.set_wakeup_fd(worker.wakeup_fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # The main thread only handles signals: a task that its slot gave up on (stuck in a
    # call past its hard limit) may still run in any slot thread when the worker stops.
    try:
        threading.Thread(target=_serve, args=(worker,), name="rc-slot-1", daemon=True).start()
    except RuntimeError as error:  # the system refused it
        worker.failure = error
    else:
        worker.stopped.wait()
    signal.set_wakeup_fd(-1)  # the worker closed its pipe: that fd may be reused
    failure = worker.failure
    # The system refused a thread (in CPython's words).
    if isinstance(failure, RuntimeError) and "can't start new thread" in str(failure):
        logger.error(
            "Worker %s could not start its threads: %s. The system allows fewer threads "
            "(or less memory) than --threads asks: lower --threads or -c, or raise the "
            "limit (ulimit -u, a container's pids limit)",
            *(worker_id, failure),
        )
        sys.exit(NO_THREADS)
    if failure is not None:
        raise failure
    if worker.worn_out:
        sys.exit(WORN_OUT)
    finished.value = 1


def _new_worker(worker_id: str, options: dict[str, Any], deadline: Any) -> Worker | None:
    """The process's worker, once Redis answers; ``None`` if a stop signal came first.
    Making one asks where its queues live, which a Redis Cluster not yet up cannot say (a
    compose file may start the workers first). The stop signals are still blocked here:
    the wait takes them."""
    down_since = None
    while True:
        try:
            worker = Worker(worker_id=worker_id, deadline=deadline, **options)
        except REDIS_DOWN as error:
            now = time.monotonic()
            if down_since is None:
                down_since = now
                logger.warning("Worker %s cannot reach Redis (%s); retrying", worker_id, error)
            if signal.sigtimedwait(STOP_SIGNALS, backoff(now - down_since)) is not None:
                return None
            continue
        if down_since is not None:
            waited = time.monotonic() - down_since
            logger.warning("Worker %s reached Redis after %.1f s", worker_id, waited)
        return worker


def _serve(worker: Worker) -> None:
    """The worker's first slot (see ``Worker.run``); what it raises is ``worker.failure``."""
    try:
        worker.run()
    except BaseException as error:
        worker.failure = worker.failure or error
        worker.stopped.set()


class Supervisor:
    """Runs ``concurrency`` worker processes; restarts and recovers those that die.

    A child that dies (a crash, SIGKILL, the OOM killer) has its in-progress tasks put
    back at once, counting a crash against each, and is replaced. A child whose loop
    did not settle a task ``LAST_RESORT_GRACE`` seconds past its ``time_limit`` (a C
    call holding the GIL stops every thread of it) is killed and counts as such a
    crash; a child settles its own tasks' limits otherwise (``slots.py``). One SIGTERM or
    SIGINT: the children finish their tasks and exit; those still running a task
    ``TASK_SHUTDOWN_GRACE`` seconds later are killed and their tasks put back (no crash
    counted). A second signal: that, at once. Children that exit by themselves (``burst``,
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
        threads: int = 1,
        async_tasks: int | None = None,
        supervise: bool = True,
    ) -> None:
        if concurrency < 1:
            raise InvalidInput("concurrency", f"must be a positive integer, not {concurrency!r}")
        if not supervise and concurrency != 1:
            one = "runs one worker process, this one: leave -c out"
            raise InvalidInput("supervise", f"{one}, not -c {concurrency}")
        self.supervise = supervise
        self.queues = validate_options(queues, max_tasks, threads, async_tasks)
        self.concurrency = concurrency
        self.options: dict[str, Any] = {
            "queues": self.queues,
            "scheduler": scheduler,
            "burst": burst,
            "max_tasks": max_tasks,
            "threads": threads,
            "async_tasks": async_tasks,
        }
        self._signals = 0
        #: Set when a worker process could not start its threads: rc_worker stops.
        self.refused_threads = False
        self._children: dict[int, _Child] = {}

    def run(self) -> int:
        """Run until stopped by signals or until every worker process has finished; 0, or
        1 when a worker process could not start its threads (the others are stopped)."""
        if not self.supervise:
            return self._run_here()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
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
        return int(self.refused_threads)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def _run_here(self) -> int:
        """The one worker, in this process (``supervise=False``): the stop signals as the
        supervisor takes them (one: its tasks finish within ``TASK_SHUTDOWN_GRACE``; two,
        or past it: they go back on their queues, no crash counted, and the process
        exits). Nothing watches it: after a crash its tasks come back when its lease runs
        out, and a process worn out by stuck threads exits ``WORN_OUT`` to be replaced."""
        worker_id = new_worker_id(1)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # (_new_worker waits on them)
        try:
            worker = _new_worker(worker_id, self.options, None)
            if worker is None:
                return 0

            def on_signal(signum: int, frame: FrameType | None) -> None:
                self._signals += 1
                worker.request_stop()

            previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
            previous_fd = signal.set_wakeup_fd(worker.wakeup_fd)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        try:
            try:
                thread = threading.Thread(target=_serve, args=(worker,), name="rc-slot-1")
                thread.daemon = True
                thread.start()
            except RuntimeError as error:  # the system refused it
                logger.error("Worker %s could not start its thread: %s", worker_id, error)
                return 1
            self._watch_here(worker)
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if worker.failure is not None:
            raise worker.failure
        if worker.worn_out:
            why = f"Worker {worker_id} stopped with tasks stuck past their time limit"
            self._put_back_here(worker_id, why, WORN_OUT)
        return 0

    def _watch_here(self, worker: Worker) -> None:
        """Until ``worker`` stops: the grace period after a stop signal, and a second one."""
        grace = conf.TASK_SHUTDOWN_GRACE
        stop_by = math.inf
        warned = False
        # (A signal does not end the wait: it is looked at every 0.1 s.)
        while not worker.stopped.wait(0.1):
            if self._signals and not warned:
                warned = True
                stop_by = math.inf if grace is None else time.monotonic() + grace
                within = "" if grace is None else f" within {grace:g} s (TASK_SHUTDOWN_GRACE)"
                logger.warning(
                    "Stopping: the worker finishes its tasks%s; signal again to stop at once",
                    within,
                )
            if self._signals >= 2:
                self._put_back_here(worker.id, "Stopping at once")
            if time.monotonic() >= stop_by:
                self._put_back_here(
                    worker.id,
                    f"Tasks still running {grace:g} s after the stop signal (TASK_SHUTDOWN_GRACE)",
                )

    def _put_back_here(self, worker_id: str, why: str, code: int = 0) -> None:
        """Put back the tasks of this process's worker (its lease goes too) and exit with
        ``code`` at once: the threads that still run its tasks end with the process."""
        try:
            put_back_tasks(TaskStore(), worker_id, self.queues, why, crashed=False)
        except REDIS_DOWN as error:
            logger.error(
                "%s: could not put back its tasks (%s): its lease brings them back", why, error
            )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _start(self, slot: int) -> None:
        worker_id = new_worker_id(slot)
        deadline = FORK.Value("d", 0.0, lock=False)
        finished = FORK.Value("b", 0, lock=False)
        process = FORK.Process(
            target=_child_main,
            args=(worker_id, self.options, os.getpid(), deadline, finished),
            name=f"rc-worker-{slot}",
        )
        # Signals wait until the child has installed its own handlers.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        assert process.pid is not None
        self._children[process.pid] = _Child(slot, worker_id, process, deadline, finished)
        logger.info("Started worker process %d (pid %d)", slot, process.pid)

    def _supervise(self, wake_r: int) -> None:
        stopping = killed = False
        grace = conf.TASK_SHUTDOWN_GRACE
        stop_by = math.inf  # once stopping: when the grace period ends
        restarts: list[tuple[float, int]] = []  # (when, slot)
        renew_at = 0.0
        while self._children or (restarts and not stopping):
            if time.monotonic() >= renew_at:
                self._renew_leases()
                renew_at = time.monotonic() + conf.TASK_HEARTBEAT_INTERVAL / 2
            deadlines = [c.deadline.value for c in self._children.values() if c.deadline.value]
            wake_at = min([renew_at, stop_by, *(when for when, _ in restarts), *deadlines])
            timeout = max(0.0, min(1.0, wake_at - time.monotonic()))
            sentinels = [child.process.sentinel for child in self._children.values()]
            wait_for([*sentinels, wake_r], timeout)
            empty_pipe(wake_r)
            if (self._signals or self.refused_threads) and not stopping:
                stopping = True
                restarts.clear()
                if grace is not None:
                    stop_by = time.monotonic() + grace
                within = "" if grace is None else f" within {grace:g} s (TASK_SHUTDOWN_GRACE)"
                logger.warning(
                    "Stopping: worker processes finish their tasks%s; signal again to stop at once",
                    within,
                )
                for child in self._children.values():
                    child.process.terminate()
            if self._signals >= 2 and not killed:
                killed = True
                self._kill_all("Stopping at once: killing the worker processes")
            if time.monotonic() >= stop_by and self._children and not killed:
                killed = True
                self._kill_all(
                    f"Tasks still running {grace:g} s after the stop signal "
                    "(TASK_SHUTDOWN_GRACE): killing their worker processes"
                )
            self._stop_over_time()
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
                self._start(slot)  # (none is left once stopping)

    def _renew_leases(self) -> None:
        """Renew the leases of the live children, as their heartbeat threads do: a task
        holding the GIL (a long call into C) stops a child's threads, not the child.
        Their lease then covers only the death of the machine (and of this process)."""
        alive = [c.worker_id for c in self._children.values() if c.process.is_alive()]
        try:
            TaskStore().renew_leases(alive, lease_ms(conf.TASK_HEARTBEAT_INTERVAL), self.queues)
        except REDIS_DOWN as error:
            logger.debug("Could not renew the worker processes' leases: %s", error)
        except Exception:
            logger.exception("Could not renew the worker processes' leases")

    def _stop_over_time(self) -> None:
        """Kill each child whose loop has not settled a task past its hard time limit."""
        now = time.monotonic()
        for child in self._children.values():
            deadline = child.deadline.value
            if deadline and now >= deadline and child.process.is_alive():
                logger.error(
                    "Worker process %d (pid %d) did not settle a task past its time limit "
                    "(a call that holds the GIL?): killing it",
                    *(child.slot, child.process.pid),
                )
                child.process.kill()
                child.process.join()

    def _exited(self, child: _Child, stopping: bool) -> bool:
        """Handle a child that exited; True if it died and should be replaced."""
        code = child.process.exitcode
        if code == 0 and child.finished.value:
            logger.info("Worker process %d (pid %s) finished", child.slot, child.process.pid)
            return False
        process = f"Worker process {child.slot} (pid {child.process.pid})"
        if code == NO_THREADS:  # (it said why)
            self.refused_threads = True
            self._put_back(child, f"{process} stopped", crashed=False, quiet_if_none=True)
            return False
        if code == WORN_OUT:
            then = "" if stopping else "; replacing it"
            why = f"{process} stopped with tasks stuck past their time limit"
            self._put_back(child, why, crashed=False, then=then)
            return True
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        then = "" if stopping else "; restarting it"
        self._put_back(
            child, f"{process} died ({how})", crashed=True, level=logging.ERROR, then=then
        )
        return True

    def _kill_all(self, why: str) -> None:
        logger.warning(why)
        for child in self._children.values():
            child.process.kill()
        for child in list(self._children.values()):
            child.process.join()
            self._put_back(child, f"Worker process {child.slot} killed", crashed=False)
        self._children.clear()

    def _put_back(self, child: _Child, why: str, **how: Any) -> None:
        put_back_tasks(TaskStore(), child.worker_id, self.queues, why, **how)
