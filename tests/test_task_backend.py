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
from redis_components import chain, get_result, group, signature
from redis_components.exceptions import InvalidInput, InvalidTaskArguments
from redis_components.keys import MAX_SECONDS
from redis_components.tasks.definition import _signature
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.results import read_records
from redis_components.tasks.status import queue_stats
from redis_components.tasks.worker import Worker
from tests.commands import commands_per_task
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
    from django.tasks import task as framework_task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks import task as framework_task
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

from redis_components.tasks.backend import RedisTask, RedisTaskBackend

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
    # One model: our own reader gives the same result.
    assert get_result(result.id).task == framework_tasks.multiply


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
    [waiting] = [r for r in read_records([result.id]) if r is not None]
    assert type(waiting.priority) is int
    assert waiting.priority == 5


def test_a_bool_priority_is_refused_before_anything_is_written(r: redis.Redis) -> None:
    with pytest.raises(InvalidTask, match="priority"):
        framework_tasks.record.using(priority=True).enqueue("bool")
    assert r.keys("*") == []


def test_run_after_is_never_early(r: redis.Redis) -> None:
    due = timezone.now() + datetime.timedelta(seconds=0.3)
    result = framework_tasks.record.using(run_after=due).enqueue("later")
    assert queue_stats(["test"])[0].delayed == 1
    assert result.task.run_after == due
    worker = Worker(["test"])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_until(lambda: get_result(result.id).status is TaskResultStatus.SUCCESSFUL)
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


