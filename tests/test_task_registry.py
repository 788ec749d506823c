"""``@redis_task``, enqueueing through it, and the helpers a running task uses."""

from __future__ import annotations

import datetime
import math

import pytest
import redis
from django.db import transaction
from django.test import override_settings

from redis_components import Busy, QueueFull, Retry, defer, redis_task
from redis_components.exceptions import (
    InvalidInput,
    LockNotAcquired,
    LockNotOwned,
    TaskError,
    TaskNotRegistered,
    TaskSerializationError,
)
from redis_components.keys import MAX_SECONDS
from redis_components.tasks.definition import get_task
from redis_components.tasks.framework import TaskResult, TaskResultStatus
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.registry import backoff, running, stop_running
from redis_components.tasks.status import queue_stats, waiting_tasks
from redis_components.testing import no_registered_tasks
from tests.testapp import tasks


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_enqueue_puts_a_json_task_on_its_queue_and_returns_its_result(r: redis.Redis) -> None:
    before = server_ms(r)
    result = tasks.record.enqueue("one", pause=0)
    total, [waiting] = waiting_tasks("test", "ready")
    assert total == 1
    assert result.enqueued_at is not None
    # The enqueue script adds its time to the payload (for the worker).
    enqueued_ms = round(result.enqueued_at.timestamp() * 1000)
    assert waiting.message == TaskMessage(
        id=result.id,
        task="tests.testapp.tasks.record",
        queue="test",
        args=["one"],
        kwargs={"pause": 0},
        enqueued_at=enqueued_ms,
    )
    assert isinstance(result, TaskResult)
    assert (result.status, result.task.name, result.args, result.kwargs) == (
        TaskResultStatus.READY,
        "tests.testapp.tasks.record",
        ["one"],
        {"pause": 0},
    )
    assert result.enqueued_at is not None
    assert before <= result.enqueued_at.timestamp() * 1000 <= server_ms(r)
    result.refresh()
    assert result.status is TaskResultStatus.READY


def test_call_runs_inline(r: redis.Redis) -> None:
    tasks.record.call("inline")
    assert r.hgetall("{test}:runs") == {b"inline": b"1"}
    assert queue_stats(["test"])[0].ready == 0


@pytest.mark.parametrize("bad", [object(), {1, 2}, math.nan, b"\xff not utf-8", "lone \udc80"])
def test_arguments_json_cannot_carry_are_refused_in_the_caller(r: redis.Redis, bad: object) -> None:
    with pytest.raises(TaskSerializationError, match=r"tests\.testapp\.tasks\.record"):
        tasks.record.enqueue(bad)  # type: ignore[arg-type]
    with pytest.raises(TaskSerializationError):
        tasks.record.enqueue_in(5, "label", pause=bad)  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_arguments_nested_thousands_deep_are_refused_in_the_caller(r: redis.Redis) -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(TaskSerializationError, match="nested too deeply"):
        tasks.record.enqueue(deep)  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_enqueue_in_scores_by_the_servers_clock(r: redis.Redis) -> None:
    before = server_ms(r)
    result = tasks.record.enqueue_in(30, "later")
    after = server_ms(r)
    total, [delayed] = waiting_tasks("test", "delayed")
    assert total == 1
    assert delayed.task_id == result.id
    assert delayed.due_ms is not None
    assert before + 30_000 <= delayed.due_ms <= after + 30_000
    assert result.task.run_after is not None
    assert result.task.run_after.timestamp() * 1000 == delayed.due_ms
    assert queue_stats(["test"])[0].ready == 0


def test_enqueue_at_takes_an_aware_datetime(r: redis.Redis) -> None:
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
    assert tasks.record.enqueue_at(when, "then").task.run_after == when
    total, [delayed] = waiting_tasks("test", "delayed")
    assert total == 1
    assert delayed.due_ms == when.timestamp() * 1000
    with pytest.raises(InvalidInput, match="aware"):
        tasks.record.enqueue_at(datetime.datetime(2030, 1, 1), "naive")
    with pytest.raises(InvalidInput, match="when"):
        tasks.record.enqueue_at("2030-01-01", "text")  # type: ignore[arg-type]
    assert queue_stats(["test"])[0].delayed == 1


