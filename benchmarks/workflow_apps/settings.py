"""Django settings for redis_components' worker in the workflow benchmark."""

from __future__ import annotations

import os

SECRET_KEY = "benchmark-only"
USE_TZ = True
# Its tasks.py is autodiscovered by rc_worker.
INSTALLED_APPS = ["redis_components", "benchmarks.workflow_apps"]
DATABASES: dict[str, dict[str, str]] = {}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "unix:///nonexistent.sock"),
    }
}
