"""Our conftest for python-redis-lock's ``tests/test_redis_lock.py`` (put next to it at
test time, in place of theirs, which starts a ``redis-server`` of its own).

Their tests connect to ``redis_socket``: the unix socket of our test server, whose TCP
address the Django settings name. Each test starts with an empty Redis. The module
``redis_lock`` they import is our shim (``tests/peer_locks/python_redis_lock/``), on
``PYTHONPATH`` for them and for the helper processes they start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from redis_components import locks


@pytest.fixture
def redis_socket() -> str:
    return os.environ["RC_TEST_REDIS_SOCKET"]


@pytest.fixture
def redis_server(redis_socket: str) -> Iterator[None]:
    client = redis.Redis(unix_socket_path=redis_socket)
    client.flushall()
    yield
    client.close()
    locks._held.set({})  # what a test left held is not held by this thread any more