def test_enqueue_at_past_ten_years_is_refused_before_anything_is_written(r: redis.Redis) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    for when in (
        datetime.datetime.max.replace(tzinfo=datetime.timezone.utc),
        now + datetime.timedelta(seconds=MAX_SECONDS + 3600),
    ):
        with pytest.raises(InvalidInput, match=r"when.*ten years"):
            tasks.record.enqueue_at(when, "never")
    assert r.keys("*") == []
    within = now + datetime.timedelta(seconds=MAX_SECONDS - 3600)
    assert tasks.record.enqueue_at(within, "in time").task.run_after is not None


def test_a_unique_task_with_dict_keys_of_mixed_types_is_refused_clearly(r: redis.Redis) -> None:
    with pytest.raises(TaskSerializationError, match=r"keys.*mixed types"):
        tasks.unique_record.enqueue({1: "one", "two": 2})  # type: ignore[arg-type]
    assert r.keys("*") == []


@pytest.mark.parametrize("seconds", [-1, math.inf, math.nan, "5", True])
def test_enqueue_in_refuses_bad_delays(r: redis.Redis, seconds: object) -> None:
    with pytest.raises(InvalidInput, match="seconds"):
        tasks.record.enqueue_in(seconds, "x")  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_bad_task_definitions_are_refused() -> None:
    with pytest.raises(InvalidInput, match="queue"):
        redis_task(queue="")(lambda: None)
    with pytest.raises(InvalidInput, match="max_retries"):
        redis_task(max_retries=-1)(lambda: None)
    with pytest.raises(InvalidInput, match="retry_backoff"):
        redis_task(retry_backoff=-0.5)(lambda: None)
    with pytest.raises(InvalidInput, match="name"):
        redis_task(name="bad\nname")(lambda: None)
    with pytest.raises(InvalidInput, match="priority"):
        redis_task(priority=101)(lambda: None)


def test_two_functions_cannot_share_a_task_name() -> None:
    def record(label: str) -> None: ...

    with pytest.raises(TaskError, match=r"two tasks are named 'tests\.testapp\.tasks\.record'"):
        redis_task(name="tests.testapp.tasks.record")(record)
    assert get_task("tests.testapp.tasks.record") is tasks.record


def test_bare_decorator_names_the_task_after_its_function() -> None:
    @redis_task
    def bare() -> str:
        return "ran"

    assert (
        bare.name
        == "tests.test_task_registry.test_bare_decorator_names_the_task_after_its_function."
        "<locals>.bare"
    )
    assert (bare.queue_name, bare.priority, bare.backend) == ("default", 0, "redis_components")
    assert bare.call() == "ran"


def test_a_task_registered_after_start_up_outside_a_tasks_module_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def late() -> None: ...

    with no_registered_tasks(), caplog.at_level("WARNING", "redis_components.tasks"):
        redis_task(name="late")(late)
        late.__module__ = "shop.tasks"  # as if declared in an app's tasks module
        redis_task(name="in_time")(late)
    assert [record.getMessage() for record in caplog.records] == [
        "Task 'late' was registered after start-up, when its module tests.test_task_registry "
        "was imported: workers import each installed app's tasks module at start-up, so they "
        "will not know this task unless that module is imported from there"
    ]


def test_unknown_task_names_raise() -> None:
    with pytest.raises(TaskNotRegistered, match="nope"):
        get_task("nope")


