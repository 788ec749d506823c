"""Our conftest for redis-py's ``tests/test_lock.py`` (put next to it at test time).

It gives their tests the fixtures they use (``r``, ``_get_client``) on our test server,
an empty Redis for each test, and our lock in place of ``redis.lock.Lock``, which their
test module imports after this file is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.lock
import redis.lock

from redis_components import locks
from tests.peer_locks.redis_py import AsyncLock, Lock

redis.lock.Lock = Lock  # type: ignore[misc]
redis.asyncio.lock.Lock = AsyncLock  # type: ignore[misc]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "onlynoncluster: redis-py's mark for tests of one server")


def _get_client(cls: type[redis.Redis], request: pytest.FixtureRequest, **kwargs: Any) -> Any:
    client = cls.from_url(os.environ["RC_TEST_REDIS_URL"], **kwargs)
    request.addfinalizer(client.close)
    return client


@pytest.fixture
def r(request: pytest.FixtureRequest) -> Any:
    return _get_client(redis.Redis, request)


@pytest.fixture(autouse=True)
def _empty_redis() -> Iterator[None]:
    """An empty Redis for each test; and no lock held by this thread, which a failed
    test would otherwise leave held (this thread's locks are known without asking
    Redis, so that nesting is noticed)."""
    client = redis.Redis.from_url(os.environ["RC_TEST_REDIS_URL"])
    client.flushall()
    yield
    client.close()
    locks._held.set({})
