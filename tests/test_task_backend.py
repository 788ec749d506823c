"""Django's Tasks framework on our backend: enqueue, results, workers, checks."""

from __future__ import annotations

import datetime
import decimal
import importlib.util
import json
import random
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import django
import pytest
import redis
from asgiref.sync import async_to_sync
from django.core.checks import run_checks
from django.test import AsyncClient, override_settings
from django.utils import timezone

from conftest import single_server_only
from redis_components import TaskStatus, get_result
from redis_components.keys import MAX_SECONDS
from redis_components.tasks.store import delayed_key, ready_key
from redis_components.tasks.worker import Worker
from tests.processes import WorkerProcess, wait_until
from tests.testapp import tasks

if not (django.VERSION >= (6, 0) or importlib.util.find_spec("django_tasks")):
    pytest.skip(
        "Django's Tasks framework is not installed: Django < 6 without the django-tasks "
        "backport (pip install django-redis-components[tasks-backport])",
        allow_module_level=True,
    )

from tests.testapp import framework_tasks

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

from redis_components.tasks.backend import RedisTaskBackend

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def run_worker() -> int:
    return Worker(["test"], burst=True).run()


def test_every_feature_of_the_framework_is_supported() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, RedisTaskBackend)
    assert backend.supports_defer
    assert backend.supports_priority
    assert backend.supports_get_result
    assert backend.supports_async_task


def test_enqueue_returns_a_ready_result_readable_from_anywhere(r: redis.Redis) -> None:
    result = framework_tasks.multiply.enqueue(6, 7)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([6, 7], {}, "default")
    assert result.enqueued_at is not None
    assert timezone.is_aware(result.enqueued_at)
    again = framework_tasks.multiply.get_result(result.id)
    assert (again.id, again.status, again.enqueued_at) == (
        result.id,
        TaskResultStatus.READY,
        result.enqueued_at,
    )
    assert again.task == framework_tasks.multiply
    # One engine: our own reader sees the same record.
    assert get_result(result.id).task == "tests.testapp.framework_tasks.multiply"


def test_a_worker_runs_it_and_the_result_says_so(r: redis.Redis) -> None:
    result = framework_tasks.multiply.enqueue(6, 7)
    assert run_worker() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.attempts == 1
    assert result.errors == []
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.last_attempted_at == result.started_at


def test_an_async_task_runs_in_the_worker(r: redis.Redis) -> None:
    result = framework_tasks.async_multiply.enqueue(3, 5)
    run_worker()
    assert framework_tasks.async_multiply.get_result(result.id).return_value == 15


def test_an_exception_fails_the_task_once_with_its_traceback(r: redis.Redis) -> None:
    result = framework_tasks.explode.enqueue("boom")
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "boom exploded" in error.traceback
    assert r.hgetall("{test}:runs") == {b"boom": b"1"}  # no retry unless asked for


RETRYING = {
    "BACKEND": "redis_components.tasks.backend.RedisTaskBackend",
    "QUEUES": ["test"],
    "OPTIONS": {"MAX_RETRIES": 2, "RETRY_BACKOFF": 0.01},
}


def test_max_retries_in_the_options_retries_a_failing_task(r: redis.Redis) -> None:
    with override_settings(TASKS={"default": RETRYING}):
        result = framework_tasks.explode.enqueue("again")
        wait_until(lambda: run_worker() == 0 and get_result(result.id).is_finished)
        result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (TaskResultStatus.FAILED, 3, 3)
    assert r.hgetall("{test}:runs") == {b"again": b"3"}


def test_the_context_gives_the_attempt_number(r: redis.Redis) -> None:
    with override_settings(TASKS={"default": RETRYING}):
        result = framework_tasks.attempt_number.enqueue("ctx")
        wait_until(lambda: run_worker() == 0 and get_result(result.id).is_finished)
        result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert r.hgetall("{test}:context") == {result.id.encode(): b"2"}
    assert len(result.worker_ids) == 2


def test_a_return_value_that_is_not_json_fails_the_task(r: redis.Redis) -> None:
    result = framework_tasks.returns_a_set.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_priorities_come_out_highest_first_and_in_order_among_equals(r: redis.Redis) -> None:
    rng = random.Random(11)
    sent = []
    for n in range(200):
        priority = rng.choice([-100, -1, 0, 1, 50, 100])
        label = f"{priority}:{n}"
        framework_tasks.record.using(priority=priority).enqueue(label)
        sent.append((-priority, n, label))
    assert run_worker() == 200
    order = [label.decode() for label in r.lrange("{test}:order", 0, -1)]
    assert order == [label for _, _, label in sorted(sent)]


@pytest.mark.parametrize("priority", [5.0, decimal.Decimal("5")])
def test_a_whole_priority_of_another_number_type_runs_as_that_int(
    r: redis.Redis, priority: object
) -> None:
    result = framework_tasks.record.using(priority=priority).enqueue("whole")  # type: ignore[arg-type]
    assert run_worker() == 1
    assert framework_tasks.record.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert type(get_result(result.id).priority) is int
    assert get_result(result.id).priority == 5


