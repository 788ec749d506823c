"""``enqueue_many``: many tasks in one script call per home and 1,000 tasks, prepared
first (a bad one writes nothing), each call all or nothing under a queue's limit, and
their results as ``enqueue`` gives them."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from conftest import CommandCount
from redis_components import enqueue_many, get_result, signature
from redis_components.exceptions import InvalidInput, InvalidTaskArguments, QueueFull
from redis_components.tasks.framework import TaskResultStatus, task_enqueued
from redis_components.tasks.status import queue_stats, workers
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import split_homes
from redis_components.testing import drain
from tests.commands import tasks_added
from tests.processes import WorkerProcess, wait_until
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def with_settings(**changes: Any) -> Any:
    return override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, **changes})


def ready() -> int:
    [stats] = queue_stats(["test"])
    return stats.ready + stats.delayed


def test_many_tasks_in_one_script_call_and_their_results(count_commands: CommandCount) -> None:
    calls = [(n, n) for n in range(500)]
    tasks.add.enqueue_many(calls[:1])  # (loads the script)
    signalled: list[str] = []

    def received(sender: object, task_result: Any, **kwargs: object) -> None:
        signalled.append(task_result.id)

    task_enqueued.connect(received)
    try:
        with count_commands as counted:
            results = tasks.add.enqueue_many(calls)
    finally:
        task_enqueued.disconnect(received)
    assert [command.split()[0] for command in counted.commands] == ["EVALSHA"]
    assert signalled == [result.id for result in results]
    assert len({result.id for result in results}) == 500
    assert all(result.status == TaskResultStatus.READY for result in results)
    assert all(result.enqueued_at is not None for result in results)
    assert drain(["test"]) == 501
    assert [get_result(result.id).return_value for result in results] == [2 * n for n in range(500)]


def test_a_batch_wakes_an_idle_worker(start_worker: Callable[..., WorkerProcess]) -> None:
    """Its queue was empty: the batch wakes the worker waiting on it (its heartbeat, due
    in 10 minutes, would be the only other reason to look)."""
    worker = start_worker("test", TASK_HEARTBEAT_INTERVAL=600)
    wait_until(workers, worker.output)
    time.sleep(0.5)  # (idle: it has found the queue empty)
    results = tasks.add.enqueue_many([(1, 1), (2, 2)])
    wait_until(lambda: all(get_result(r.id).is_finished for r in results), worker.output)


def test_any_tasks_of_our_backends_in_the_order_given() -> None:
    results = enqueue_many(
        [tasks.add.s(1, 2), signature(framework_tasks.multiply, 3, b=4), tasks.add.si(5, b=6)]
    )
    drain(["test"])
    assert [get_result(result.id).return_value for result in results] == [3, 12, 11]
    assert enqueue_many([]) == []


def test_a_bad_call_enqueues_nothing(r: redis.Redis) -> None:
    with pytest.raises(InvalidTaskArguments):
        tasks.add.enqueue_many([(1, 2), (3,)])
    with pytest.raises(InvalidInput, match=r"^calls: each must be"):
        tasks.add.enqueue_many([(1, 2), 3])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"^calls: each must be"):
        enqueue_many([tasks.add.s(1, 2), (3, 4)])  # type: ignore[list-item]
    assert ready() == 0


def test_a_call_past_a_queues_limit_adds_none_of_its_tasks() -> None:
    with with_settings(TASK_QUEUE_LIMITS={"test": 3}):
        tasks.add.enqueue(0, 0)
        with pytest.raises(QueueFull, match="nothing was enqueued") as full:
            tasks.add.enqueue_many([(1, 1), (2, 2), (3, 3)])
        assert full.value.enqueued == 0
        assert ready() == 1
        assert len(tasks.add.enqueue_many([(1, 1), (2, 2)])) == 2
        assert ready() == 3


def test_a_large_batch_takes_a_call_per_thousand(count_commands: CommandCount) -> None:
    """2,500 tasks: three calls. Under a limit the third would pass, the first two's stay
    enqueued and the error says so."""
    tasks.add.enqueue_many([(0, 0)])
    with count_commands as counted:
        assert len(tasks.add.enqueue_many([(n, 1) for n in range(2500)])) == 2500
    assert [command.split()[0] for command in counted.commands] == ["EVALSHA"] * 3
    TaskStore().purge("test")
    with with_settings(TASK_QUEUE_LIMITS={"test": 2400}), pytest.raises(QueueFull) as full:
        tasks.add.enqueue_many([(n, 1) for n in range(2500)])
    assert full.value.enqueued == 2000
    assert "2000 tasks of the batch were enqueued before it" in str(full.value)
    assert ready() == 2000
    kept = {result.id for result in full.value.results}
    assert len(kept) == 2000
    assert all(get_result(task_id).status == TaskResultStatus.READY for task_id in kept)


def test_a_unique_tasks_duplicates_give_the_first_ones_result() -> None:
    first, again, other = tasks.unique_record.enqueue_many([("a",), ("a",), ("b",)])
    assert again.id == first.id != other.id
    assert drain(["test"]) == 2


def test_a_delayed_tasks_calls_are_all_delayed() -> None:
    later = timezone.now() + datetime.timedelta(hours=1)
    results = tasks.record.using(run_after=later).enqueue_many([("x",), ("y",)])
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.delayed) == (0, 2)
    for result in results:  # (as the server keeps it, to the ms)
        kept = get_result(result.id).task.run_after
        assert kept is not None
        assert abs((kept - later).total_seconds()) < 0.002


def test_higher_priorities_run_first(r: redis.Redis) -> None:
    """The script ranks each task by the priority its payload starts with."""
    enqueue_many(
        [
            tasks.record.s("low"),
            tasks.record.using(priority=9).s("high"),
            tasks.record.using(priority=-3).s("lowest"),
        ]
    )
    drain(["test"])
    assert r.lrange("{test}:order", 0, -1) == [b"high", b"low", b"lowest"]


def test_a_duplicate_does_not_count_against_a_limit() -> None:
    """As one enqueue at a time would: an equal task enqueued before, or earlier in the
    batch, is a duplicate, not a task that the queue's limit refuses."""
    with with_settings(TASK_QUEUE_LIMITS={"test": 2}):
        first = tasks.unique_record.enqueue("a")
        tasks.add.enqueue(0, 0)  # the queue is full
        [again] = tasks.unique_record.enqueue_many([("a",)])
        assert again.id == first.id
        TaskStore().purge("test")
        one, twin = tasks.unique_record.enqueue_many([("b",), ("b",)])
        assert twin.id == one.id
        added, other = tasks.unique_record.enqueue_many([("c",), ("b",)])
        assert other.id == one.id != added.id
        assert ready() == 2


def test_the_metrics_count_each_task_added(r: redis.Redis) -> None:
    with with_settings(METRICS=True):
        tasks.add.enqueue_many([(n, n) for n in range(7)])
    assert tasks_added("test") == 7


def test_tasks_of_several_homes_are_written_in_each() -> None:
    """On a cluster's layout each queue has a home: a call per home, results in order."""
    with split_homes():
        elsewhere = tasks.add.using(queue_name="reports")
        results = enqueue_many(
            [tasks.add.s(1, 1), tasks.add.s(2, 2), elsewhere.s(3, 0), tasks.add.s(4, 4)]
        )
        drain(["test", "reports"])
        assert [get_result(result.id).return_value for result in results] == [2, 4, 3, 8]
