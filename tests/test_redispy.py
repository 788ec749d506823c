"""The fast paths that read redis-py's private attributes (``redispy.py``), and their
fallbacks when a redis-py release renames them: slower, never wrong."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from conftest import CLUSTER
from redis_components import LockHandle, RedisLock, redispy
from redis_components.connection import get_client
from redis_components.tasks.waker import Waker


@pytest.fixture(params=["attributes known", "attributes renamed"])
def attributes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "attributes renamed":
        monkeypatch.setattr(redispy, "TRANSPORT_ATTRIBUTES", ("_renamed",))
        monkeypatch.setattr(redispy, "SOCKET_ATTRIBUTE", "_renamed")
    return str(request.param)


def hold_elsewhere(name: str) -> LockHandle:
    """Acquire in another thread, as another holder would (ours would be re-entering)."""
    got: list[LockHandle | None] = []
    thread = threading.Thread(target=lambda: got.append(RedisLock(name, 10).acquire()))
    thread.start()
    thread.join()
    assert got[0] is not None
    return got[0]


def remembered_id(client: redis.Redis) -> int | None:
    """The id the adapter keeps for the connection a wait on ``client`` just used (the
    pool hands out the one released last)."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        return redispy.known_client_id(connection)
    finally:
        pool.release(connection)


def test_a_lock_wait_ends_on_release_and_at_its_deadline(attributes: str, redis_mode: str) -> None:
    holder = hold_elsewhere("adapter")
    for _ in range(2):
        started = time.monotonic()
        assert RedisLock("adapter").acquire(blocking_timeout=0.2) is None
        assert 0.2 <= time.monotonic() - started < 1.5
    if not CLUSTER:  # one pool: the connection the waits used
        # Known: the connection's id is kept (asked once per connection); renamed: it
        # is asked again before every wait.
        remembered = remembered_id(get_client())
        assert (remembered is not None) is (attributes == "attributes known")
    got: list[object] = []
    waiter = threading.Thread(
        target=lambda: got.append(RedisLock("adapter").acquire(blocking_timeout=5))
    )
    waiter.start()
    time.sleep(0.2)
    holder.release()
    waiter.join(5)
    [handle] = got
    assert handle is not None


def test_an_async_lock_wait_ends_at_its_deadline(attributes: str) -> None:
    async def wait() -> float:
        started = time.monotonic()
        assert await RedisLock("adapter-async").aacquire(blocking_timeout=0.2) is None
        return time.monotonic() - started

    holder = hold_elsewhere("adapter-async")
    try:
        assert 0.2 <= asyncio.run(wait()) < 1.5
    finally:
        holder.release()


def test_an_idle_worker_wakes_on_a_message(attributes: str, r: redis.Redis) -> None:
    client = get_client()
    waker = Waker(["rc-adapter-test"])
    try:
        waker.wait(client, 5)  # subscribes
        started = time.monotonic()  # (before the timer: the message comes 0.3 s after)
        threading.Timer(0.3, lambda: r.publish("rc-adapter-test", "x")).start()
        while time.monotonic() - started < 5:  # a poll may return before the message
            waker.wait(client, 5)
            if time.monotonic() - started >= 0.3:
                break
        assert time.monotonic() - started < 1.5
    finally:
        waker.close()