def test_a_run_after_that_is_not_a_datetime_is_refused_saying_so(r: redis.Redis) -> None:
    """A timedelta (Django takes only a datetime) is a refusal saying what to pass, not
    an AttributeError from deep inside."""
    in_an_hour = datetime.timedelta(hours=1)
    with pytest.raises(InvalidTask, match=r"run_after: must be a datetime, not a timedelta"):
        framework_tasks.record.using(run_after=in_an_hour).enqueue("never")  # type: ignore[arg-type]
    with pytest.raises(InvalidTask, match=r"run_after: must be a datetime, not int"):
        framework_tasks.record.using(run_after=3600).enqueue("never")  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_an_unknown_queue_is_refused_and_nothing_is_written(r: redis.Redis) -> None:
    with pytest.raises(InvalidTask, match="nowhere"):
        framework_tasks.record.using(queue_name="nowhere").enqueue("x")
    backend = {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", "QUEUES": []}
    with override_settings(TASKS={"default": backend}), pytest.raises(InvalidTask, match="queue"):
        framework_tasks.record.using(queue_name="bad\nname").enqueue("x")
    assert r.keys("*") == []


def test_a_task_that_passed_is_checked_again_under_other_settings(r: redis.Redis) -> None:
    """Django checks a task on every enqueue: the same task that passed is refused once
    the settings refuse it."""
    backend = {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", "QUEUES": []}
    with override_settings(TASKS={"default": backend}):
        task = framework_tasks.record.using(queue_name="nowhere")
        task.enqueue("x")
        task.enqueue("x")
    with pytest.raises(InvalidTask, match="nowhere"):
        task.enqueue("x")
    assert [stats.ready for stats in queue_stats(["nowhere"])] == [2]


def test_unknown_ids_have_no_result_and_any_task_of_ours_has_one(r: redis.Redis) -> None:
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0123456789abcdef")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("")
    ours = tasks.add.enqueue(1, 2)  # our @task: the same model, read by any of our backends
    found = backend.get_result(ours.id)
    assert (found.task, found.status, found.args) == (tasks.add, TaskResultStatus.READY, [1, 2])


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


def test_a_queue_not_in_queues_at_start_up_is_a_system_check_error(
    monkeypatch: pytest.MonkeyPatch, r: redis.Redis
) -> None:
    """A Django task declared while the apps load (its tasks module autodiscovered) with
    a queue the backend does not serve: a check error naming it, not a crash; enqueuing
    it is refused."""
    backend = {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", "QUEUES": ["a"]}
    with override_settings(TASKS={"default": backend}):
        with monkeypatch.context() as loading:
            loading.setattr("django.apps.apps.ready", False)
            declared = framework_task(queue_name="b")(framework_tasks.record.func)
        assert declared.queue_name == "b"
        messages = [m for m in run_checks() if m.id == "redis_components.E016"]
        assert [m.msg for m in messages] == [
            f"Task {declared.module_path} uses queue 'b', which is not in "
            "TASKS['default']['QUEUES'] (a)."
        ]
        with pytest.raises(InvalidTask, match="'b'"):
            declared.enqueue("x")
        with pytest.raises(InvalidTask, match="'c'"):  # once the apps are loaded: at once
            framework_task(queue_name="c")(framework_tasks.record.func)
    assert r.keys("*") == []


def test_a_worker_process_runs_django_tasks_from_the_default_queues(
    r: redis.Redis, start_worker: Any
) -> None:
    result = framework_tasks.multiply.enqueue(7, 8)
    worker: WorkerProcess = start_worker()  # no queue named: TASKS' queues are served
    wait_until(lambda: get_result(result.id).status is TaskResultStatus.SUCCESSFUL, worker.output)
    worker.signal(15)
    assert worker.wait() == 0
    assert framework_tasks.multiply.get_result(result.id).return_value == 56
    assert "test" in worker.output()
    assert queue_stats(["test"])[0].ready == 0


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
    the same 10 commands as one of our @task's (see test_task_worker.py)."""

    def enqueue(count: int) -> None:
        for i in range(count):
            framework_tasks.multiply.enqueue(i, 2)

    assert commands_per_task(r, enqueue, run_worker) == 10


class SubclassedBackend(RedisTaskBackend):
    """A project's own subclass of our backend: its queues are ours too."""


def test_the_queues_of_a_subclass_of_our_backend_are_served() -> None:
    from django.conf import settings

    from redis_components.tasks.backend import queues_in_use

    subclassed = {"BACKEND": f"{__name__}.SubclassedBackend", "QUEUES": ["sub-queue"]}
    # Any other class (here not even a Tasks backend, on every Django we support).
    elsewhere = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "QUEUES": ["not-ours"]}
    with override_settings(TASKS={**settings.TASKS, "sub": subclassed, "other": elsewhere}):
        found = queues_in_use()
    assert "sub-queue" in found
    assert "not-ours" not in found


# -- a task's own options (RedisTask, the backend's task_class) --------------------------


def test_djangos_task_decorator_makes_our_task_class_with_its_options() -> None:
    assert RedisTaskBackend.task_class is RedisTask
    made = framework_tasks.explode_with_one_retry
    assert isinstance(made, RedisTask)
    assert (made.max_retries, made.retry_backoff, made.unique_for) == (1, 0.01, None)
    assert isinstance(framework_tasks.multiply, RedisTask)
    assert framework_tasks.multiply.max_retries is None  # the backend's OPTIONS hold


def test_a_tasks_own_max_retries_beats_the_backends(r: redis.Redis) -> None:
    own = framework_tasks.explode_with_one_retry.enqueue("own")
    wait_until(lambda: run_worker() == 0 and get_result(own.id).is_finished)
    with override_settings(TASKS={"default": RETRYING}):  # MAX_RETRIES 2
        still_own = framework_tasks.explode_with_one_retry.enqueue("still own")
        backends = framework_tasks.explode.enqueue("backend's")
        wait_until(
            lambda: (
                run_worker() == 0
                and get_result(still_own.id).is_finished
                and get_result(backends.id).is_finished
            )
        )
        still_own.refresh()
    assert (still_own.status, still_own.attempts) == (TaskResultStatus.FAILED, 2)
    assert r.hgetall("{test}:runs") == {b"own": b"2", b"still own": b"2", b"backend's": b"3"}


def test_using_keeps_the_tasks_options() -> None:
    changed = framework_tasks.explode_with_one_retry.using(priority=5)
    assert isinstance(changed, RedisTask)
    assert (changed.priority, changed.max_retries, changed.retry_backoff) == (5, 1, 0.01)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
        ({"retry_backoff": 0}, "retry_backoff"),
        ({"unique_for": -5}, "unique_for"),
        ({"time_limit": 1, "soft_time_limit": 2}, "soft_time_limit"),
        ({"time_limit": "1"}, "time_limit"),
    ],
)
@pytest.mark.skipif(
    not framework_tasks.OPTIONS_THROUGH_DJANGO,
    reason="Django 6.0's @task takes no backend options (6.1 and the backport do)",
)
def test_bad_options_of_a_task_are_refused_when_it_is_made(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidTask, match=named):
        framework_task(queue_name="test", **options)(framework_tasks.multiply.func)


