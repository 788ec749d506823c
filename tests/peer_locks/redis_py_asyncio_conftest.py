"""Our conftest for redis-py's ``tests/test_asyncio/test_lock.py`` (put next to it at
test time): asyncio clients of our test server for the fixtures they use."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest_asyncio
import redis.asyncio


@pytest_asyncio.fixture
async def create_redis() -> AsyncIterator[Callable[..., Awaitable[redis.asyncio.Redis]]]:
    clients: list[redis.asyncio.Redis] = []

    async def create(**kwargs: Any) -> redis.asyncio.Redis:
        clients.append(redis.asyncio.Redis.from_url(os.environ["RC_TEST_REDIS_URL"], **kwargs))
        return clients[-1]

    yield create
    for client in clients:
        await client.aclose()


@pytest_asyncio.fixture
async def r(create_redis: Callable[..., Awaitable[redis.asyncio.Redis]]) -> redis.asyncio.Redis:
    return await create_redis()