def test_bounded_queue_raises_queue_full_and_changes_nothing(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": {"test": 2}}):
        tasks.record.enqueue("a")
        tasks.record.enqueue_in(60, "b")  # delayed tasks count too
        before = sorted(r.keys("*"))
        with pytest.raises(QueueFull) as caught:
            tasks.record.enqueue("c")
        with pytest.raises(QueueFull):
            tasks.record.enqueue_in(1, "d")
        assert sorted(r.keys("*")) == before  # no task, no result
    assert (caught.value.queue, caught.value.limit) == ("test", 2)
    assert "full" in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_waits_for_the_commit(r: redis.Redis) -> None:
    with transaction.atomic():
        result = tasks.record.enqueue_on_commit("committed")
        assert queue_stats(["test"])[0].ready == 0
        assert result.status is TaskResultStatus.READY
    total, [waiting] = waiting_tasks("test", "ready")
    assert total == 1
    assert waiting.task_id == result.id
    result.refresh()
    assert result.enqueued_at is not None


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_enqueues_nothing_on_rollback(r: redis.Redis) -> None:
    def enqueue_then_fail() -> None:
        with transaction.atomic():
            tasks.record.enqueue_on_commit("rolled back")
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    with pytest.raises(TaskSerializationError), transaction.atomic():
        tasks.record.enqueue_on_commit(object())  # type: ignore[arg-type]
    assert r.keys("*") == []


@pytest.mark.django_db(transaction=True)
def test_a_failed_enqueue_on_commit_is_logged_after_the_commit_and_raises_outside(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": {"test": 1}}):
        tasks.record.enqueue("fills the queue")
        with transaction.atomic():
            result = tasks.record.enqueue_on_commit("no room")
        assert f"Task {result.id} (tests.testapp.tasks.record) was not enqueued" in caplog.text
        assert "QueueFull" in caplog.text
        with pytest.raises(QueueFull):
            tasks.record.enqueue_on_commit("no room, no transaction")
    assert queue_stats(["test"])[0].ready == 1


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    with override_settings(
        REDIS_COMPONENTS={"TASK_RETRY_BACKOFF": 1.0, "TASK_RETRY_BACKOFF_MAX": 100.0}
    ):
        delays = [backoff(3) for _ in range(200)]
        assert all(4.0 <= delay <= 12.0 for delay in delays)
        assert len(set(delays)) > 1
        assert all(backoff(30) <= 100.0 for _ in range(50))
        assert 0.5 <= backoff(0, base=1.0) <= 1.5


def test_retry_refuses_a_negative_delay() -> None:
    with pytest.raises(InvalidInput, match="delay"):
        Retry(delay=-1)


def test_defer_outside_a_worker_raises_lock_not_acquired() -> None:
    with pytest.raises(LockNotAcquired, match="item:7 is busy") as caught:
        defer(5)(Busy(("item:7",), 1.0))
    assert caught.value.name == "item:7"
    with pytest.raises(LockNotAcquired, match="item:7, user:1 is busy") as caught:
        defer(5)(Busy(("item:7", "user:1"), 1.0, held="user:1"))
    assert caught.value.name == "user:1"  # the one held, not the first


def test_defer_inside_a_worker_marks_the_running_task() -> None:
    running_task, token = running(TaskMessage(id="id", task="t", queue="q", args=[], kwargs={}))
    try:
        assert defer(5)(Busy(("a",), 1.0)) is None
        assert running_task.deferred_for == 5
        defer()(Busy(("a",), 0.25))
        assert running_task.deferred_for == 0.25
    finally:
        stop_running(token)
    with pytest.raises(InvalidInput):
        defer(-1)


def test_the_names_of_0_1_that_changed_work_with_a_warning(r: redis.Redis) -> None:
    import redis_components

    with pytest.warns(DeprecationWarning, match=r"use \.call"):
        tasks.record("plain call")
    assert r.hgetall("{test}:runs") == {b"plain call": b"1"}
    with pytest.warns(DeprecationWarning, match="queue_name"):
        assert tasks.record.queue == "test"
    with pytest.warns(DeprecationWarning, match="RedisTask"):
        assert redis_components.Task is redis_components.RedisTask
    with pytest.warns(DeprecationWarning, match="TaskResultStatus"):
        assert redis_components.TaskStatus is TaskResultStatus
    with pytest.warns(DeprecationWarning, match="TaskResult"):
        assert redis_components.TaskResult is TaskResult
    with pytest.warns(DeprecationWarning, match="redis_task"):
        assert redis_components.task is redis_components.redis_task
    with pytest.warns(DeprecationWarning, match=r"redis_components\.exceptions"):
        assert redis_components.LockNotOwned is LockNotOwned
    with pytest.raises(AttributeError, match="Nothing"):
        redis_components.Nothing  # noqa: B018
    from tests.testapp import framework_tasks

    with pytest.raises(TypeError, match=r"use multiply\.call"):
        framework_tasks.multiply(1, 2)