def test_a_unique_django_task_is_enqueued_once_within_its_window(r: redis.Redis) -> None:
    first = framework_tasks.record_once.enqueue("same")
    again = framework_tasks.record_once.using(priority=3).enqueue("same")
    other = framework_tasks.record_once.enqueue("other")
    assert again.id == first.id
    assert again.task.priority == 3  # the task as given
    assert other.id != first.id
    assert queue_stats(["test"])[0].ready == 2
    framework_tasks.record.enqueue("same")  # not unique: always enqueued
    assert queue_stats(["test"])[0].ready == 3
    with pytest.raises(TypeError, match="mixed types"):
        framework_tasks.record_once.enqueue({1: "a", "b": 2})  # type: ignore[arg-type]
    assert queue_stats(["test"])[0].ready == 3
    assert run_worker() == 3
    assert r.hgetall("{test}:runs") == {b"same": b"2", b"other": b"1"}
    finished = framework_tasks.record_once.enqueue("same")  # its first run's result
    assert (finished.id, finished.status) == (first.id, TaskResultStatus.SUCCESSFUL)
    assert finished.return_value is None


def test_a_django_tasks_own_time_limits_beat_the_backends() -> None:
    limited = {**RETRYING, "OPTIONS": {"TIME_LIMIT": 10, "SOFT_TIME_LIMIT": 5}}
    with override_settings(TASKS={"default": limited}):
        plain = job_of(framework_tasks.multiply)
        own = job_of(framework_tasks.limited)
    assert (plain.time_limit, plain.soft_time_limit) == (10, 5)
    assert (own.time_limit, own.soft_time_limit) == (3, 1)


def job_of(task: Any) -> Any:
    """The job a worker makes of a message for ``task`` (its options looked up as then)."""
    from redis_components.tasks.jobs import job_for
    from redis_components.tasks.messages import TaskMessage

    message = TaskMessage(
        id="f" * 32, task=task.module_path, queue="test", args=[], kwargs={}, backend="default"
    )
    return job_for(message, "w.1.1.abc", 0)


# -- arguments that do not fit the task's function -------------------------------------

SOON = timezone.now() + datetime.timedelta(minutes=5)
WRONG_ARGUMENTS = [
    # Django's @task on our backend: enqueue, aenqueue, using(...), an async def task.
    ("multiply", lambda: framework_tasks.multiply.enqueue(1, 2, 3), "too many positional"),
    ("multiply", lambda: framework_tasks.multiply.enqueue(1), "missing a required argument: 'b'"),
    ("multiply", lambda: framework_tasks.multiply.enqueue(1, 2, c=3), "unexpected keyword"),
    ("multiply", lambda: framework_tasks.multiply.enqueue(1, a=2), "multiple values for argument"),
    ("multiply", lambda: async_to_sync(framework_tasks.multiply.aenqueue)(1), "missing"),
    ("multiply", lambda: framework_tasks.multiply.using(run_after=SOON).enqueue(), "missing"),
    ("async_multiply", lambda: framework_tasks.async_multiply.enqueue(1, 2, 3), "too many"),
    # The context is the worker's to give, not the caller's.
    ("attempt_number", lambda: framework_tasks.attempt_number.enqueue(), "missing"),
    ("attempt_number", lambda: framework_tasks.attempt_number.enqueue("x", "y"), "too many"),
    # Our @redis_task: every way it enqueues.
    ("add", lambda: tasks.add.enqueue(1, 2, 3), "too many positional"),
    ("add", lambda: async_to_sync(tasks.add.aenqueue)(1, 2, 3), "too many positional"),
    ("add", lambda: tasks.add.enqueue_in(5, 1), "missing a required argument: 'b'"),
    ("add", lambda: tasks.add.enqueue_at(SOON, 1, b=2, c=3), "unexpected keyword argument"),
    ("add", lambda: tasks.add.enqueue_on_commit(b=1), "missing a required argument: 'a'"),
    ("async_add", lambda: tasks.async_add.enqueue(1), "missing"),
]


