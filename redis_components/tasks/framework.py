"""Django's Tasks framework: ``django.tasks`` on Django 6, the ``django-tasks`` backport
on Django 5.2 (a dependency of this package on Python 3.10 and 3.11, where Django 6
cannot run; the ``tasks-backport`` extra elsewhere)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import django

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # pragma: no cover - Django 5.2
    try:
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    except ImportError as error:
        raise ImportError(
            "redis_components' tasks need Django's Tasks framework: on Django 5.2, "
            "pip install 'django-redis-components[tasks-backport]' (the django-tasks "
            "backport)"
        ) from error
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
