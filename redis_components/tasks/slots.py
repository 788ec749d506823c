"""Slots: where a worker process runs its tasks, N sync ones at once in threads
(``--threads N``) and M ``async def`` ones on one event loop (``--async-tasks M``)
(docs/tasks.md, "Many tasks per worker process"). Time limits count from the hand-out
and are enforced under the worker's step lock, without signals (they reach the main
thread only):

* the **soft limit** raises ``SoftTimeLimitExceeded`` in the task's thread only while it
  runs the task's own code (:func:`task_frame`), under the execution's lock; one that
  lands as the code ends is dropped (:meth:`Execution.end_code`), so it never fails a
  task whose code returned;
* at the **hard limit** (or a ``terminate=True`` cancel) the task is settled at once and
  its thread abandoned: a new thread takes its slot, and the old one is sent the error
  the same way. With :data:`MAX_ABANDONED` such threads the process exits to be
  replaced; one whose loop cannot run at all (a C call holding the GIL) is replaced by
  ``rc_worker``'s supervisor (``worker.LAST_RESORT_GRACE``).

On the event loop, limits cancel the task's coroutine instead (:class:`LoopSlots`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import math
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, NoReturn

from django.db import connections

from ..exceptions import InvalidInput, SoftTimeLimitExceeded, TaskCancelled, TimeLimitExceeded
from .execution import Abandoned, arun_job, run_job
from .jobs import Job
from .store import Delivery, Outcome

logger = logging.getLogger("redis_components.worker")

# Abandoned threads (stuck past their hard limit) a process may carry before it is replaced.
MAX_ABANDONED = 3
# The most thread slots a process may have (rc_worker --threads): each is a thread, whose
# stack the system counts against its limits. More tasks at once need more processes.
MAX_THREADS = 1024
# How soon to look again at a thread that a soft limit found outside the task's own code.
RETRY_SOFT_LIMIT = 0.01
# And at an abandoned one, to send it its stop.
RETRY_STOP = 0.1
# The event loop ticks this often; without a tick for BLOCKED_AFTER seconds it is blocked.
TICK = 0.1
BLOCKED_AFTER = 0.5


# Code that a soft time limit never interrupts: an exception between a redis-py send
# and its read would leave a reply on a pooled connection for the next command to read;
# one inside this library could come between a grant (a lock, a permit) and the code
# that releases it on error; hiredis calls back into Python from C.
PROTECTED_PACKAGES = frozenset({"redis", "hiredis", "django_redis", "redis_components"})


def task_frame(frame: FrameType | None, entry: CodeType) -> FrameType | None:
    """The innermost frame of a task's own code on the stack that ends in ``frame``: of
    what ``entry`` (a job's ``call``) calls, the first frame outward of every protected
    one. ``None`` when no task code runs (the worker's own, or a protected frame called
    right from ``entry``)."""
    found = frame
    while frame is not None:
        if frame.f_code is entry:
            return None if found is frame else found
        if (frame.f_globals.get("__name__") or "").partition(".")[0] in PROTECTED_PACKAGES:
            found = frame.f_back
        frame = frame.f_back
    return None


def validate_slots(count: object, name: str, most: int | None = None) -> int:
    """``count`` if a positive integer (at most ``most``), else :class:`InvalidInput`."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInput(name, f"must be a positive integer, not {count!r}")
    if most is not None and count > most:
        raise InvalidInput(name, f"must be at most {most} (a thread each), not {count}")
    return count


@dataclass(eq=False)
class Execution:
    """One delivery of a task to this process: what it took, and how its run goes."""

    delivery: Delivery  # the task as taken, with its attempt (for the fenced record)
    task_id: str = ""  # once its job runs
    called: bool = False  # its job ran (a payload that is not a task never does)
    thread: int = 0  # the ident of the thread that runs it
    entry: CodeType | None = None  # while its job's call runs: that code (see task_frame)
    soft_at: float = math.inf  # monotonic time of its soft limit
    hard_at: float = math.inf  # monotonic time of its hard limit
    terminate: bool = False  # a cancel with terminate=True asked to stop it
    outcome: Outcome | None = None  # how it ended, to record with the next fetch
    done: bool = False  # its thread has finished with it
    abandoned: bool = False  # settled by the loop; its thread was left to itself
    job: Job | None = None  # with slots: what runs it, found before it is handed out
    submitted: bool = False  # handed to a slot or the event loop
    coroutine: asyncio.Task[None] | None = None  # an async task's, on the event loop
    cancelled_by: type[BaseException] | None = None  # why its coroutine was cancelled
    code_ended: bool = False  # its task's code returned or raised: its outcome is decided
    soft_sent: bool = False  # its soft limit was raised in its thread
    run_held: bool = False  # its run holds its permits beyond its record (hold_run)
    last_resort: float = 0.0  # with a hard limit: when the supervisor replaces the process
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def limit(self, job: Job, grace: float) -> None:
        """From now ``job``'s limits count (the last resort ``grace`` s after the hard one)."""
        now = time.monotonic()
        if job.soft_time_limit is not None:
            self.soft_at = now + job.soft_time_limit
        if job.time_limit is not None:
            self.hard_at = now + job.time_limit
            self.last_resort = self.hard_at + grace

    def begin(self, job: Job) -> None:
        """Its job's call starts (in its thread); :class:`Abandoned` if it was settled
        already (a hard limit or a termination came before its thread did)."""
        self.task_id = job.message.id
        self.called = True
        self.entry = type(job).call.__code__
        if self.abandoned:
            raise Abandoned

    def end_code(self) -> bool:
        """Its task's code returned or raised (in its thread): from now no limit settles it.
        False if the loop abandoned it first (it was settled already). A soft limit raised
        as the code ended (:meth:`Slots._interrupt`) is dropped: it lands here, or is
        cleared before it can land later."""
        while True:
            try:
                with self.lock:
                    if self.abandoned:
                        return False
                    self.code_ended = True
                    self.entry = None
                    self.soft_at = self.hard_at = math.inf
                    if self.soft_sent:
                        clear_raised_here()
                    return True
            except SoftTimeLimitExceeded:
                if not self.soft_sent:
                    raise

    def abandon(self) -> bool:
        """The loop settles it (hard limit, terminate): False if its code ended or it
        finished first (its own outcome stands)."""
        with self.lock:
            if self.code_ended or self.done:
                return False
            self.abandoned = True
            return True


def raise_in_thread(ident: int, error: type[BaseException]) -> bool:
    """Raise ``error`` in thread ``ident`` at its next bytecode; False if it is gone."""
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    affected: int = set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(error))
    return affected == 1


