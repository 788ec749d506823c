"""Many tasks held ahead (TASK_TAKE_AHEAD): pipelined takes, each its own script call and
attempt fence, proven with real processes against what holds for one task held ahead.

A worker holds more than one task ahead only while it waits on replies (Redis across a
network). Here every reply counts as waited for (``conveyor.WAITED``), so a worker on
the test's local server holds the most; the forked workers also keep their batch for up
to 5 s behind a running task (``worker.AHEAD_FOR``, 20 ms otherwise), so that a test
acts while a batch is held, not by chance.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from django.test import override_settings

from conftest import single_server_only
from redis_components import cancel, chain, get_result, group, scripts
from redis_components.connection import OneConnection
from redis_components.exceptions import TaskNotCancellable
from redis_components.tasks import conveyor
from redis_components.tasks import worker as worker_module
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.lease import description
from redis_components.tasks.messages import task_id_of
from redis_components.tasks.status import queue_stats, workers
from redis_components.tasks.store import TaskStore, WorkerStore
from redis_components.tasks.store.layout import ready_key, split_homes, tasks_client
from redis_components.tasks.worker import Worker
from tests.commands import commands_per_task
from tests.processes import FORK, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")

WORKER = "batch-w"
HELD = 8  # TASK_TAKE_AHEAD's default


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def ready_ids(r: redis.Redis) -> set[str]:
    return {task_id_of(payload) for payload in r.zrange(ready_key("test"), 0, -1)}


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reply counts as waited for: a worker holds as many tasks ahead as it may."""
    monkeypatch.setattr(conveyor, "WAITED", -1.0)


def _batch_worker() -> None:
    """A forked worker that holds the most ahead, and keeps its batch behind a task of
    up to 5 s; SIGTERM stops it as rc_worker's does."""
    conveyor.WAITED = -1.0
    worker_module.AHEAD_FOR = 5.0
    worker = Worker(["test"], worker_id=WORKER)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()
    os._exit(0 if worker.failure is None else 1)


@dataclasses.dataclass
class Batch:
    child: Any  # the forked worker (multiprocessing's Process)
    before: list[str]  # the quick tasks before "block"
    block: str
    after: list[str]  # the quick tasks after it


@pytest.fixture
def batch(r: redis.Redis) -> Iterator[Batch]:
    """Six quick tasks (the worker's batch grows), "block" (2 s), then 12 quick ones:
    while "block" runs, the worker holds a batch of those 12. Yielded once "block" runs."""
    before = [tasks.record.enqueue(f"q{i}").id for i in range(6)]
    block = tasks.record.enqueue("block", 2.0).id
    after = [tasks.record.enqueue(f"c{i}").id for i in range(12)]
    child = FORK.Process(target=_batch_worker)
    child.start()
    try:
        wait_until(lambda: "block" in runs(r))
        yield Batch(child, before, block, after)
    finally:
        child.kill()
        child.join()


def held(r: redis.Redis, after: list[str]) -> list[str]:
    """The tasks of ``after`` the worker holds ahead (none of them has run yet)."""
    waiting = ready_ids(r)
    return [task_id for task_id in after if task_id not in waiting]


def test_a_worker_killed_holding_a_batch_charges_only_the_task_it_ran(
    r: redis.Redis, batch: Batch
) -> None:
    before, block, after = batch.before, batch.block, batch.after
    holding = held(r, after)
    assert 2 <= len(holding) <= HELD
    batch.child.kill()
    batch.child.join()
    put_back = TaskStore().recover_worker(WORKER, ["test"], only_if_expired=False, max_crashes=3)
    assert put_back == (1 + len(holding), 0)
    # Only "block" had started: the tasks held ahead go back with no crash counted, in
    # their order, and run once.
    assert len(get_result(block).errors) == 1
    assert [task_id for task_id in after if get_result(task_id).errors] == []
    order = [task_id_of(p) for p in r.zrange(ready_key("test"), 0, -1)]
    assert order == [block, *after]
    Worker(["test"], burst=True).run()
    assert runs(r) == {
        **{f"q{i}": 1 for i in range(6)},
        "block": 2,
        **{f"c{i}": 1 for i in range(12)},
    }
    assert all(get_result(i).status is TaskResultStatus.SUCCESSFUL for i in before + after)


def test_sigterm_gives_a_held_batch_back_at_once(r: redis.Redis, batch: Batch) -> None:
    block, after = batch.block, batch.after
    assert len(held(r, after)) >= 2
    os.kill(batch.child.pid, signal.SIGTERM)
    # Back on the queue while "block" (2 s) still runs, its worker waiting for it.
    wait_until(lambda: ready_ids(r) == set(after), timeout=1.5)
    assert get_result(block).status is TaskResultStatus.RUNNING
    batch.child.join(10)
    assert batch.child.exitcode == 0
    assert get_result(block).status is TaskResultStatus.SUCCESSFUL
    assert workers() == []
    assert queue_stats(["test"])[0].in_progress == 0
    assert "block" in runs(r)
    assert not any(label.startswith("c") for label in runs(r))
    assert [task_id for task_id in after if get_result(task_id).errors] == []