def test_a_bool_priority_is_refused_before_anything_is_written(r: redis.Redis) -> None:
    with pytest.raises(InvalidTask, match="priority"):
        framework_tasks.record.using(priority=True).enqueue("bool")
    assert r.keys("*") == []


def test_run_after_is_never_early(r: redis.Redis) -> None:
    due = timezone.now() + datetime.timedelta(seconds=0.3)
    result = framework_tasks.record.using(run_after=due).enqueue("later")
    assert r.zcard(delayed_key("test")) == 1
    assert result.task.run_after == due
    worker = Worker(["test"])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: get_result(result.id).status is TaskStatus.SUCCESSFUL)
    finally:
        worker.stop()
        thread.join(10)
    started = get_result(result.id).started_at
    assert started is not None
    assert started >= due
    # Times are kept to the millisecond, rounded up so that a task is never early.
    kept = framework_tasks.record.get_result(result.id).task.run_after
    assert kept is not None
    assert datetime.timedelta(0) <= kept - due < datetime.timedelta(milliseconds=1)


def test_arguments_json_cannot_carry_raise_in_the_caller_and_write_nothing(
    r: redis.Redis,
) -> None:
    with pytest.raises(TypeError):
        framework_tasks.record.enqueue(object())
    with pytest.raises(TypeError):
        framework_tasks.record.enqueue(datetime.datetime.now())
    assert r.keys("*") == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "lone \udc80 surrogate"])