@pytest.mark.parametrize(
    ("task", "enqueue", "problem"),
    WRONG_ARGUMENTS,
    ids=[f"{i}-{call[0]}" for i, call in enumerate(WRONG_ARGUMENTS)],
)
def test_arguments_the_function_cannot_take_raise_in_the_caller_and_write_nothing(
    r: redis.Redis, task: str, enqueue: Any, problem: str
) -> None:
    with pytest.raises(InvalidTaskArguments, match=problem) as caught:
        enqueue()
    # A TypeError, as the call would raise, and bad input naming the task.
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, InvalidInput)
    assert caught.value.field == "args"
    assert caught.value.task.rpartition(".")[2] == task
    assert f".{task}'" in str(caught.value)
    assert r.keys("*") == []


def test_a_call_of_every_parameter_by_position_needs_no_binding(r: redis.Redis) -> None:
    """Such a call fits without binding (the fast path); any other kind of parameter
    sends every call to ``inspect``'s binding, which says what does not fit."""

    def plain(a: int, b: int = 0) -> None: ...
    def starred(a: int, *rest: int) -> None: ...
    def keyword(a: int, *, b: int) -> None: ...

    assert [_signature(function)[1] for function in (plain, starred, keyword)] == [2, -1, -1]
    tasks.add.enqueue(1, 2)  # (the fast path)
    with pytest.raises(InvalidTaskArguments, match="missing a required argument: 'b'"):
        tasks.add.enqueue(1)


def test_arguments_the_function_can_take_are_enqueued(r: redis.Redis) -> None:
    framework_tasks.multiply.enqueue(2, b=3)
    framework_tasks.attempt_number.enqueue(label="x")
    framework_tasks.echo.enqueue(1, 2, any=3)
    tasks.add.enqueue(b=4, a=5)
    tasks.record.enqueue("default pause")
    assert queue_stats(["test"])[0].ready == 5


def test_a_workflow_whose_steps_cannot_take_their_arguments_writes_nothing(
    r: redis.Redis,
) -> None:
    # After another step, a step gets that step's result first: add(result, 3) fits.
    fits = chain(tasks.add.s(1, 2), tasks.add.s(3), signature(framework_tasks.multiply, 2))
    wrong = [
        tasks.add.s(1),  # a first step gets no result
        chain(tasks.add.s(1, 2), tasks.add.s(3, 4)),  # the result, then two more
        chain(tasks.add.s(1, 2), tasks.add.si(3)),  # immutable: no result
        group([tasks.add.s(1, 2)]).then(tasks.add.s()),  # the list of results, alone
        chain(group([]), tasks.add.s(1, 2)),  # an empty group's [] comes first too
        chain(tasks.add.s(1, 2), signature(framework_tasks.multiply, 2, 3)),
        chain(fits, tasks.add.s(c=1)),  # the last step of a longer chain
    ]
    for workflow in wrong:
        with pytest.raises(InvalidTaskArguments):
            workflow.enqueue()
    assert r.keys("*") == []
    enqueued = fits.enqueue()
    run_worker()
    assert enqueued.results() == 12  # (1 + 2 + 3) * 2
