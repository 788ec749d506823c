"""The task system: queues, workers, results, and Django's Tasks backend.

One store (``store.py``) runs the queue scripts on task messages (``messages.py``);
two front doors use it: our ``@task`` (``registry.py``) and Django's Tasks framework
(``backend.py``). Workers (``worker.py``, run by ``supervisor.py`` for ``manage.py
rc_worker``) run tasks (``execution.py``), record their results (``results.py``), keep
their lease and recover dead workers' tasks (``lease.py``) and claim the ticks of
schedules (``schedules.py``); ``status.py`` reads what the queues hold.
"""

from __future__ import annotations

from .messages import DEFAULT_QUEUE, TaskMessage
from .registry import Retry, RunningTask, Task, current_task, defer, get_task, task
from .results import AttemptError, TaskResult, TaskStatus, get_result
from .schedules import periodic
from .store import cancel

__all__ = [
    "DEFAULT_QUEUE",
    "AttemptError",
    "Retry",
    "RunningTask",
    "Task",
    "TaskMessage",
    "TaskResult",
    "TaskStatus",
    "cancel",
    "current_task",
    "defer",
    "get_result",
    "get_task",
    "periodic",
    "task",
]
