"""The delivery protocol of one worker process: what it holds between round trips.

A worker records how its tasks ended and takes the next in one script call (through
:class:`~redis_components.tasks.store.WorkerStore`). Between two calls it holds the
outcomes not yet recorded, a take sent ahead whose reply is unread, the task that take
holds ahead, and after a lost connection the duty to reclaim a take whose reply it never
read. The :class:`Conveyor` owns that; the worker calls its verbs only under its step
lock, so the conveyor has no lock of its own.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Protocol

from ..connection import REDIS_DOWN
from .lease import Lease
from .messages import task_id_of
from .store import Ahead, Fetched, Outcome, WorkerStore

logger = logging.getLogger("redis_components.worker")


class Execution(Protocol):
    """What the conveyor reads of a finished execution (``slots.Execution``)."""

    outcome: Outcome | None


class Conveyor:
    """Outcomes to record, the take sent ahead and the task held ahead, of one worker
    whose side of the store is ``tasks`` and whose ``lease`` puts back a lost take.
    ``hold_for``: seconds a task held ahead waits for the task before it to end."""

    def __init__(self, tasks: WorkerStore, lease: Lease[Any], hold_for: float) -> None:
        self.tasks = tasks
        self._lease = lease
        self._hold_for = hold_for
        # Finished executions whose outcomes the next fetch records (kept until recorded).
        self.outcomes: list[Execution] = []
        # The take sent whose reply is unread, with the execution whose outcome it records;
        # the task it took, held ahead; when that goes back.
        self._pending: tuple[Ahead, Execution | None] | None = None
        self._ahead: Fetched | None = None
        self._ahead_until = math.inf
        # After a lost connection (the worker sets it): a take's reply may be lost with it.
        self.reclaiming = False

    @property
    def holding(self) -> bool:
        """A take was sent ahead, or a task is held ahead."""
        return self._pending is not None or self._ahead is not None

    def hand_out(self) -> Fetched | None:
        """The task held ahead, to start now (:meth:`start` records its start)."""
        held, self._ahead = self._ahead, None
        return held

    def hold_left(self) -> float:
        """Seconds until the task held ahead goes back (``inf``: none is held)."""
        return self._ahead_until - time.monotonic()

    def sent_before(self, moment: float) -> bool:
        """A take is sent ahead whose task goes back before ``moment`` (monotonic)."""
        return self._pending is not None and self._ahead_until < moment

    def fetch(self, take: bool, start: Fetched | None = None) -> Fetched:
        """Record the queued outcomes, the last with a take (if ``take``) and the start
        of ``start`` (a task held ahead)."""
        self._record_all_but_last()
        return self._fetch_one(take, start)

    def record(self) -> None:
        """Record every queued outcome, taking nothing."""
        self.receive()
        while self.outcomes:
            self._fetch_one(take=False)

    def start(self, fetched: Fetched | None, *, ahead: bool) -> None:
        """Start ``fetched``, the task held ahead that :meth:`hand_out` gave (if given),
        recording the queued outcomes with it; ``ahead``: take the next task to hold
        ahead in that same call, whose reply :meth:`receive` reads."""
        if not ahead:
            if fetched is not None:
                self.fetch(take=False, start=fetched)
            return
        self._record_all_but_last()
        execution, outcome = self._first_outcome()
        sent = self.tasks.take_ahead(outcome, start=fetched)
        if execution is not None:
            self.outcomes.pop(0)
        self._pending = (sent, execution)
        self._ahead_until = time.monotonic() + self._hold_for

    def receive(self) -> None:
        """Read the reply of the take sent ahead, if any: the task it took is held ahead."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        ahead, execution = pending
        try:
            fetched = self.tasks.receive(ahead)
        except REDIS_DOWN:
            if execution is not None:  # recorded again (fenced: at most once)
                self.outcomes.insert(0, execution)
            self.reclaiming = True  # and the task it may have taken goes back
            raise
        self._check_recorded(ahead.finished, fetched)
        if fetched.position > 0 and fetched.payload is not None:
            self._ahead = fetched

    def give_back(self) -> None:
        """Give the task held ahead back to its queue: the task before it lasts, or the
        worker stops. It goes back where it was, and wakes idle workers."""
        self.receive()
        held, self._ahead = self._ahead, None
        self._ahead_until = math.inf
        if held is not None and held.payload is not None:
            self.tasks.put_back_ahead(held, task_id_of(held.payload))

    def reclaim(self, busy: bool) -> None:
        """After an outage: record the outcomes, and put back a take never seen, once
        nothing runs (``busy``: tasks run now)."""
        if not self.reclaiming:
            return
        self.record()
        if busy:
            # The lost take is among the tasks held with those running: it goes back
            # once none runs (or when this worker stops), as long as it is held.
            return
        # A take whose reply was lost left a task in our in-progress set that we do not
        # know of: put it back (we run nothing now) and register again.
        self._lease.tasks.put_back()  # (a pipeline: not on the loop's one connection)
        self._ahead = None  # (put back with the others)
        self._lease.beat()
        self.reclaiming = False

    def _record_all_but_last(self) -> None:
        """Read the take sent ahead, and record every queued outcome but the last, a call
        each: the last goes with what the caller sends next."""
        self.receive()
        while len(self.outcomes) > 1:
            self._fetch_one(take=False)

    def _fetch_one(self, take: bool, start: Fetched | None = None) -> Fetched:
        execution, outcome = self._first_outcome()
        send = self.tasks.take if take else self.tasks.record
        fetched = send(outcome, start=start)
        if execution is not None:
            self.outcomes.pop(0)
        self._check_recorded(outcome, fetched)
        return fetched

    def _first_outcome(self) -> tuple[Execution | None, Outcome | None]:
        execution = self.outcomes[0] if self.outcomes else None
        return execution, None if execution is None else execution.outcome

    def _check_recorded(self, outcome: Outcome | None, fetched: Fetched) -> None:
        # After an outage the outcome may have been recorded by a call whose reply was lost.
        if outcome is not None and not fetched.recorded and not self.reclaiming:
            logger.warning(
                "Task %s was put back on its queue while this worker ran it (the worker's "
                "lease had run out); it will run again",
                outcome.task_id or "(not a task)",
            )
