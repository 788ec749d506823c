"""Tasks declared with Django's Tasks framework, run by our backend and workers.

Django 6 has it built in; on Django 5.2 the django-tasks backport provides it.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import django

from redis_components import Retry, concurrency_limit, current_task
from redis_components.connection import get_client

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskContext, task
else:
    from django_tasks import TaskContext, task

# Django's @task passes options it does not know to the backend's task_class from 6.1
# on (and in the backport); Django 6.0's does not, so there the task class is called
# as Django's @task would call it.
OPTIONS_THROUGH_DJANGO = django.VERSION >= (6, 1) or django.VERSION < (6, 0)


def with_options(**options: Any) -> Any:
    """Django's ``@task(queue_name="test", **options)`` for our backend."""
    if OPTIONS_THROUGH_DJANGO:
        return task(queue_name="test", **options)
    from redis_components import RedisTask

    return lambda func: RedisTask(
        func=func,
        priority=0,
        queue_name="test",
        backend="default",
        run_after=None,
        takes_context=False,
        **options,
    )


@task(queue_name="test")
def multiply(a: int, b: int) -> int:
    return a * b


@task(queue_name="test")
async def async_multiply(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@task(queue_name="test")
def explode(label: str) -> None:
    get_client().hincrby("{test}:runs", label, 1)
    raise ValueError(f"{label} exploded")


@task(queue_name="test", takes_context=True)
def attempt_number(context: TaskContext[Any, Any], label: str) -> int:
    """Ask for one retry; return the attempt number and this task's result id."""
    get_client().hset("{test}:context", context.task_result.id, context.attempt)
    if context.attempt == 1:
        raise Retry(delay=0.01, reason="once more")
    return context.attempt


@task(queue_name="test")
def record(label: str) -> None:
    client = get_client()
    pipe = client.pipeline(transaction=True)
    pipe.hincrby("{test}:runs", label, 1)
    pipe.rpush("{test}:order", label)
    pipe.execute()


@task(queue_name="test")
def returns_a_set() -> object:
    return {1, 2}


@task(queue_name="test")
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    """A queued form of this task was captured by a release (tests/upgrade/): keep it."""
    return [list(args), kwargs]


@task(queue_name="test", takes_context=True)
def snapshot(context: TaskContext[Any, Any], label: str, defer_first: bool = False) -> None:
    """Record the result this run sees; with ``defer_first``, defer the first run."""
    seen = context.task_result
    get_client().rpush(
        f"{{test}}:seen:{label}",
        json.dumps(
            {
                "enqueued_at": seen.enqueued_at.isoformat() if seen.enqueued_at else None,
                "started_at": seen.started_at.isoformat() if seen.started_at else None,
                "last_attempted_at": seen.last_attempted_at.isoformat()
                if seen.last_attempted_at
                else None,
                "worker_ids": seen.worker_ids,
            }
        ),
    )
    running = current_task()
    if defer_first and running is not None and context.attempt == 1:
        running.defer(0.01)


@with_options(max_retries=1, retry_backoff=0.01)
def explode_with_one_retry(label: str) -> None:
    """Our backend's options on Django's @task (its task_class is RedisTask)."""
    explode.call(label)


@with_options(unique_for=60)
def record_once(label: str) -> None:
    record.call(label)


@with_options(limits=[concurrency_limit(1, key="order:{order}")])
def ship(order: int, label: str) -> None:
    """One at a time per order: a limit on Django's @task."""
    record.call(label)


@with_options(time_limit=3, soft_time_limit=1)
def limited() -> None:
    """Time limits of its own."""


# -- Django's proposed retries (django/new-features#142) ----------------------------------


def linear_backoff(exception: BaseException, task_result: Any) -> int | None:
    """#142's example: 30 seconds between attempts."""
    return 30


class HTTPError(Exception):
    """An error with an attribute that no stored result keeps: its status code."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.code = code


def by_status(exception: BaseException, task_result: Any) -> int | None:
    """Record what it is given; retry a 429 at once, never a 502 (#142's example)."""
    get_client().rpush(
        "{test}:backoff",
        json.dumps(
            {
                "status": str(task_result.status),
                "errors": [error.exception_class_path for error in task_result.errors],
                "attempts": task_result.attempts,
                "code": getattr(exception, "code", None),
            }
        ),
    )
    return 0 if getattr(exception, "code", None) == 429 else None


@with_options(max_attempts=10, backoff=linear_backoff)
def my_task(label: str) -> None:
    """#142's ``my_task``: "Run at most 10 times, with 30 seconds in between"."""
    explode.call(label)


@with_options(max_attempts=3, backoff=by_status)
def fetch(label: str, code: int) -> None:
    get_client().hincrby("{test}:runs", label, 1)
    raise HTTPError(code)


@with_options(max_attempts=2, backoff="tests.testapp.framework_tasks.by_status")
def fetch_by_path(label: str, code: int) -> None:
    fetch.call(label, code)
