"""redis_components.testing: the helpers a project's own tests use."""

from __future__ import annotations

import pytest
import redis

from redis_components import chain, get_result, periodic, redis_task
from redis_components.exceptions import InvalidInput, TaskNotRegistered
from redis_components.tasks.definition import get_task, registered_tasks
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.schedules import schedules
from redis_components.tasks.status import queue_stats, running_tasks, workers
from redis_components.testing import ScriptedWorker, crashed_worker, drain, no_registered_tasks
from tests.testapp import tasks


def test_a_scripted_worker_ends_each_task_as_it_is_told(r: redis.Redis) -> None:
    done, failed, retried = (tasks.record.enqueue(label) for label in ("a", "b", "c"))
    worker = ScriptedWorker(["test"])
    assert [w.id for w in workers()] == [worker.id]
    taken = [worker.take() for _ in range(3)]
    assert [m.id for m in taken if m] == [done.id, failed.id, retried.id] == worker.held
    assert worker.succeed(done.id, {"sum": 3})
    assert worker.fail(failed.id, ValueError("bad"))
    assert worker.retry(retried.id)
    assert worker.held == []
    assert get_result(done.id).return_value == {"sum": 3}
    errors = get_result(failed.id).errors
    assert get_result(failed.id).status == TaskResultStatus.FAILED
    assert errors[-1].exception_class_path == "builtins.ValueError"
    [stats] = queue_stats(["test"])
    assert (stats.ready + stats.delayed, stats.dead, stats.in_progress) == (1, 1, 0)
    again = worker.take()
    assert again is not None
    assert (again.id, again.retries) == (retried.id, 1)
    assert worker.take() is None
    worker.stop()
    assert workers() == []
    assert get_result(retried.id).status == TaskResultStatus.READY  # put back, not lost


def test_a_scripted_worker_crashes_and_sees_a_task_delivered_twice(r: redis.Redis) -> None:
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    worker = ScriptedWorker(["test"])
    first = worker.take()
    assert first is not None
    assert worker.crash(max_crashes=1) == (0, 1)  # its first crash dead-letters it
    assert workflow.wait(5) == "FAILED"

    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    first = worker.take()
    assert first is not None
    worker.deliver_again(first)
    assert worker.succeed(first.id, "a")
    copy = worker.take()
    assert copy is not None
    assert (copy.id, copy.crashes) == (first.id, 1)
    assert worker.succeed(copy.id, "a")  # recorded: the second run changes nothing
    step = worker.take()
    assert step is not None
    assert step.args == ["a", "b"]
    assert worker.take() is None  # the next step was released once
    assert worker.succeed(step.id, "a>b")
    assert workflow.wait(5) == "SUCCESSFUL"
    assert workflow.results() == "a>b"


def test_a_crashed_worker_holds_what_it_took_highest_priority_first(r: redis.Redis) -> None:
    first = tasks.record.enqueue("first")
    second = tasks.record.enqueue("second")
    with no_registered_tasks():
        urgent = redis_task(queue="test", priority=10, name="tests.urgent")(tasks.record.func)
        pressing = urgent.enqueue("urgent")
    crashed = crashed_worker(["test"], take=2, worker_id="ghost.3.3.abc")
    assert crashed.id == "ghost.3.3.abc"
    assert crashed.task_ids == [pressing.id, first.id]
    assert sorted(t.task_id for t in running_tasks()) == sorted(crashed.task_ids)
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.in_progress) == (1, 2)
    assert [w.id for w in workers()] == [crashed.id]
    assert second.id not in crashed.task_ids


def test_a_crashed_worker_takes_what_there_is(r: redis.Redis) -> None:
    only = tasks.record.enqueue("only")
    assert crashed_worker(["test"], take=3).task_ids == [only.id]
    idle = crashed_worker(["test", "other"], take=0)
    assert idle.task_ids == []
    assert {w.id for w in workers()} >= {idle.id}


@pytest.mark.parametrize("take", [-1, True, 1.5, "2"])
def test_a_crashed_worker_refuses_a_bad_take(r: redis.Redis, take: object) -> None:
    tasks.record.enqueue("left alone")
    with pytest.raises(InvalidInput, match="take"):
        crashed_worker(["test"], take=take)  # type: ignore[arg-type]
    assert workers() == []
    assert queue_stats(["test"])[0].ready == 1


def test_no_registered_tasks_empties_both_registries_for_a_while() -> None:
    before = registered_tasks()
    assert "tests.testapp.tasks.record" in before
    with no_registered_tasks():
        assert registered_tasks() == {}
        with pytest.raises(TaskNotRegistered):
            get_task("tests.testapp.tasks.record")

        @periodic(every=60)
        @redis_task(name="made.in.the.block")
        def made() -> None: ...

        assert list(registered_tasks()) == ["made.in.the.block"]
        assert [s.task for s in schedules()] == ["made.in.the.block"]
    assert registered_tasks() == before
    assert "made.in.the.block" not in {s.task for s in schedules()}


@pytest.mark.usefixtures("worker_may_check_db_connections")
def test_drain_runs_what_is_queued_and_what_its_runs_queue(r: redis.Redis) -> None:
    done = tasks.record.enqueue("now")
    retried = tasks.retry_once.enqueue("again")  # runs again 10 ms after its first run
    later = tasks.record.enqueue_in(3600, "later")  # due past the wait: left queued
    assert drain(["test"]) == 3
    assert get_result(done.id).status == TaskResultStatus.SUCCESSFUL
    assert get_result(retried.id).status == TaskResultStatus.SUCCESSFUL
    assert get_result(later.id).status == TaskResultStatus.READY
    assert queue_stats(["test"])[0].delayed == 1


@pytest.mark.usefixtures("worker_may_check_db_connections")
def test_drain_raises_the_first_task_failure_or_leaves_it_dead_lettered() -> None:
    tasks.fail.enqueue("f")  # max_retries=2: three runs, then a dead letter
    with pytest.raises(ValueError, match="f failed on purpose"):
        drain(["test"])
    assert queue_stats(["test"])[0].dead == 1
    tasks.fail.enqueue("g")
    assert drain(["test"], fail_fast=False) == 3
    assert queue_stats(["test"])[0].dead == 2


@pytest.mark.usefixtures("worker_may_check_db_connections")
def test_drain_serves_every_queue_a_known_task_uses_by_default() -> None:
    first, second = tasks.record.enqueue("a"), tasks.add.using(queue_name="email").enqueue(1, 2)
    assert drain() == 2
    assert get_result(second.id).return_value == 3
    assert get_result(first.id).status == TaskResultStatus.SUCCESSFUL