def test_a_task_held_ahead_is_cancelled_as_a_running_one(r: redis.Redis, batch: Batch) -> None:
    """A task held ahead counts as running for cancel (docs/tasks.md): refused without
    ``terminate``; with it, its worker is asked to stop it. Either way it runs at most
    once, and the worker holds nothing once its queue is empty."""
    target = held(r, batch.after)[-1]
    with pytest.raises(TaskNotCancellable):
        cancel(target)
    assert cancel(target, terminate=True) == "terminating"
    wait_until(lambda: sum(runs(r).values()) >= 6 + 1 + 11)
    wait_until(lambda: queue_stats(["test"])[0].in_progress == 0)
    assert all(count == 1 for count in runs(r).values())
    # Ended: it ran, or was stopped (Django's FAILED, with TaskCancelled).
    assert get_result(target).status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


@pytest.mark.usefixtures("eager")
def test_a_batch_that_mixes_limited_and_unlimited_tasks_keeps_every_limit(r: redis.Redis) -> None:
    """Six threads, each holding tasks ahead: tasks of one account (at most 2 at once)
    among unlimited ones. A task held ahead holds its permit, so the limit holds for
    the tasks taken too, not only those started."""
    for i in range(60):
        tasks.per_account.enqueue("A", f"a{i}")
        tasks.record.enqueue(f"u{i}", 0.002)
    worker = Worker(["test"], burst=True, threads=6)
    assert worker.run() == 120
    assert worker._conveyor.deepest > 1  # (it did hold a batch)
    assert runs(r) == {**{f"a{i}": 1 for i in range(60)}, **{f"u{i}": 1 for i in range(60)}}
    assert 1 <= int(r.hget("{test}:most", "A") or 0) <= 2


@single_server_only
@pytest.mark.parametrize("most", [1, HELD])
def test_a_task_costs_one_script_call_held_alone_or_in_a_batch(r: redis.Redis, most: int) -> None:
    """Each take is one script call, whatever the batch: one task held ahead costs the
    server 10 commands per task (test_task_worker.py); in a batch of 8, each call also
    reads the server's clock (a TIME), since other calls are under way when it is sent."""

    def enqueue(count: int) -> None:
        for i in range(count):
            tasks.add.enqueue(i, 1)

    deepest: list[int] = []

    def work() -> int:
        worker = Worker(["test"], burst=True)
        done = worker.run()
        deepest.append(worker._conveyor.deepest)
        return done

    assert commands_per_task(r, enqueue, work, held_ahead=most) == (10 if most == 1 else 11)
    assert max(deepest) == most


@pytest.mark.usefixtures("eager")
def test_no_task_is_taken_ahead_with_take_ahead_0(r: redis.Redis) -> None:
    for i in range(20):
        tasks.record.enqueue(f"t{i}")
    with override_settings(REDIS_COMPONENTS={"TASK_TAKE_AHEAD": 0}):
        worker = Worker(["test"], burst=True)
        assert worker.run() == 20
    assert worker._conveyor.deepest == 0
    assert runs(r) == {f"t{i}": 1 for i in range(20)}


