"""The delivery protocol of one worker process: what it holds between round trips.

A worker records how its tasks ended and takes the next in one script call (through
:class:`~redis_components.tasks.store.WorkerStore`). Between two calls it holds the
outcomes not yet recorded, the takes sent ahead whose replies are unread, the tasks those
takes hold ahead, and after a lost connection the duty to reclaim a take whose reply it
never read. The :class:`Conveyor` owns that; the worker calls its verbs only under its
step lock, so the conveyor has no lock of its own.

While tasks are short, takes are pipelined: each task's start sends the call that
records the task before it and takes one more ahead, without reading the reply, which
is read only when the task it took is to start (a few tasks later). So a round trip to
Redis overlaps the tasks run meanwhile, and a worker across a network runs many tasks
per round trip's wait. How many it holds ahead grows from one while it has to wait for
those replies, up to ``TASK_TAKE_AHEAD``. Each take is its own script call: its own
attempt fence, and a task held ahead that the worker dies holding goes back uncharged.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Any, Protocol

from ..conf import conf
from ..connection import REDIS_DOWN
from .lease import Lease
from .messages import flow_of, task_id_of
from .store import Ahead, Fetched, Outcome, WorkerStore

logger = logging.getLogger("redis_components.worker")

# A reply read after this long (seconds) was waited for: the worker holds one more ahead.
WAITED = 0.0002


class Execution(Protocol):
    """What the conveyor reads of a finished execution (``slots.Execution``)."""

    outcome: Outcome | None


class Conveyor:
    """Outcomes to record, the takes sent ahead and the tasks held ahead, of one worker
    whose side of the store is ``tasks`` and whose ``lease`` puts back a lost take.
    ``hold_for``: seconds the tasks held ahead wait for the task before them to end."""

    def __init__(self, tasks: WorkerStore, lease: Lease[Any], hold_for: float) -> None:
        self.tasks = tasks
        self._lease = lease
        self._hold_for = hold_for
        # Finished executions whose outcomes the next fetch records (kept until recorded).
        self.outcomes: list[Execution] = []
        # The calls sent whose replies are unread, oldest first, each with the execution
        # whose outcome it records; the tasks they took, held ahead in their order; when
        # those go back.
        self._pending: collections.deque[tuple[Ahead, Execution | None]] = collections.deque()
        self._steps_pending = 0  # of those calls, the ones recording a workflow step's outcome
        self._ahead: collections.deque[Fetched] = collections.deque()
        self._ahead_until = math.inf
        # How many tasks it may hold ahead now (taken or being taken): see WAITED.
        self._take_ahead = int(conf.get("TASK_TAKE_AHEAD"))
        self.depth = min(1, self._take_ahead)
        self.deepest = self.depth  # the most it grew to (for tests and benchmarks)
        # After a lost connection (the worker sets it): a take's reply may be lost with it.
        self.reclaiming = False

    @property
    def holding(self) -> bool:
        """A call was sent ahead whose reply is unread, or a task is held ahead."""
        return bool(self._pending or self._ahead)

    @property
    def takes_ahead(self) -> bool:
        """Whether it may take tasks ahead at all (``TASK_TAKE_AHEAD`` is not 0)."""
        return self._take_ahead > 0

    @property
    def held(self) -> int:
        """The tasks held ahead, and those that the calls under way may take."""
        return len(self._ahead) + sum(1 for ahead, _ in self._pending if ahead.mode)

    def hand_out(self) -> Fetched | None:
        """The first task held ahead, to start now (:meth:`start` records its start),
        reading the replies before its own; ``None`` once none is left."""
        while not self._ahead and self._pending:
            began = time.monotonic()
            self._receive_one()
            if self._ahead and time.monotonic() - began > WAITED:
                self.depth = min(self.depth + 1, self._most())
                self.deepest = max(self.deepest, self.depth)
        return self._ahead.popleft() if self._ahead else None

    def hold_left(self) -> float:
        """Seconds until the tasks held ahead go back (``inf``: none is held)."""
        return self._ahead_until - time.monotonic()

    def sent_before(self, moment: float) -> bool:
        """A take is sent ahead whose task goes back before ``moment`` (monotonic)."""
        return bool(self._pending) and self._ahead_until < moment

    def fetch(self, take: bool, start: Fetched | None = None) -> Fetched:
        """Record the queued outcomes, the last with a take (if ``take``) and the start
        of ``start`` (a task held ahead)."""
        try:
            self._record_all_but_last()
            return self._fetch_one(take, start)
        except REDIS_DOWN:
            self._hold_again(start)
            raise

    def record(self) -> None:
        """Record every queued outcome, taking nothing."""
        self.receive()
        while self.outcomes:
            self._fetch_one(take=False)

    def start(self, fetched: Fetched | None, *, ahead: bool, room: float = math.inf) -> None:
        """Start ``fetched``, the task held ahead that :meth:`hand_out` gave (if given),
        recording the queued outcomes with it; ``ahead``: its task is short, so that
        call is sent without waiting for its reply (read by :meth:`hand_out` or
        :meth:`receive`), and takes tasks to hold ahead until :attr:`depth` (at most
        ``room``) are held or being taken."""
        if not ahead:
            if fetched is not None:
                self.fetch(take=False, start=fetched)
            return
        try:
            if not self._may_pipeline():
                self.receive()
            if len(self.outcomes) > 1:
                self._record_all_but_last()
            execution, outcome = self._first_outcome()
            self.depth = min(self.depth, self._most())  # (its queues' homes may have changed)
            most = min(self.depth, room)
            # After a workflow step's outcome, nothing: its reply's reader carries it.
            last = outcome is not None and flow_of(outcome.delivery.payload) is not None
            while self.held < most or outcome is not None or fetched is not None:
                sent = self.tasks.take_ahead(
                    outcome,
                    start=fetched,
                    take=self.held < most,
                    # Behind calls under way, the time is read, not reckoned: one of them
                    # may read a later time than the reckoning, which never steps back.
                    read_clock=bool(self._pending),
                )
                if execution is not None:
                    self.outcomes.pop(0)
                self._pending.append((sent, execution))
                execution = outcome = fetched = None  # (more calls only take: depth grew)
                if last:
                    self._steps_pending += 1
                    break
        except REDIS_DOWN:
            self._hold_again(fetched)  # (None once its start was sent)
            raise
        self._ahead_until = time.monotonic() + self._hold_for

    def _hold_again(self, fetched: Fetched | None) -> None:
        """Redis was lost before the start of ``fetched`` (a task held ahead, handed out)
        was sent, or with its reply: it is held ahead again, first. Started again later
        (its start is a ZADD XX, whether the first went through or not), it runs once."""
        if fetched is not None:
            self._ahead.appendleft(fetched)

    def receive(self) -> None:
        """Read the replies of the calls sent ahead: the tasks they took are held ahead."""
        while self._pending:
            self._receive_one()

    def give_back(self) -> None:
        """Give the tasks held ahead back to their queues: the task before them lasts, or
        the worker stops. They go back where they were, and wake idle workers."""
        self.receive()
        self._ahead_until = math.inf
        self.depth = min(1, self._take_ahead)
        while self._ahead:
            held = self._ahead.popleft()
            if held.payload is not None:
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
        self._ahead.clear()  # (put back with the others)
        self._lease.beat()
        self.reclaiming = False

    def _most(self) -> int:
        """The most tasks it may hold ahead: ``TASK_TAKE_AHEAD``, or one where a call
        may not be sent while another's reply is unread."""
        return self._take_ahead if self.tasks.pipelines else min(self._take_ahead, 1)

    def _may_pipeline(self) -> bool:
        """Whether a call may be sent before the replies of those under way are read:
        nothing but those replies is read on their connection meanwhile (one home; no
        workflow step's outcome, which its reply's reader carries to its workflow)."""
        return self.tasks.pipelines and not self._steps_pending

    def _receive_one(self) -> None:
        ahead, execution = self._pending.popleft()
        if ahead.finished is not None and flow_of(ahead.finished.delivery.payload) is not None:
            self._steps_pending -= 1
        try:
            fetched = self.tasks.receive(ahead, last=not self._pending)
        except REDIS_DOWN:
            # Each outcome is recorded again (fenced: at most once), and the tasks the
            # calls may have taken go back.
            executions = [execution, *(later for _, later in self._pending)]
            self._pending.clear()
            self._steps_pending = 0
            self.outcomes[:0] = [e for e in executions if e is not None]
            self.reclaiming = True
            raise
        except Exception:  # the server refused this call (its script did not run)
            if execution is not None:
                self.outcomes.insert(0, execution)
            raise
        self._check_recorded(ahead.finished, fetched)
        if fetched.position < 0:
            # Taken for dead: the tasks held ahead were taken before, so they went back
            # to their queues with its others (recovery takes them all at once).
            self._ahead.clear()
        elif fetched.payload is not None:
            self._ahead.append(fetched)

    def _record_all_but_last(self) -> None:
        """Read the calls sent ahead, and record every queued outcome but the last, a
        call each: the last goes with what the caller sends next."""
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
