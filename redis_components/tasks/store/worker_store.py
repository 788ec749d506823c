"""WorkerStore: what one worker says of its own tasks."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...conf import conf
from ...connection import REDIS_DOWN
from ...scripts import Call
from ..limits import settings_json
from ..messages import flow_of
from . import layout
from .calls import fetch_call, fetch_keys, limits_run_call, put_back_call
from .layout import FORGET_AFTER_MS
from .records import Delivery, Fetched, Heartbeat, Outcome
from .task_store import TaskStore

logger = logging.getLogger("redis_components.worker")

# How often (server ms) a busy worker's takes move due delayed tasks.
MOVE_EVERY_MS = 100
# For how long (seconds) a worker reckons the server's time from its clock's last
# reading, instead of having each fetch read the clock (a TIME per task).
RECKON_FOR = 1.0
# How often (seconds) a worker whose queues have homes of their own looks for stray homes.
STRAY_EVERY = 10.0
# For how long (seconds) at most a take leaves out a home it found empty, unless a
# wake-up from it is heard first.
EMPTY_FOR = 0.1
# How often (seconds) the takes start at the next partition of each queue that has
# several: in between, a take looks first where the last task came from, so that its
# outcome is recorded in the same script.
ROTATE_EVERY = 0.1


@dataclass(frozen=True)
class Ahead:
    """A take sent by :meth:`WorkerStore.take_ahead`, whose reply is unread."""

    call: Call
    mode: str
    finished: Outcome | None
    read_at: float | None  # when it was sent, if its script reads the server's clock
    run: Run
    recorded: bool | None = None  # ``finished`` was recorded before (by a call of its run)


@dataclass(frozen=True)
class Run:
    """Consecutive queues of a worker that share a home (or one partition of a queue):
    one script there takes from them."""

    head: str
    queues: list[str]
    first: int  # the position (1-based, among the worker's lanes) of its first queue
    keys: list[str]  # calls.fetch_keys
    channels: frozenset[str]  # its queues' wake-up channels
    group: int = -1  # for a partition: its queue's index among the worker's queues

    def holds(self, position: int) -> bool:
        return self.first <= position < self.first + len(self.queues)


def runs(worker_id: str, queues: Sequence[str]) -> list[Run]:
    """``queues`` cut into :class:`Run` s, in their order: a lane per queue and home, and
    consecutive lanes of queues without partitions share a run where they share a home."""
    lanes = [
        (queue, head, index if len(heads) > 1 else -1)
        for index, queue in enumerate(queues)
        for heads in [layout.own_homes(queue)]
        for head in heads
    ]
    found: list[Run] = []
    first = 1
    for (head, group), grouped in itertools.groupby(lanes, key=lambda lane: lane[1:]):
        served = [queue for queue, _, _ in grouped]
        found.append(_run(worker_id, head, served, first, group))
        first += len(served)
    return found


def _run(worker_id: str, head: str, queues: list[str], first: int, group: int = -1) -> Run:
    channels = frozenset(layout.ready_key(queue, head) for queue in queues)
    return Run(head, queues, first, fetch_keys(worker_id, queues, head), channels, group)


@dataclass(frozen=True)
class Empty:
    """A run that a take found empty: left out until ``until`` (monotonic), or a wake-up
    from it; a take that moves delayed tasks looks there again once ``due_ms``."""

    until: float
    due_ms: float | None  # (server ms) when its next delayed task is due; None: not known


_now = time.monotonic


def _final(fetched: Fetched) -> bool:
    """Whether a take's reply ends the looking: a task, or no lease (a position < 0)."""
    return fetched.payload is not None or fetched.position < 0