@pytest.mark.usefixtures("eager")
def test_a_worker_holds_no_more_ahead_than_its_max_tasks_leaves_room_for(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(30):
        tasks.record.enqueue(f"t{i}")
    taken: list[int] = []
    hold = conveyor.Conveyor.hand_out

    def hand_out(self: conveyor.Conveyor) -> object:
        found = hold(self)
        taken.append(worker.processed + self.held + (found is not None))
        return found

    monkeypatch.setattr(conveyor.Conveyor, "hand_out", hand_out)
    worker = Worker(["test"], max_tasks=10)
    assert worker.run() == 10
    assert worker._conveyor.deepest > 1
    assert max(taken) <= 10  # ran, held, and the one handed out
    assert runs(r) == {f"t{i}": 1 for i in range(10)}
    assert len(ready_ids(r)) == 20
    assert queue_stats(["test"])[0].in_progress == 0


@single_server_only
def test_a_script_the_server_forgot_under_pipelined_calls_is_a_lost_connection(
    r: redis.Redis, worker_belt: tuple[conveyor.Conveyor, WorkerStore]
) -> None:
    """A call whose reply says the server forgot the script had not run; run again, its
    reply would be read as a later call's. With later calls under way, the connection is
    closed as lost instead (the worker then puts back what those calls may have taken)."""
    for i in range(3):
        tasks.add.enqueue(i, 1)
    _, store = worker_belt
    assert store.take().payload is not None  # (the script is loaded)
    r.script_flush()
    first = store.take_ahead(None)
    store.take_ahead(None)  # (a later call: its reply goes with the connection)
    with pytest.raises(redis.exceptions.ConnectionError, match="forgot a script"):
        store.receive(first, last=False)
    assert queue_stats(["test"])[0].in_progress == 1  # neither call ran
    # The next call connects again and loads the script.
    assert store.receive(store.take_ahead(None)).payload is not None
    assert queue_stats(["test"])[0].in_progress == 2


@pytest.mark.usefixtures("eager")
@pytest.mark.parametrize("fail", [False, True], ids=["succeed", "fail"])
def test_workflow_steps_whose_outcomes_are_carried_elsewhere_run_held_ahead(
    r: redis.Redis, fail: bool
) -> None:
    """Queues with homes of their own: a step's outcome is carried to its workflow's
    home by whoever reads the reply that recorded it, on the loop's connection, so no
    later call may be under way then. 40 quick steps held ahead, then the fan-in."""
    with split_homes():
        member = tasks.fail_now if fail else tasks.member
        workflow = chain(
            group([member.si(f"m{i}") for i in range(40)]), tasks.member.si("after")
        ).enqueue()
        worker = Worker(["test"], burst=True)
        worker.run()
        assert worker._conveyor.deepest > 1
        assert workflow.wait(10) == ("FAILED" if fail else "SUCCESSFUL")
    assert {label: count for label, count in runs(r).items() if count != 1} == {}
    assert ("after" in runs(r)) is not fail


@pytest.fixture
def worker_belt(r: redis.Redis) -> Iterator[tuple[conveyor.Conveyor, WorkerStore]]:
    """A registered worker's conveyor and store, on a connection held in each home as
    its loop's (closed after the test)."""
    WorkerStore(WORKER, ["test"]).beat(60_000, description(["test"]))
    held: dict[str, OneConnection] = {}
    store = WorkerStore(
        WORKER,
        ["test"],
        move_delayed=False,
        client=lambda head: held.setdefault(head, OneConnection(tasks_client(head))),
    )
    yield conveyor.Conveyor(store, cast(Any, None), 60.0), store
    for connection in held.values():
        connection.close()


def test_a_task_held_ahead_recovered_under_way_is_not_handed_out(
    r: redis.Redis, worker_belt: tuple[conveyor.Conveyor, WorkerStore]
) -> None:
    """A take's reply that finds its worker taken for dead (no lease): the tasks held
    ahead before it went back with the others, and are dropped, not started. (One
    handed out before that reply is read starts all the same, as a single task held
    ahead would: its start and outcome are fenced, and the heartbeat that finds the
    worker taken for dead gives back what it holds.)"""
    for i in range(6):
        tasks.add.enqueue(i, 1)
    belt, _ = worker_belt
    assert belt.fetch(take=True).payload is not None
    belt.depth = 3
    belt.start(None, ahead=True)  # three takes under way
    belt.receive()
    assert belt.held == 3
    recovered = TaskStore().recover_worker(WORKER, ["test"], only_if_expired=False, max_crashes=3)
    assert recovered == (4, 0)
    belt.depth = 4
    belt.start(None, ahead=True)  # one more: no lease
    belt.receive()
    assert belt.held == 0
    assert belt.hand_out() is None
    assert queue_stats(["test"])[0].in_progress == 0


def test_a_task_handed_out_whose_start_was_not_sent_is_held_again(
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    worker_belt: tuple[conveyor.Conveyor, WorkerStore],
) -> None:
    """Redis lost before the start of a task handed out was sent: it is held ahead
    again, first, so that it runs once Redis is back (not left held by no one)."""
    for i in range(4):
        tasks.add.enqueue(i, 1)
    belt, store = worker_belt
    assert belt.fetch(take=True).payload is not None
    belt.depth = 2
    belt.start(None, ahead=True)
    handed = belt.hand_out()
    assert handed is not None

    def lost(*args: object, **kwargs: object) -> None:
        raise redis.exceptions.ConnectionError("lost on purpose")

    monkeypatch.setattr(store, "take_ahead", lost)
    with pytest.raises(redis.exceptions.ConnectionError):
        belt.start(handed, ahead=True)
    monkeypatch.undo()
    assert belt.hand_out() is handed


def test_a_call_sent_behind_others_is_never_given_a_time_before_theirs(
    r: redis.Redis, worker_belt: tuple[conveyor.Conveyor, WorkerStore]
) -> None:
    """A reading of the server's clock whose reply came late makes the time reckoned
    from it run ahead, and the calls sent meanwhile carry that time as their floor. A
    truer reading, read back while one of them is still under way, must not give the
    next call a time before that one's: the starts would step back."""
    _, store = worker_belt
    for i in range(3):
        tasks.record.enqueue(f"t{i}")
    r.script_load(scripts.load("queue_fetch").source)  # (calls under way cannot load it)
    seconds, micros = r.time()
    store._clock_read = (seconds * 1000 + micros // 1000 + 50, time.monotonic())  # 50 ms ahead
    first = store.take_ahead(None, read_clock=True)
    time.sleep(0.005)
    second = store.take_ahead(None, read_clock=True)
    times = [store.receive(first, last=False).now_ms]  # its reading is the server's own
    third = store.take_ahead(None, read_clock=True)
    times += [store.receive(second, last=False).now_ms, store.receive(third).now_ms]
    assert times == sorted(times)
