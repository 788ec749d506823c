"""Django settings for redis_components' worker in the benchmark (BENCH_REDIS_URL)."""

from __future__ import annotations

import os

SECRET_KEY = "benchmark-only"
USE_TZ = True
INSTALLED_APPS = ["redis_components", "benchmarks.queue_apps"]  # its tasks.py is autodiscovered
DATABASES: dict[str, dict[str, str]] = {}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("BENCH_REDIS_URL", "unix:///nonexistent.sock"),
    }
}