class WorkerStore:
    """What a worker process says of its own tasks (its loop, its lease, ``rc_worker``'s
    supervisor and :mod:`redis_components.testing` use it), one per thread that talks to
    Redis; ``client`` gives a home's client, given its head. It reads ``TASK_LIMITS`` once.

    A take moves due delayed tasks (with ``move_delayed``) only when one may be due: when
    the last move said one falls due by now, when a retry or deferral it recorded falls
    due, every ``MOVE_EVERY_MS``, and whenever no ready task is left. Fetches between
    those take the server's time reckoned from its last reading and the monotonic clock,
    which spares a ``TIME`` per task: within a millisecond or so, and never stepping back.

    Queues of several homes are cut into :class:`Run` s: a take looks in each run in
    order, one script per run, until one gives a task, and an outcome is recorded with
    the call in its own run. Given ``heard`` (the worker's :meth:`Waker.heard`), takes
    leave out the runs found empty (see :class:`Empty`), so that a busy worker sends one
    script per task.
    """

    def __init__(
        self,
        worker_id: str,
        queues: Sequence[str],
        *,
        move_delayed: bool = True,
        client: Callable[[str], Any] = layout.tasks_client,
        heard: Callable[[], set[str] | None] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.queues = list(queues)
        self.move_delayed = move_delayed
        self.now_ms = int(time.time() * 1000)  # until the server says
        self._move_at = 0  # (server ms) when a take next moves due delayed tasks
        # The server's clock as a fetch read it, and time.monotonic() when its reply
        # came (for a take ahead, whose reply is read after a task ran: when it was sent).
        self._clock_read: tuple[int, float] | None = None
        self._given_ms = 0  # the latest time a call was given (its "now", or its floor)
        self._client = client
        self._own = runs(worker_id, self.queues)
        self._runs = self._own
        # The runs after its own, in homes that hold tasks of its queues while they do
        # (see _watch_others): by home, each made once (positions are never reused).
        self._others: dict[str, Run] = {}
        self._lanes = [queue for run in self._own for queue in run.queues]  # by position
        self._split = layout.shared_home() is not None  # (queues have homes of their own)
        self._stray_at = 0.0  # (monotonic) when it next looks for stray homes
        self._turns = 0  # the takes made: the order of the next one (see _in_turn)
        # The partition each take looks in first (modulo their number): its own at first.
        self._rotation = zlib.crc32(worker_id.encode())
        self._rotate_at = _now() + ROTATE_EVERY
        self._heard = heard
        self._empty: dict[int, Empty] = {}  # by Run.first: the runs it leaves out
        # Per home: the steps whose outcomes it carried, their outbox entries left to
        # the next fetch that records a step there (see _carried).
        self._carried_ids: dict[str, list[str]] = {}
        self._limits = settings_json(conf.TASK_LIMITS)

    @property
    def store(self) -> TaskStore:
        return TaskStore(at=self._client)

    def queue_at(self, position: int) -> str:
        """The queue of a task taken at ``position`` (see :class:`Fetched`)."""
        return self._lanes[position - 1]

    def delivery(self, fetched: Fetched) -> Delivery:
        """The task ``fetched`` took (its payload is not ``None``), as it is run."""
        assert fetched.payload is not None
        return Delivery(
            position=fetched.position,
            queue=self.queue_at(fetched.position),
            payload=fetched.payload,
            attempt=fetched.now_ms,
        )

    def _watch_others(self) -> None:
        """Serve the stray homes that hold tasks of its queues, while they do, as runs
        after its own (at positions after theirs). Looked at every ``STRAY_EVERY``."""
        if not self._split or _now() < self._stray_at:
            return
        self._stray_at = _now() + STRAY_EVERY
        others: dict[str, tuple[list[str], int]] = {}
        layout.noted_counts(fresh=True)
        for queue in self.queues:
            self._forget_counts(queue)
            for head, count in layout.stray_homes(queue).items():
                others.setdefault(head, ([], count))[0].append(queue)
        serving = [run for run in self._runs[len(self._own) :] if run.head in others]
        for head, (queues, count) in others.items():
            held = any(run.head == head for run in serving)
            if self.store.holds_tasks(head, queues, self.worker_id):
                if not held:
                    serving.append(self._other(head, queues, count))
            elif held:
                serving = [run for run in serving if run.head != head]
                self._empty.pop(self._others[head].first, None)
        self._runs = [*self._own, *serving] if serving else self._own

    def _forget_counts(self, queue: str) -> None:
        """Forget ``queue``'s stale partition counts whose homes are empty (forget_count)."""
        before = self.now_ms - FORGET_AFTER_MS
        for count, noted_ms in layout.noted_counts().get(queue, {}).items():
            stale = count != layout.partitions(queue) and noted_ms < before
            if stale and self.store.forget_count(queue, count, before):
                logger.info(
                    "Worker %s: no task of %s is left in a home of %d partitions",
                    self.worker_id,
                    queue,
                    count,
                )

    def _other(self, head: str, queues: list[str], count: int) -> Run:
        """The run in another home, fenced from its first take by its lease's copy there."""
        new = head not in self._others or self._others[head].queues != queues
        if new:
            self._others[head] = _run(self.worker_id, head, queues, len(self._lanes) + 1)
            self._lanes += queues
        if count:
            self.store.copy_lease(self.worker_id, head)
        if count and new:
            logger.warning(
                "Worker %s takes the tasks of %s left in a home of %d partitions, which "
                "QUEUE_PARTITIONS said before (or says in another process), until none "
                "is left",
                self.worker_id,
                ", ".join(queues),
                count,
            )
        return self._others[head]

    @property
    def may_take_ahead(self) -> bool:
        """Whether :meth:`take_ahead` may be used: its queues share one home, or no take
        is to move delayed tasks now (the take ahead looks in the first open run)."""
        if len(self._runs) == 1:
            return True
        if self._heard is None:  # (then its takes never leave a run out)
            return False
        self._listen()
        self._watch_others()
        return self._take_mode() == "take" and self._open_run() is not None

    @property
    def listens(self) -> bool:
        """Whether its takes leave out the homes they found empty until a wake-up from
        there is heard (see the class): the worker should subscribe before it is idle."""
        return self._heard is not None and (len(self._own) > 1 or self._split)

    def _open_run(self) -> Run | None:
        """The first run, in turn, that a take does not leave out (or ``None``)."""
        now = _now()
        for run in self._in_turn("take"):
            empty = self._empty.get(run.first)
            if empty is None or now >= empty.until:
                return run
        return None

    def take(self, finished: Outcome | None = None, *, start: Fetched | None = None) -> Fetched:
        """Record ``finished`` (how a task it took ended) and start ``start`` (a task it
        held ahead), if given, and take the next task, in one script per run looked in.
        Its log line (``Outcome.said``) is written while the server runs the script."""
        self._listen()
        self._watch_others()
        mode = self._take_mode()
        fetched = self._carried(finished, self._over_runs(mode, finished, start))
        if mode == "take" and self.move_delayed and not _final(fetched):
            # Nothing ready: a due delayed task may be. (Recorded is the first call's.)
            return dataclasses.replace(self._over_runs("take+move"), recorded=fetched.recorded)
        return fetched

    def record(self, finished: Outcome | None, *, start: Fetched | None = None) -> Fetched:
        """Record how a task it took ended (and start ``start``), and take nothing."""
        return self._carried(finished, self._over_runs("", finished, start))

    @property
    def pipelines(self) -> bool:
        """Whether :meth:`take_ahead` may send while replies to earlier ones are unread:
        its queues share one home, so nothing else is sent on that connection between."""
        return len(self._runs) == 1

    def take_ahead(
        self,
        finished: Outcome | None,
        *,
        start: Fetched | None = None,
        take: bool = True,
        read_clock: bool = False,
    ) -> Ahead:
        """:meth:`take` a task to hold ahead (not started) without waiting for the reply
        (:meth:`receive`); a later call starts it, or :meth:`put_back_ahead` gives it back.
        Only where :attr:`may_take_ahead` (another run's outcome or start goes first).
        ``take=False``: record and start, taking nothing. ``read_clock``: calls are under way,
        so this one reads the server's clock too (its time, reckoned from an older
        reading, could fall before one that those calls read)."""
        if len(self._runs) == 1:
            run, mode = self._runs[0], self._take_mode() if take else ""
        else:  # (moves are left to the takes over every run)
            open_run = self._open_run()
            assert open_run is not None, "take_ahead needs may_take_ahead"
            run, mode = open_run, "take" if take else ""
            if take:
                self._take_turn()
        told, recorded = finished, None
        held = [finished.delivery.position] if finished is not None else []
        held += [start.position] if start is not None else []
        if not all(run.holds(position) for position in held):
            recorded = self.record(finished, start=start).recorded
            finished = start = None
        call, reads = self._call(run, mode, finished, start, ahead=True, read_clock=read_clock)
        sent_at = _now()  # its reply is read after a task ran: the send is nearer
        self.store.send_fetch(call, meanwhile=finished.said if finished else None)
        return Ahead(call, mode, told, sent_at if reads else None, run, recorded)

    def receive(self, ahead: Ahead, *, last: bool = True) -> Fetched:
        """The reply to :meth:`take_ahead`; ``last``: no later one is unread (else a
        script the server forgot cannot be run again here: the connection is closed)."""
        reply = self.store.receive_fetch(ahead.call, again=last)
        fetched = self._received(reply, ahead.read_at, ahead.run)
        self._plan_moves(ahead.mode, fetched.next_ms, ahead.finished)
        if len(self._runs) > 1:
            self._found(ahead.run, ahead.mode, fetched)
        if ahead.recorded is not None:  # (by a call of its own, which carried it)
            return dataclasses.replace(fetched, recorded=ahead.recorded)
        return self._carried(ahead.finished, fetched)

    def _carried(self, finished: Outcome | None, fetched: Fetched) -> Fetched:
        """``fetched``, once the outcome of a workflow's step it recorded is carried to its
        workflow (lua/lib/flow.lua); without Redis a worker's heartbeat carries it later."""
        flow = flow_of(finished.delivery.payload) if finished is not None else None
        if finished is None or flow is None or not fetched.recorded:
            return fetched
        task_id = finished.task_id
        # A success's entry is known; others are read (a retry may have been a cancel).
        known = f"{flow.step} {flow.workflow} {task_id} S {finished.data}".encode()
        try:
            # The entry stays: the next fetch of a step in its home deletes it (_call).
            if self.store.carry_step(
                task_id, known if finished.kind == "ok" else None, delete=False
            ):
                self._carried_ids.setdefault(layout.task_home(task_id), []).append(task_id)
        except REDIS_DOWN as error:
            logger.warning(
                "Worker %s could not carry the outcome of step %s to its workflow yet: %s",
                self.worker_id,
                finished.task_id,
                error,
            )
        return fetched

    def clear_carried(self) -> None:
        """Delete the outbox entries of the outcomes it carried that its next fetches
        were to delete (it stops): carried again first, which counts nothing twice."""
        while self._carried_ids:
            head, task_ids = self._carried_ids.popitem()
            self.store.carry_outcomes(head, task_ids)

    def put_back_ahead(self, held: Fetched, task_id: str) -> bool:
        """Give back a task it took ahead and has not started; whether it still held it."""
        assert held.payload is not None
        queue = self.queue_at(held.position)
        call = put_back_call(worker_id=self.worker_id, queue=queue, held=held, task_id=task_id)
        return self.store.put_back_ahead(call)

    def hold_run(self, delivery: Delivery, task_id: str, *, hold: bool = True) -> None:
        """A run of task ``task_id`` goes on beyond its record (abandoned, or this worker
        taken for dead): its permits stay held until it really ends (``hold=False``) or
        this worker's tasks are recovered. Nothing for a task without limits."""
        if task_id:
            runs = [*self._own, *self._others.values()]
            head = next(run.head for run in runs if run.holds(delivery.position))
            call = limits_run_call(
                worker_id=self.worker_id,
                head=head,
                task_id=task_id,
                payload=delivery.payload,
                hold=hold,
            )
            self.store.limits_run(call)

    def _over_runs(
        self, mode: str, finished: Outcome | None = None, start: Fetched | None = None
    ) -> Fetched:
        """Fetch in each run in turn until one takes a task (``mode`` "": none); ``finished``
        and ``start`` go with their runs' calls, and "take+move" moves every run's due tasks."""
        if len(self._runs) == 1:  # (one script, as always on a single server)
            fetched = self._fetch(self._runs[0], mode, finished, start)
            self._plan_moves(mode, fetched.next_ms, finished)
            return fetched
        taken: Fetched | None = None  # the take's reply: a task, or no lease
        last: Fetched | None = None
        recorded, waits = False, list[int]()
        in_turn = self._in_turn(mode)
        if mode:
            self._take_turn()
        for run in in_turn:
            outcome = (
                finished if finished is not None and run.holds(finished.delivery.position) else None
            )
            begin = start if start is not None and run.holds(start.position) else None
            looking = bool(mode) and taken is None
            # Once a task is taken, the later runs' due delayed tasks still move.
            then = mode if looking else ("move" if mode == "take+move" else "")
            if then and self._left_out(run, then, waits):
                then = ""
            if not (then or outcome or begin):
                continue
            fetched = last = self._fetch(run, then, outcome, begin)
            if outcome is not None:
                recorded = fetched.recorded
            if fetched.next_ms >= 0:
                waits.append(fetched.next_ms)
            if looking and then:
                self._found(run, then, fetched)
                if _final(fetched):
                    taken = fetched
        wait = min(waits, default=-1)
        self._plan_moves(mode, wait, finished)
        reply = taken or last
        if reply is None:  # every run was left out, and nothing was to be recorded
            # Never "look again now" (a wait of 0): the worker would spin until a mark ends.
            marks = [self._empty.get(run.first) for run in self._runs]
            ends = min((mark.until for mark in marks if mark is not None), default=_now())
            wait = min((w for w in [*waits, math.ceil((ends - _now()) * 1000)] if w > 0), default=1)
            now = self._reckoned()
            return Fetched(payload=None, position=0, next_ms=wait, recorded=False, now_ms=now)
        return dataclasses.replace(reply, recorded=recorded, next_ms=wait)

    def _in_turn(self, mode: str) -> list[Run]:
        """The runs in the order a fetch in ``mode`` looks in them: a queue's partitions
        from the one the takes start at (``ROTATE_EVERY``); other homes first every other
        take, so that neither its own queues' tasks nor those there wait for the others."""
        if not mode or len(self._runs) == 1:
            return self._runs
        order: list[Run] = []
        for _, group in itertools.groupby(self._own, key=lambda run: run.group):
            found = list(group)
            if found[0].group >= 0:
                start = self._rotation % len(found)
                found = found[start:] + found[:start]
            order += found
        others = self._runs[len(self._own) :]
        return [*others, *order] if self._turns % 2 == 0 else [*order, *others]

    def _take_turn(self) -> None:
        self._turns += 1
        if _now() >= self._rotate_at:
            self._rotation += 1
            self._rotate_at = _now() + ROTATE_EVERY

    def _listen(self) -> None:
        """Look again in the runs that a wake-up was heard from (in all, and for stray
        homes, when wake-ups may have been missed): at each take, so none pile up unread."""
        if self._heard is None or not (self._empty or self._split):
            return
        try:
            heard = self._heard()
        except Exception:  # (the loop's wait finds the subscription lost, and renews it)
            heard = None
        if heard is None:
            self._empty.clear()
            self._stray_at = 0.0
        elif heard:
            for run in self._runs:
                if run.channels & heard:
                    self._empty.pop(run.first, None)

    def _left_out(self, run: Run, mode: str, waits: list[int]) -> bool:
        """Whether a fetch in ``mode`` leaves ``run`` out (it found it empty); the wait
        until its next delayed task is added to ``waits``."""
        empty = self._empty.get(run.first)
        if empty is None:
            return False
        if _now() >= empty.until:
            del self._empty[run.first]
            return False
        now = self._reckoned()
        if empty.due_ms is not None and math.isfinite(empty.due_ms):
            waits.append(max(0, math.ceil(empty.due_ms) - now))
        if mode == "take":
            return True
        return empty.due_ms is not None and now < empty.due_ms

    def _found(self, run: Run, mode: str, fetched: Fetched) -> None:
        """Remember whether a take found ``run`` empty (:class:`Empty`): not after a wait
        of 0 (tasks set aside on their limits, or more due), which no wake-up would say."""
        if self._heard is None or _final(fetched) or fetched.next_ms == 0:
            self._empty.pop(run.first, None)
            return
        due: float | None = None  # (a "take" reply's wait is a limit's, not a due task's)
        if mode == "take+move":
            # -1: no delayed task is left; a new earliest one wakes the worker.
            due = fetched.now_ms + fetched.next_ms if fetched.next_ms >= 0 else math.inf
        self._empty[run.first] = Empty(_now() + EMPTY_FOR, due)

    def _fetch(
        self, run: Run, mode: str, finished: Outcome | None = None, start: Fetched | None = None
    ) -> Fetched:
        call, reads = self._call(run, mode, finished, start)
        reply = self.store.fetch(call, meanwhile=finished.said if finished else None)
        return self._received(reply, _now() if reads else None, run)

    def _take_mode(self) -> str:
        return "take+move" if self.move_delayed and self.now_ms >= self._move_at else "take"

    def _call(
        self,
        run: Run,
        mode: str,
        finished: Outcome | None = None,
        start: Fetched | None = None,
        *,
        ahead: bool = False,
        read_clock: bool = False,
    ) -> tuple[Call, bool]:
        """The call in ``run``, and whether its script reads the server's clock (a take
        that moves delayed tasks, any fetch once the last reading is ``RECKON_FOR`` old,
        and where ``read_clock``)."""
        clock_ms, reads = 0, True
        if self._clock_read is not None:
            clock_ms = self._given_ms = self._reckoned()
            stale = _now() - self._clock_read[1] > RECKON_FOR
            reads = read_clock or mode == "take+move" or stale
        carried: list[str] = []
        if finished is not None and finished.task_id and flow_of(finished.delivery.payload):
            carried = self._carried_ids.pop(layout.task_home(finished.task_id), [])
        call = fetch_call(
            worker_id=self.worker_id,
            worker_keys=run.keys,
            mode=mode,
            outcome=finished,
            hour=self.now_ms // 3_600_000,
            start=start,
            shift=run.first - 1,
            ahead=ahead,
            clock_ms=clock_ms,
            exact=not reads,
            limits=self._limits,
            carried=carried,
        )
        return call, reads

    def _reckoned(self) -> int:
        """The server's time reckoned from its clock's last reading, never before a time
        replied or given to a call: a reading whose reply came late runs ahead, and the
        calls given its time may still be under way when a truer one resets it."""
        if self._clock_read is None:
            return self.now_ms
        server_ms, at = self._clock_read
        return max(server_ms + int((_now() - at) * 1000), self.now_ms, self._given_ms)

    def _received(self, fetched: Fetched, read_at: float | None, run: Run | None = None) -> Fetched:
        self.now_ms = fetched.now_ms
        if read_at is not None and fetched.read_ms:
            # Read between the call's send and its reply: the time reckoned from it is
            # the server's within that round trip (and never steps back: see _call).
            self._clock_read = (fetched.read_ms, read_at)
        if run is not None and run.first > 1 and fetched.position > 0:
            fetched = dataclasses.replace(fetched, position=fetched.position + run.first - 1)
        return fetched

    def _plan_moves(self, mode: str, wait: int, finished: Outcome | None) -> None:
        """When a take next moves delayed tasks, given the ``wait`` the fetch replied
        (-1 when no delayed task is left, 0 if more are due)."""
        now = self.now_ms
        if mode == "take+move":
            self._move_at = now + (MOVE_EVERY_MS if wait < 0 else min(wait, MOVE_EVERY_MS))
        elif wait >= 0:  # a take set a task over its rate aside until then
            self._move_at = min(self._move_at, now + wait)
        if finished is not None and finished.kind in ("retry", "defer"):
            self._move_at = min(self._move_at, now + finished.delay_ms)

    def beat(
        self, lease_ms: int, info: str, *, lead: bool = False, running_ids: Sequence[str] = ()
    ) -> Heartbeat:
        """Renew (or make) its lease for ``lease_ms`` (:meth:`TaskStore.heartbeat`)."""
        return self.store.heartbeat(
            self.worker_id, lease_ms, info, self.queues, lead=lead, running_ids=running_ids
        )

    def put_back(self, *, max_crashes: int = 0) -> tuple[int, int] | None:
        """Put the tasks it holds back on their queues (counting a crash against each
        with ``max_crashes``) and deregister it: ``(requeued, dead-lettered)``."""
        return self.store.recover_worker(
            self.worker_id, self.queues, only_if_expired=False, max_crashes=max_crashes
        )
