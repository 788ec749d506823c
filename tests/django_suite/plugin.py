"""A pytest plugin for running Django's ``tests/tasks`` against our backend.

Django's tests name its test-only backends in ``override_settings(TASKS=...)``; this
plugin makes Django build ours in their place (``adapter.py``), and gives every test
an empty Redis, as our own suite does. Nothing in Django's tests is changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

REPLACED = {
    "django.tasks.backends.dummy.DummyBackend": "tests.django_suite.adapter.EnqueueOnly",
    "django.tasks.backends.immediate.ImmediateBackend": "tests.django_suite.adapter.RunAtOnce",
}


def pytest_configure(config: pytest.Config) -> None:
    from django.tasks import TaskBackendHandler

    create = TaskBackendHandler.create_connection

    def create_ours(self: TaskBackendHandler, alias: str) -> Any:
        params = self.settings[alias]
        backend = REPLACED.get(params.get("BACKEND"))
        if backend is not None:
            self.settings[alias] = {**params, "BACKEND": backend}
        return create(self, alias)

    TaskBackendHandler.create_connection = create_ours  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _empty_redis() -> None:
    url = os.environ["RC_TEST_REDIS_URL"]
    client = redis.RedisCluster.from_url(url) if os.environ.get("RC_TEST_CLUSTER") else None
    client = client or redis.Redis.from_url(url)
    client.flushall()
    client.close()


@pytest.fixture(autouse=True)
def _worker_may_check_db_connections(django_db_blocker: Any) -> Iterator[None]:
    """Our worker calls close_old_connections() around each task, as Django does
    around requests; that looks at the connections a test database left open."""
    with django_db_blocker.unblock():
        yield
