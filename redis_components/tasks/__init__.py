"""The task system: queues, workers, results, and Django's Tasks backend.

Every task is Django's ``Task`` (``backend.py``: :class:`RedisTask`, made by our
``@redis_task`` or by Django's with :class:`RedisTaskBackend`), and every result Django's
``TaskResult``. One store (``store.py``) runs the queue scripts on task messages
(``messages.py``) and reads result records (``results.py``); our ``@redis_task`` registers
tasks by name (``registry.py``). Workers (``worker.py``, run by ``supervisor.py`` for
``manage.py rc_worker``) run jobs (``jobs.py``, ``execution.py``), keep their lease
and recover dead workers' tasks (``lease.py``) and claim the ticks of schedules
(``schedules.py``); ``status.py`` reads what the queues hold; ``workflows.py`` chains
and groups tasks.
"""

from __future__ import annotations

from typing import Any

from ..deprecation import deprecated
from .backend import RedisTask, RedisTaskBackend, get_result, redis_task
from .messages import DEFAULT_QUEUE, TaskMessage
from .registry import Retry, RunningTask, current_task, defer, get_task
from .schedules import periodic
from .store import cancel
from .workflows import Workflow, chain, get_workflow, group, signature

__all__ = [
    "DEFAULT_QUEUE",
    "RedisTask",
    "RedisTaskBackend",
    "Retry",
    "RunningTask",
    "TaskMessage",
    "Workflow",
    "cancel",
    "chain",
    "current_task",
    "defer",
    "get_result",
    "get_task",
    "get_workflow",
    "group",
    "periodic",
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
