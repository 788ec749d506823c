"""What a type checker sees of tasks: checked by mypy and pyright (tests/test_typing.py),
never imported or run.

Each line that must be an error carries each checker's ignore comment for its error's
code. Both fail on an ignore that ignores nothing (mypy's strict ``warn_unused_ignores``,
pyright's ``reportUnnecessaryTypeIgnoreComment`` in ``pyrightconfig.json`` here), so an
error that goes missing fails the test as a failing ``assert_type`` does. Pyright reads
only its own ignores there (``enableTypeIgnoreComments`` off); mypy never reads them.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.tasks import Task, TaskContext, TaskResult, task
from typing_extensions import assert_type

from redis_components import RedisTask, get_progress, get_result, redis_task
from redis_components.tasks import Progress, RedisTaskContext, RedisTaskResult
from redis_components.tasks.backend import RedisTaskBackend


@redis_task
def add(a: int, b: int = 0) -> int:
    return a + b


@redis_task(queue="email", max_retries=1)
def greet(name: str, *, loud: bool = False) -> str:
    return name


@redis_task
async def fetch(url: str) -> bytes:
    return url.encode()


@redis_task(queue="email")
async def count(words: list[str]) -> dict[str, int]:
    return {}


@redis_task(takes_context=True)
def attempt(context: TaskContext[Any, Any], label: str) -> int:
    return context.attempt


@redis_task(takes_context=True, queue="email")
async def aattempt(context: TaskContext[Any, Any], label: str) -> float:
    return 0.0


@redis_task(takes_context=True)
def traced(context: RedisTaskContext, label: str) -> bool:
    context.metadata["label"] = label
    return context.save_metadata()


@task
def django_task(a: int) -> str:
    return str(a)


# -- what the decorators make: the function's parameters and return type ------------------

add_task: RedisTask[[int, int], int] = add
# An async def's task returns what its function returns when awaited.
fetch_task: RedisTask[[str], bytes] = fetch
count_task: RedisTask[[list[str]], dict[str, int]] = count
# With takes_context, the context is not an argument the callers pass.
attempt_task: RedisTask[[str], int] = attempt
aattempt_task: RedisTask[[str], float] = aattempt
# Our context (Django's, with the proposed metadata), and using(metadata=...).
traced_task: RedisTask[[str], bool] = traced
traced_with: RedisTask[[str], bool] = traced.using(metadata={"trace_id": 1})


def metadata_of(found: RedisTaskResult) -> dict[str, Any]:
    return found.metadata


# Progress (docs/progress.md): said in the task, read on a result or alone.
@redis_task(takes_context=True)
def counted(context: RedisTaskContext, items: int) -> bool:
    return context.set_progress(0, items, "starting") and context.set_progress(0.5)


def fraction_of(found: RedisTaskResult) -> float | None:
    assert_type(found.progress, Progress | None)
    assert_type(get_progress(found.id), Progress | None)
    return None if found.progress is None else found.progress.fraction


# It is a Django Task, of the same parameters and return type.
django_view: Task[[int, int], int] = add
# Django's @task, whatever its backend (our backend's task_class included), is typed by
# django-stubs as Task[P, R].
assert_type(django_task.enqueue(1).return_value, str)
assert_type(RedisTaskBackend.task_class, type[RedisTask[..., Any]])


# -- results: return_value is the function's return type -----------------------------------

result: TaskResult[[int, int], int] = add.enqueue(1, 2)
assert_type(add.enqueue(1, 2).return_value, int)
assert_type(add.enqueue(1, b=2).return_value, int)
assert_type(add.get_result("an id").return_value, int)
assert_type(greet.enqueue("ann", loud=True).return_value, str)
assert_type(fetch.enqueue("https://example.com").return_value, bytes)
assert_type(fetch.get_result("an id").return_value, bytes)
assert_type(count.enqueue(["a"]).return_value, dict[str, int])
assert_type(attempt.enqueue("x").return_value, int)
assert_type(aattempt.enqueue("x").return_value, float)
# using() keeps the task's class and types.
add_task = add.using(priority=5)
assert_type(add.using(priority=5).enqueue_in(1, 2).return_value, int)
assert_type(add.using(queue_name="email").enqueue(1).return_value, int)
assert_type(fetch.using(priority=1).get_result("an id").return_value, bytes)
# Our own ways to enqueue.
assert_type(add.enqueue_in(10, 1, 2).return_value, int)
when = datetime.datetime.now(datetime.timezone.utc)
assert_type(add.enqueue_at(when, 1, 2).return_value, int)
assert_type(add.enqueue_on_commit(1, 2).return_value, int)
# Running it here.
assert_type(add.call(1, 2), int)
assert_type(fetch.call("u"), bytes)
# A result found by its id alone has no task to type it.
assert_type(get_result("an id"), TaskResult[..., Any])


async def in_async_code() -> None:
    assert_type((await add.aenqueue(1, 2)).return_value, int)
    assert_type((await fetch.aenqueue("u")).return_value, bytes)
    assert_type((await fetch.aget_result("an id")).return_value, bytes)
    assert_type(await fetch.acall("u"), bytes)
    await add.aenqueue("1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


# -- enqueue is checked against the function's signature ---------------------------------

add.enqueue("1", 2)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.enqueue()  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
add.enqueue(1, 2, 3)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
add.enqueue(1, c=2)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
greet.enqueue("ann", True)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
fetch.enqueue(b"bytes")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
attempt.enqueue(1)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.using(priority=1).enqueue("1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.enqueue_in(10, "1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.enqueue_at(when, "1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.enqueue_on_commit("1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
add.call("1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
django_task.enqueue("1")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
# return_value is not anything.
text: str = add.enqueue(1).return_value  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def declared_with(flag: bool) -> None:
    # takes_context known only at run time: a task, of parameters unknown.
    @redis_task(takes_context=flag)
    def either(*args: Any) -> None: ...

    assert_type(either, RedisTask[..., Any])
