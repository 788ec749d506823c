"""The memory benchmark's project: queue_apps' ``startproject`` settings, plus django-rq
and Celery configured from Django's settings (Celery's "First steps with Django").

Every contender's worker loads this module; each library's no-op task lives in a module
of ``benchmarks.memory_apps`` that only its own worker imports.
"""

from __future__ import annotations

import os

from benchmarks.queue_apps.project_settings import *  # noqa: F403
from benchmarks.queue_apps.project_settings import INSTALLED_APPS as _PROJECT_APPS

_URL = os.environ.get("BENCH_REDIS_URL", "unix:///nonexistent.sock")

# queue_apps' tasks are replaced by this project's (tasks.py: ours, autodiscovered).
INSTALLED_APPS = [app for app in _PROJECT_APPS if app != "benchmarks.queue_apps"]
INSTALLED_APPS += ["django_rq", "benchmarks.memory_apps"]

RQ_QUEUES = {"default": {"URL": _URL}}

CELERY_BROKER_URL = _URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True  # Celery 5's default, without its warning
CELERY_TASK_IGNORE_RESULT = True