def clear_raised_here() -> None:
    """Drop an exception :func:`raise_in_thread` raised here that has not landed yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)


def execute(execution: Execution, pid: int) -> Outcome:
    """Run a sync task's execution to its outcome, in its slot's thread (``pid``: the worker's)."""
    assert execution.job is not None

    def call(job: Job) -> Any:
        execution.begin(job)
        try:
            return _call_code(job, pid)
        finally:
            if not execution.end_code():  # settled already: nothing more to say
                raise Abandoned from None

    # In the main thread, when it called Worker.run(), a KeyboardInterrupt is Ctrl-C
    # (outside rc_worker, whose signal handlers only set a flag, and whose slots are never
    # the main thread): it stops the worker, which puts the task back.
    caller = threading.current_thread() is threading.main_thread()
    propagate = (KeyboardInterrupt,) if caller else ()
    return run_job(execution.job, execution.delivery, call=call, propagate=propagate)


async def aexecute(execution: Execution) -> Outcome:
    """Run an ``async def`` task's execution to its outcome, on the event loop."""
    assert execution.job is not None

    async def call(job: Job) -> Any:
        execution.begin(job)
        try:
            try:
                return await job.acall()
            finally:
                if not execution.end_code():  # settled already: nothing more to say
                    raise Abandoned from None
        except asyncio.CancelledError:
            if execution.cancelled_by is Abandoned:
                raise Abandoned from None  # the loop closes
            if execution.cancelled_by is SoftTimeLimitExceeded:
                raise SoftTimeLimitExceeded("the task ran past its soft time limit") from None
            raise  # not ours (an awaited task that something else cancelled): a failure

    return await arun_job(execution.job, execution.delivery, call=call)


def _call_code(job: Job, pid: int) -> Any:
    """Run the task's code; a process the task forked (not ``pid``) ends here, whatever
    happened, rather than go on as a second worker with its parent's id."""
    try:
        value = job.call()
    except BaseException as error:
        if os.getpid() != pid:
            _end_forked_child(error)
        raise
    if os.getpid() != pid:
        _end_forked_child(None)
    return value


def _end_forked_child(error: BaseException | None) -> NoReturn:
    """End a process forked by a task as a plain program's child would (the ``sys.exit``
    code, 1 after an exception), without the worker's clean-up, which is its parent's."""
    code = 0 if error is None else 1
    if isinstance(error, SystemExit):
        code = error.code if isinstance(error.code, int) else int(error.code is not None)
    elif error is not None:
        traceback.print_exception(error)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class Pool:
    """Up to ``count`` executions at once; the base of the two kinds. Only the worker's
    loop calls the methods; whatever finishes an execution calls ``wake``."""

    def __init__(self, count: int, wake: Callable[[], None]) -> None:
        self.count = count
        self.running: list[Execution] = []
        self._wake = wake
        self._done: queue.SimpleQueue[Execution] = queue.SimpleQueue()
        self._abandoned: list[Execution] = []  # whose code still runs
        self._unstopped: list[Execution] = []  # abandoned, not yet sent their stop
        self.ended_late: list[Execution] = []  # abandoned, whose code has ended since
        self._stopped = False

    @property
    def free(self) -> int:
        return self.count - len(self.running)

    @property
    def stuck(self) -> int:
        """The abandoned executions whose code still runs."""
        return len(self._abandoned)

    @property
    def alive(self) -> list[Execution]:
        """The executions whose code may still run: those running, and those abandoned."""
        return [*self.running, *self._abandoned]

    @property
    def busy(self) -> bool:
        """Executions run that may still end (and should be waited for)."""
        return bool(self.running)

    def submit(self, execution: Execution) -> None:
        self.running.append(execution)

    def finished(self) -> list[Execution]:
        """The executions finished since the last call (abandoned ones go to ``ended_late``)."""
        ended: list[Execution] = []
        while not self._done.empty():  # (one taker at a time: under the step lock)
            execution = self._done.get()
            if execution.abandoned:
                self._abandoned.remove(execution)
                if execution in self._unstopped:
                    self._unstopped.remove(execution)
                self.ended_late.append(execution)
                continue
            self.running.remove(execution)
            ended.append(execution)
        return ended

    def enforce_limits(self) -> tuple[list[Execution], float]:
        """Apply the due limits: the executions abandoned (past their hard limit, or to be
        terminated) for the worker to settle, and the seconds until the next is due."""
        now = time.monotonic()
        next_due = math.inf
        abandoned = []
        for execution in list(self.running):
            if execution.terminate or execution.hard_at <= now:
                if self._abandon(execution):
                    abandoned.append(execution)
                continue
            if execution.soft_at <= now:
                if self._interrupt(execution, SoftTimeLimitExceeded):
                    execution.soft_at = math.inf
                else:
                    next_due = min(next_due, now + RETRY_SOFT_LIMIT)
            next_due = min(next_due, execution.soft_at, execution.hard_at)
        for execution in list(self._unstopped):
            error = TaskCancelled if execution.terminate else TimeLimitExceeded
            if self._interrupt(execution, error):
                self._unstopped.remove(execution)
            else:  # no hurry: it was settled already
                next_due = min(next_due, now + RETRY_STOP)
        return abandoned, max(0.0, next_due - now)

    def _abandon(self, execution: Execution) -> bool:
        """Leave the execution to itself; False if it has just finished."""
        if not execution.abandon():
            return False
        self.running.remove(execution)
        self._abandoned.append(execution)
        self._unstopped.append(execution)
        return True

    def finished_with(self, execution: Execution, *, here: bool = False) -> None:
        """Called where the execution ran, once it has ended: the loop gathers it, unless
        the caller records it there and then (``here``, under the worker's step lock)."""
        with execution.lock:
            execution.done = True
            execution.entry = None
        if here:
            self.running.remove(execution)
        else:
            self._done.put(execution)
            self._wake()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _interrupt(self, execution: Execution, error: type[BaseException]) -> bool:
        """Stop the execution's code with ``error``; False to try again shortly."""
        raise NotImplementedError


class Slots(Pool):
    """``count`` threads that run the sync tasks' executions: the one that calls
    :meth:`serve_here`, and ``count - 1`` of their own. Once a task has ended, its thread
    calls ``then``: the next execution for it (submitted ``here``), or ``None`` to wait."""

    def __init__(
        self, count: int, then: Callable[[Execution], Execution | None], wake: Callable[[], None]
    ) -> None:
        super().__init__(count, wake)
        self._then = then
        self._work: queue.SimpleQueue[Execution | None] = queue.SimpleQueue()
        self._started = 0
        self._pid = os.getpid()

    def start(self) -> None:
        self._pid = os.getpid()  # the worker's, which a process forked by a task is not
        for started in range(1, self.count):
            try:
                self._start_thread()
            except RuntimeError as error:  # the system's limit on threads (or memory)
                raise RuntimeError(f"{error} ({started} of {self.count} slots started)") from error

    def serve_here(self) -> None:
        """Be the first slot's thread until :meth:`stop`, or until its execution is
        abandoned. A ``KeyboardInterrupt`` in its task propagates (see ``worker.py``)."""
        self._serve(own_thread=False)

    def submit(self, execution: Execution, *, here: bool = False) -> None:
        """``here``: it runs in the thread whose ``then`` returns it."""
        super().submit(execution)
        if not here:
            self._work.put(execution)

    def stop(self) -> None:
        """End the threads once they are idle (the abandoned ones are left to themselves)."""
        if not self._stopped:
            self._stopped = True
            for _ in range(self.count):
                self._work.put(None)

    def _abandon(self, execution: Execution) -> bool:
        # Also give the execution's slot a new thread, so that capacity stays.
        if not super()._abandon(execution):
            return False
        self._start_thread()
        return True

    def _interrupt(self, execution: Execution, error: type[BaseException]) -> bool:
        # Under the execution's lock: never once its code's end is claimed (end_code).
        with execution.lock:
            if error is SoftTimeLimitExceeded and (execution.code_ended or execution.done):
                return True
            entry = execution.entry
            frame = sys._current_frames().get(execution.thread)
            if frame is not None:  # (else its thread is gone)
                if entry is None or task_frame(frame, entry) is not frame:
                    return False  # not in the task's own code now
                raise_in_thread(execution.thread, error)
            execution.soft_sent |= error is SoftTimeLimitExceeded
            return True

    def _start_thread(self) -> None:
        self._started += 1
        threading.Thread(target=self._serve, name=f"rc-slot-{self._started}", daemon=True).start()

    def _serve(self, own_thread: bool = True) -> None:
        """A slot's thread: run what it is handed until told to stop, or abandoned."""
        try:
            execution = self._work.get()
            while execution is not None:
                execution.thread = threading.get_ident()
                try:
                    execution.outcome = execute(execution, self._pid)
                except Abandoned:
                    pass
                except BaseException as error:  # a limit that came after the task's code, or a bug
                    if isinstance(error, KeyboardInterrupt) and not own_thread:
                        raise
                    logger.exception("The thread running task %s failed", execution.task_id)
                if execution.abandoned:
                    self.finished_with(execution)
                    return
                execution = self._then(execution) or self._work.get()
        finally:
            if own_thread:
                connections.close_all()  # this thread's own database connections


class LoopSlots(Pool):
    """One event loop, in a thread of its own, running up to ``count`` ``async def``
    tasks' executions at once. A limit cancels the task's coroutine (at the soft one the
    task sees ``CancelledError`` and may tidy up). A loop that a task blocks is logged
    after :data:`BLOCKED_AFTER` seconds without a tick, and once a task on it passes its
    hard limit the process is replaced."""

    def __init__(self, count: int, wake: Callable[[], None]) -> None:
        super().__init__(count, wake)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._tick = time.monotonic()  # the loop's last sign of life
        self._blocked_since: float | None = None
        self._closing = False

    @property
    def stuck(self) -> int:
        """A blocked loop whose task is past its hard limit stops all the others."""
        return MAX_ABANDONED if self._abandoned and self.blocked else 0

    @property
    def blocked(self) -> bool:
        return time.monotonic() - self._tick > BLOCKED_AFTER

    @property
    def busy(self) -> bool:
        """A stuck loop's other tasks cannot end (they go back when the process stops)."""
        return bool(self.running) and not self.stuck

    def start(self) -> None:
        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(self._beat)
            self._loop.run_forever()
            # Stopped with tasks still on it (a stuck loop's): they go back on their
            # queues with the process's other held tasks.
            self._closing = True
            for execution in self.running:  # what they raise now is not theirs to record
                execution.cancelled_by = Abandoned
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            self._loop.close()

        thread = threading.Thread(target=serve, name="rc-event-loop", daemon=True)
        thread.start()
        self._thread = thread  # (once started: stop() joins it)

    def submit(self, execution: Execution) -> None:
        super().submit(execution)
        asyncio.run_coroutine_threadsafe(self._serve(execution), self._loop)

    def stop(self) -> None:
        """Stop the loop once it is idle (a blocked one once its task lets it go)."""
        if self._thread is not None and not self._stopped:
            self._stopped = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            if not self.blocked:
                self._thread.join(timeout=1.0)

    def enforce_limits(self) -> tuple[list[Execution], float]:
        abandoned, pause = super().enforce_limits()
        if self.running or self._abandoned:
            if self.blocked and self._blocked_since is None:
                self._blocked_since = self._tick
                logger.error(
                    "The event loop of async def tasks has run nothing for %.1f s: a task "
                    "blocks it (a time.sleep or another blocking call in an async def?); "
                    "running on it: %s",
                    time.monotonic() - self._tick,
                    ", ".join(e.task_id or "?" for e in self.alive),
                )
            elif not self.blocked and self._blocked_since is not None:
                logger.warning("The event loop of async def tasks runs again")
                self._blocked_since = None
            pause = min(pause, BLOCKED_AFTER)
        return abandoned, pause

    def _interrupt(self, execution: Execution, error: type[BaseException]) -> bool:
        task = execution.coroutine
        if task is None or not execution.called:
            return False  # its task's code has not started yet

        def cancel() -> None:  # on the loop: the coroutine waits, in its code or after
            if execution.abandoned or not execution.code_ended:
                execution.cancelled_by = error
                task.cancel()

        self._loop.call_soon_threadsafe(cancel)
        return True

    def _beat(self) -> None:
        self._tick = time.monotonic()
        self._loop.call_later(TICK, self._beat)

    async def _serve(self, execution: Execution) -> None:
        execution.coroutine = asyncio.current_task()
        try:
            execution.outcome = await aexecute(execution)
        except Abandoned:
            pass
        except GeneratorExit:  # the loop closes with the coroutine still running
            raise
        except BaseException:  # a cancellation that came after the task's code, or a bug
            if not (execution.abandoned or self._closing):
                logger.exception("The event loop's run of task %s failed", execution.task_id)
        self.finished_with(execution)
