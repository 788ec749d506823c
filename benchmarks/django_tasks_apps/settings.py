"""Django settings of the Tasks benchmark, for the contender named by ``BENCH_BACKEND``.

Every contender gets the ``TASKS`` entry and ``INSTALLED_APPS`` its documentation
shows, with no tuning options: ``ours`` (redis_components' ``RedisTaskBackend``),
``rq`` (django-tasks-rq on django-rq), ``db`` (django-tasks-db) or ``tasks-redis``
(django-tasks-redis, whose README's quick start gives ``QUEUES: []`` and the server in
``OPTIONS["REDIS_URL"]``, nothing else). All share the private
Redis in ``BENCH_REDIS_URL`` and the database in ``BENCH_DB_ENGINE`` (``sqlite`` or
``postgresql``), ``BENCH_DB_NAME`` (a file, or a database) and, for PostgreSQL,
``BENCH_DB_HOST`` (the directory of its socket) and ``BENCH_DB_PORT``.
"""

from __future__ import annotations

import os
from typing import Any

import django

BACKEND = os.environ.get("BENCH_BACKEND", "ours")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "unix:///nonexistent.sock")

SECRET_KEY = "benchmark-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("BENCH_DB_ENGINE", "sqlite") == "postgresql":
    database: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("BENCH_DB_NAME", "bench"),
        "USER": "bench",
        "HOST": os.environ.get("BENCH_DB_HOST", ""),
        "PORT": os.environ.get("BENCH_DB_PORT", ""),
    }
else:
    database = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_DB_NAME", "bench.sqlite3"),
    }
DATABASES = {"default": database}

# Our backend finds Redis through a django-redis cache, as the app's README shows.
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL}}

# The backport only where Django has no django.tasks (django-tasks-rq imports it anyway).
BACKPORT = [] if django.VERSION >= (6, 0) else ["django_tasks"]
APPS = {
    "ours": ["redis_components"],
    "rq": ["django_rq", "django_tasks_rq"],
    "db": ["django_tasks_db"],
    "tasks-redis": ["django_tasks_redis"],
}
BACKENDS: dict[str, dict[str, Any]] = {
    "ours": {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend", "QUEUES": ["default"]},
    "rq": {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]},
    "db": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]},
    # django-tasks-redis finds Redis in its own OPTIONS, not in a cache or RQ_QUEUES.
    "tasks-redis": {
        "BACKEND": "django_tasks_redis.RedisTaskBackend",
        "QUEUES": [],
        "OPTIONS": {"REDIS_URL": REDIS_URL},
    },
}
INSTALLED_APPS = [*BACKPORT, *APPS[BACKEND], "benchmarks.django_tasks_apps"]
TASKS = {"default": BACKENDS[BACKEND]}
RQ_QUEUES = {"default": {"URL": REDIS_URL}}