def test_arguments_json_or_utf_8_cannot_carry_raise_type_error_and_write_nothing(
    r: redis.Redis, bad: object
) -> None:
    with pytest.raises(TypeError, match="cannot be stored"):
        framework_tasks.record.enqueue(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot be stored"):
        framework_tasks.multiply.enqueue(1, b={"x": [bad]})  # type: ignore[arg-type]
    assert r.keys("*") == []


@pytest.mark.parametrize(
    "run_after",
    [
        datetime.datetime.max.replace(tzinfo=datetime.timezone.utc),
        timezone.now() + datetime.timedelta(seconds=MAX_SECONDS + 3600),
    ],
)
def test_run_after_past_ten_years_is_refused_before_anything_is_written(
    r: redis.Redis, run_after: datetime.datetime
) -> None:
    with pytest.raises(InvalidTask, match=r"run_after.*ten years"):
        framework_tasks.record.using(run_after=run_after).enqueue("never")
    assert r.keys("*") == []
    within = timezone.now() + datetime.timedelta(seconds=MAX_SECONDS - 3600)
    result = framework_tasks.record.using(run_after=within).enqueue("in time")
    assert framework_tasks.record.get_result(result.id).task.run_after is not None


def test_an_unknown_queue_is_refused_and_nothing_is_written(r: redis.Redis) -> None:
    with pytest.raises(InvalidTask, match="nowhere"):
        framework_tasks.record.using(queue_name="nowhere").enqueue("x")
    backend = {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", "QUEUES": []}
    with override_settings(TASKS={"default": backend}), pytest.raises(InvalidTask, match="queue"):
        framework_tasks.record.using(queue_name="bad\nname").enqueue("x")
    assert r.keys("*") == []


def test_unknown_ids_and_our_own_tasks_have_no_django_result(r: redis.Redis) -> None:
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0123456789abcdef")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("")
    ours = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultDoesNotExist, match="own @task"):
        backend.get_result(ours.id)


@pytest.fixture
def signals() -> Iterator[list[tuple[str, str]]]:
    sent: list[tuple[str, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
            sent.append((name, str(task_result.status)))

        return receive

    receivers = {
        signal: receiver(name)
        for signal, name in [
            (task_enqueued, "enqueued"),
            (task_started, "started"),
            (task_finished, "finished"),
        ]
    }
    for signal, receive in receivers.items():
        signal.connect(receive)
    yield sent
    for signal, receive in receivers.items():
        signal.disconnect(receive)


def test_djangos_signals_are_sent(r: redis.Redis, signals: list[tuple[str, str]]) -> None:
    framework_tasks.multiply.enqueue(1, 1)
    framework_tasks.explode.enqueue("signal")
    run_worker()
    assert signals == [
        ("enqueued", "READY"),
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
        ("started", "RUNNING"),
        ("finished", "FAILED"),
    ]


def test_aenqueue_and_aget_result_from_an_async_view(r: redis.Redis) -> None:
    client = AsyncClient()

    async def enqueue() -> Any:
        return await client.get("/framework-tasks/multiply/", {"a": 4, "b": 5})

    async def read(result_id: str) -> Any:
        return await client.get(f"/framework-tasks/{result_id}/")

    response = async_to_sync(enqueue)()
    assert response.status_code == 201
    created = json.loads(response.content)
    assert created["status"] == "READY"
    assert json.loads(async_to_sync(read)(created["id"]).content)["status"] == "READY"
    run_worker()
    response = async_to_sync(read)(created["id"])
    assert json.loads(response.content) == {"status": "SUCCESSFUL", "value": 20, "attempts": 1}


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"QUEUES": ["ok", ""]}, "invalid queue name"),
        ({"OPTIONS": {"MAX_RETRIES": -1}}, "MAX_RETRIES"),
        ({"OPTIONS": {"MAX_RETRIES": "3"}}, "MAX_RETRIES"),
        ({"OPTIONS": {"RETRY_BACKOFF": 0}}, "RETRY_BACKOFF"),
        ({"OPTIONS": {"RETRIES": 3}}, "unknown key 'RETRIES'"),
    ],
)
def test_system_checks_find_bad_queues_and_options(params: dict[str, Any], problem: str) -> None:
    backend = {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", **params}
    with override_settings(TASKS={"default": backend}):
        messages = [m for m in run_checks() if m.id and m.id.startswith("redis_components.E01")]
    assert len(messages) == 1
    assert problem in messages[0].msg


def test_a_worker_process_runs_django_tasks_from_the_default_queues(
    r: redis.Redis, start_worker: Any
) -> None:
    result = framework_tasks.multiply.enqueue(7, 8)
    worker: WorkerProcess = start_worker()  # no queue named: TASKS' queues are served
    wait_until(lambda: get_result(result.id).status is TaskStatus.SUCCESSFUL, worker.output)
    worker.signal(15)
    assert worker.wait() == 0
    assert framework_tasks.multiply.get_result(result.id).return_value == 56
    assert "test" in worker.output()
    assert r.zcard(ready_key("test")) == 0


def _seen(r: redis.Redis, label: str) -> list[dict[str, Any]]:
    return [json.loads(entry) for entry in r.lrange(f"{{test}}:seen:{label}", 0, -1)]


def _as_seen(when: datetime.datetime | None) -> str | None:
    return when.isoformat() if when else None


def test_a_first_attempt_sees_its_result_as_get_result_gives_it(r: redis.Redis) -> None:
    """The enqueue time travels in the payload, so a first attempt's result needs no read:
    what the task sees is what get_result() gives for the same attempt."""
    enqueued = framework_tasks.snapshot.enqueue("first")
    run_worker()
    [seen] = _seen(r, "first")
    result = framework_tasks.snapshot.get_result(enqueued.id)
    assert seen == {
        "enqueued_at": _as_seen(result.enqueued_at),
        "started_at": _as_seen(result.started_at),
        "last_attempted_at": _as_seen(result.last_attempted_at),
        "worker_ids": result.worker_ids,
    }
    assert seen["enqueued_at"] == _as_seen(enqueued.enqueued_at)


def test_a_deferred_task_sees_its_earlier_attempts(r: redis.Redis) -> None:
    enqueued = framework_tasks.snapshot.enqueue("deferred", defer_first=True)
    wait_until(lambda: run_worker() == 0 and len(_seen(r, "deferred")) == 2)
    first, second = _seen(r, "deferred")
    result = framework_tasks.snapshot.get_result(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert len(first["worker_ids"]) == 1
    assert second["worker_ids"] == result.worker_ids
    assert len(result.worker_ids) == 2
    assert second["enqueued_at"] == first["enqueued_at"] == _as_seen(result.enqueued_at)
    assert second["started_at"] == first["started_at"] == _as_seen(result.started_at)


@single_server_only
def test_a_django_task_costs_the_server_what_our_task_does(r: redis.Redis) -> None:
    """No read of the result record before a first attempt: a finished Django task costs
    the same 13 commands as one of our @task's (see test_task_worker.py)."""

    def commands_for(count: int) -> int:
        for i in range(count):
            framework_tasks.multiply.enqueue(i, 2)
        r.config_resetstat()
        assert run_worker() == count
        return sum(stat["calls"] for stat in r.info("commandstats").values())

    commands_for(1)  # loads the scripts
    assert (commands_for(40) - commands_for(20)) / 20 == 13


class SubclassedBackend(RedisTaskBackend):
    """A project's own subclass of our backend: its queues are ours too."""


def test_the_queues_of_a_subclass_of_our_backend_are_served() -> None:
    from django.conf import settings

    from redis_components.tasks.registry import queues_in_use

    subclassed = {"BACKEND": f"{__name__}.SubclassedBackend", "QUEUES": ["sub-queue"]}
    # Any other class (here not even a Tasks backend, on every Django we support).
    elsewhere = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "QUEUES": ["not-ours"]}
    with override_settings(TASKS={**settings.TASKS, "sub": subclassed, "other": elsewhere}):
        found = queues_in_use()
    assert "sub-queue" in found
    assert "not-ours" not in found
