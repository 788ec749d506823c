"""The task system: queues, workers, results, workflows and Django's Tasks backend.

Every task is Django's ``Task`` (``definition.py``: :class:`RedisTask` and the steps of
workflows, made by our ``@redis_task`` or by Django's with :class:`RedisTaskBackend`:
``backend.py``), and every result Django's ``TaskResult``. One store (``store/``) sends
every command on the task keys: task messages (``messages.py``), result records
(``results.py``), workflows (``workflows.py``, ``workflow_records.py``) and schedules
(``schedules.py``). Limits are ``limits.py``; what a running task uses, ``registry.py``.
Workers (``worker.py``, run by ``supervisor.py`` for ``manage.py rc_worker``) wake on
work (``waker.py``), record and take through one conveyor (``conveyor.py``), run each
task (``jobs.py``, ``execution.py``) in a slot (``slots.py``) and keep their lease
(``lease.py``); ``status.py`` reads the queues; ``framework.py`` is Django's Tasks.
"""

from __future__ import annotations

from typing import Any

from ..deprecation import deprecated
from .backend import RedisTask, RedisTaskBackend, get_result, redis_task
from .definition import enqueue_many, get_task
from .limits import concurrency_limit, rate_limit
from .messages import DEFAULT_QUEUE, TaskMessage
from .registry import Retry, RunningTask, current_task, defer
from .results import Progress, RedisTaskContext, RedisTaskResult, aget_progress, get_progress
from .schedules import periodic
from .store import cancel
from .workflows import Workflow, chain, get_workflow, group, signature

__all__ = [
    "DEFAULT_QUEUE",
    "Progress",
    "RedisTask",
    "RedisTaskBackend",
    "RedisTaskContext",
    "RedisTaskResult",
    "Retry",
    "RunningTask",
    "TaskMessage",
    "Workflow",
    "aget_progress",
    "cancel",
    "chain",
    "concurrency_limit",
    "current_task",
    "defer",
    "enqueue_many",
    "get_progress",
    "get_result",
    "get_task",
    "get_workflow",
    "group",
    "periodic",
    "rate_limit",
    "redis_task",
    "signature",
]


def __getattr__(name: str) -> Any:
    """The names of 0.1 that the one task model replaced: they work, with a warning,
    until 0.3 (see the changelog)."""
    replaced = {
        "task": ("redis_components.redis_task", "backend", "redis_task"),
        "Task": ("redis_components.RedisTask", "backend", "RedisTask"),
        "TaskResult": ("Django's TaskResult", "framework", "TaskResult"),
        "TaskStatus": ("Django's TaskResultStatus", "framework", "TaskResultStatus"),
    }
    if name not in replaced:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    instead, module, attribute = replaced[name]
    deprecated(f"redis_components.{name}", f"use {instead}", stacklevel=2)
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), attribute)
