"""The time limits of the task a worker runs.

The soft limit raises :class:`~redis_components.exceptions.SoftTimeLimitExceeded` in
the task's own code, never in the worker's, in redis-py or in this library (see
:func:`task_frame`): a ``SIGALRM`` that finds the task elsewhere is raised as soon as
the task's code runs again. The hard limit is a deadline in memory shared with
``rc_worker``'s supervisor, which stops the process past it and records the attempt
(see ``supervisor.py``).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import CodeType, FrameType
from typing import Any

from ..exceptions import SoftTimeLimitExceeded
from .jobs import Job

logger = logging.getLogger("redis_components.worker")

# Code that a soft time limit never interrupts: an exception between a redis-py send
# and its read would leave a reply on a pooled connection for the next command to read;
# one inside this library could come between a grant (a lock, a permit) and the code
# that releases it on error; hiredis calls back into Python from C.
PROTECTED_PACKAGES = frozenset({"redis", "hiredis", "django_redis", "redis_components"})


def task_frame(frame: FrameType | None, entry: CodeType) -> FrameType | None:
    """The innermost frame of a task's own code on the stack that ends in ``frame``.

    The task's code is what the function whose code is ``entry`` (a job's ``call``)
    calls, directly or not, outside the protected packages: the frame returned is the
    first one outward of every protected frame. ``None`` when no task code is running
    (the worker's own code, or a protected frame called right from ``entry``).
    """
    found = frame
    while frame is not None:
        if frame.f_code is entry:
            return None if found is frame else found
        if (frame.f_globals.get("__name__") or "").partition(".")[0] in PROTECTED_PACKAGES:
            found = frame.f_back
        frame = frame.f_back
    return None


class TimeLimits:
    """The soft and hard time limits of the tasks one worker runs, one at a time.

    ``deadline``: a shared double (monotonic seconds) that rc_worker's supervisor
    watches: past it, it stops this process (the hard time limit); 0 for no deadline.
    ``None`` outside rc_worker's supervisor: no hard limit then.
    """

    def __init__(self, deadline: Any = None) -> None:
        self._deadline = deadline
        # While a task with a soft time limit runs: the code of its job's ``call``.
        self._soft_limit_entry: CodeType | None = None
        # While it watches for the task's code to raise it there: the trace it replaced.
        self._traced_before: tuple[Any] | None = None
        self._handler_before: tuple[Any] | None = None

    def catch_soft_limits(self) -> None:
        """In the main thread, make SIGALRM raise SoftTimeLimitExceeded in a running task
        (elsewhere, signals cannot be used: soft limits are then not enforced, and said so).

        The exception is raised only in the task's own code (see :func:`task_frame`).
        When the signal finds the task inside redis-py or this library, it is raised as
        soon as the task's code runs again: a trace function, installed only until then,
        watches for it. When it finds the worker's own code (the task has returned), it
        is dropped.
        """
        if threading.current_thread() is not threading.main_thread():
            return

        def expired(signum: int, frame: FrameType | None) -> None:
            entry = self._soft_limit_entry
            if entry is None:
                return  # the task has returned: its limit no longer applies
            target = task_frame(frame, entry)
            if target is frame:
                self._soft_limit_entry = None  # raised once; the task may catch it
                raise SoftTimeLimitExceeded("the task ran past its soft time limit")
            self._raise_when_task_code_runs(entry, target)

        self._handler_before = (signal.signal(signal.SIGALRM, expired),)

    def release_signal(self) -> None:
        """Give SIGALRM back the handler it had before :meth:`catch_soft_limits`."""
        if self._handler_before is not None:
            signal.signal(signal.SIGALRM, self._handler_before[0])
            self._handler_before = None

    def _raise_when_task_code_runs(self, entry: CodeType, target: FrameType | None) -> None:
        """Trace this thread until the task's code runs, and raise the soft limit there."""
        if self._traced_before is not None:
            return  # already watching
        self._traced_before = (sys.gettrace(),)

        def trace(frame: FrameType, event: str, arg: Any) -> Any:
            if self._soft_limit_entry is not entry:
                return None
            if task_frame(frame, entry) is not frame:
                return None  # no line events in protected code: they would cost time
            self._soft_limit_entry = None
            self._stop_tracing()
            raise SoftTimeLimitExceeded("the task ran past its soft time limit")

        if target is not None:  # the frame that the protected call returns to
            target.f_trace = trace
            target.f_trace_lines = True
        sys.settrace(trace)

    def _stop_tracing(self) -> None:
        if self._traced_before is not None:
            sys.settrace(self._traced_before[0])
            self._traced_before = None

    def start(self, job: Job) -> None:
        """Start the limits of ``job``, which is about to run in this thread."""
        if job.soft_time_limit is not None:
            if threading.current_thread() is threading.main_thread():
                self._soft_limit_entry = type(job).call.__code__
                signal.setitimer(signal.ITIMER_REAL, job.soft_time_limit)
            else:
                logger.warning("Soft time limits work in a worker's main thread only")
        if job.time_limit is not None and self._deadline is not None:
            self._deadline.value = time.monotonic() + job.time_limit

    def stop(self) -> None:
        """End the running job's limits (it returned, or raised)."""
        # First forget the limit: a SIGALRM that comes now finds nothing to raise.
        self._soft_limit_entry = None
        self._stop_tracing()
        if threading.current_thread() is threading.main_thread():
            signal.setitimer(signal.ITIMER_REAL, 0)
        if self._deadline is not None:
            self._deadline.value = 0.0
