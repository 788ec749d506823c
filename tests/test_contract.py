"""The contract that every component follows (docs/contract.md): one test per rule.

Locks and semaphores are leases: they acquire, renew and release the same way, and
the forms of 0.1 that broke a rule keep working, with a DeprecationWarning, until 0.3.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.test import override_settings

import redis_components
from conftest import CommandCount
from redis_components import RedisLock, RedisSemaphore, redis_lock, redis_semaphore
from redis_components.connection import aclose_async_client
from redis_components.exceptions import (
    InvalidInput,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    SemaphoreLost,
    SemaphoreNotAcquired,
    SemaphoreNotOwned,
)

# A lease of each kind: how to make one (limit 1, so a second acquire is refused),
# and what its scope raises when busy and when the lease is gone.
KINDS: dict[str, tuple[Callable[..., Any], Callable[..., Any], type, type]] = {
    "lock": (
        lambda name, **kw: RedisLock(name, **kw),
        lambda name, **kw: redis_lock(name, **kw),
        LockNotAcquired,
        LockNotOwned,
    ),
    "semaphore": (
        lambda name, **kw: RedisSemaphore(name, 1, **kw),
        lambda name, **kw: redis_semaphore(name, 1, **kw),
        SemaphoreNotAcquired,
        SemaphoreNotOwned,
    ),
}
EACH_KIND = pytest.mark.parametrize("kind", list(KINDS))
SHORT_WAIT = {"LOCK_BLOCKING_TIMEOUT": 0.3, "SEMAPHORE_BLOCKING_TIMEOUT": 0.3}


def make(kind: str, name: str, **options: Any) -> Any:
    return KINDS[kind][0](name, **options)


def scope(kind: str, name: str, **options: Any) -> Any:
    return KINDS[kind][1](name, **options)


def busy_error(kind: str) -> type:
    return KINDS[kind][2]


def gone_error(kind: str) -> type:
    return KINDS[kind][3]


def held_elsewhere(kind: str, name: str) -> Any:
    """A lease on ``name`` taken by another thread (a lock knows its own thread's)."""
    taken: list[Any] = []
    thread = threading.Thread(target=lambda: taken.append(make(kind, name).acquire(blocking=False)))
    thread.start()
    thread.join(5)
    assert taken[0] is not None
    return taken[0]


# -- acquire ---------------------------------------------------------------------------


def test_a_lock_waits_by_default_up_to_its_blocking_timeout_setting() -> None:
    held_elsewhere("lock", "waits")
    with override_settings(REDIS_COMPONENTS=SHORT_WAIT):
        started = time.monotonic()
        assert RedisLock("waits").acquire() is None
        assert time.monotonic() - started >= 0.3


def test_a_semaphore_waits_with_blocking_true_up_to_its_setting() -> None:
    held = RedisSemaphore("waits", 1).acquire(blocking=False)
    assert held is not None
    with override_settings(REDIS_COMPONENTS=SHORT_WAIT):
        started = time.monotonic()
        assert RedisSemaphore("waits", 1).acquire(blocking=True) is None
        assert time.monotonic() - started >= 0.3


def test_a_semaphore_without_blocking_tries_once_and_warns_of_the_new_default() -> None:
    held = RedisSemaphore("once", 1).acquire(blocking=False)
    assert held is not None
    with pytest.warns(DeprecationWarning, match="waits by default"):
        assert RedisSemaphore("once", 1).acquire() is None
    with pytest.warns(DeprecationWarning, match="waits by default"):
        assert asyncio.run(_aacquire_and_close(RedisSemaphore("once", 1))) is None
    with pytest.warns(DeprecationWarning, match="waits by default"):
        guard = redis_semaphore("once", 1)
    with pytest.raises(SemaphoreNotAcquired), guard:
        pass  # pragma: no cover - never entered


async def _aacquire_and_close(sem: RedisSemaphore) -> Any:
    try:
        return await sem.aacquire()
    finally:
        await aclose_async_client()


@EACH_KIND
def test_blocking_timeout_0_tries_once(kind: str) -> None:
    held_elsewhere(kind, "zero")
    started = time.monotonic()
    assert make(kind, "zero").acquire(blocking=True, blocking_timeout=0) is None
    with pytest.raises(busy_error(kind)), scope(kind, "zero", blocking_timeout=0, blocking=True):
        pass  # pragma: no cover - never entered
    assert time.monotonic() - started < 1


def test_blocking_timeout_0_on_a_lock_this_thread_holds_is_busy_not_a_deadlock() -> None:
    held = RedisLock("mine").acquire(blocking=False)
    assert held is not None
    assert RedisLock("mine").acquire(blocking=True, blocking_timeout=0) is None
    with pytest.raises(LockNotAcquired), redis_lock("mine", blocking_timeout=0):
        pass  # pragma: no cover - never entered
    held.release()


@EACH_KIND
def test_blocking_timeout_inf_waits_without_a_limit(kind: str) -> None:
    held = held_elsewhere(kind, "forever")
    threading.Timer(0.3, held.release).start()
    got = make(kind, "forever").acquire(blocking=True, blocking_timeout=math.inf)
    assert got is not None
    got.release()


@EACH_KIND
@pytest.mark.parametrize("value", [-1, math.nan, True, "5", -math.inf])
def test_a_bad_blocking_timeout_is_refused_before_any_redis_call(
    kind: str, value: object, count_commands: CommandCount
) -> None:
    with count_commands as counted:
        with pytest.raises(InvalidInput) as info:
            make(kind, "bad").acquire(blocking=True, blocking_timeout=value)
        assert info.value.field == "blocking_timeout"
        with pytest.raises(InvalidInput) as info:
            scope(kind, "bad", blocking=True, blocking_timeout=value)
        assert info.value.field == "blocking_timeout"
    assert counted.sent == 0


# -- release ---------------------------------------------------------------------------


@EACH_KIND
def test_release_returns_none_and_raises_not_owned_when_the_lease_is_gone(kind: str) -> None:
    handle = make(kind, "gone", timeout=0.2).acquire(blocking=False)
    assert handle.release() is None
    with pytest.raises(gone_error(kind), match="released"):
        handle.release()  # twice
    expired = make(kind, "gone", timeout=0.2).acquire(blocking=False)
    time.sleep(0.3)
    with pytest.raises(gone_error(kind)):
        expired.release()
    assert expired.lost


@pytest.mark.parametrize(("kind", "lost"), [("lock", LockLost), ("semaphore", SemaphoreLost)])
def test_a_scope_raises_lost_at_the_end_of_a_block_that_lost_its_lease(
    kind: str, lost: type
) -> None:
    assert issubclass(lost, gone_error(kind))  # so one except clause catches both
    with pytest.raises(lost), scope(kind, "brief", timeout=0.1, blocking=False):
        time.sleep(0.2)


def test_a_with_block_on_a_lock_object_ends_as_the_scope_does() -> None:
    with pytest.raises(LockLost), RedisLock("brief", timeout=0.1):
        time.sleep(0.2)
    # An exception of the block is not hidden by the lost lease.
    with pytest.raises(KeyError):
        _raise_after_the_lease(RedisLock("brief", timeout=0.1))


def _raise_after_the_lease(lock: RedisLock) -> None:
    with lock:
        time.sleep(0.2)
        raise KeyError("the block's own")


def test_the_0_1_release_of_a_semaphore_returns_a_bool_and_warns() -> None:
    sem = RedisSemaphore("old", 1)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    with pytest.warns(DeprecationWarning, match=r"permit\.release\(\)"):
        assert sem.release(permit) is True
    with pytest.warns(DeprecationWarning, match=r"permit\.release\(\)"):
        assert sem.release(permit) is False


# -- renew -----------------------------------------------------------------------------


def _lease_left(kind: str, name: str, r: redis.Redis, handle: Any) -> float:
    """Seconds left on the lease of ``handle``, as the server counts them."""
    if kind == "lock":
        return int(r.pttl(f"rc:lock:{{{name}}}")) / 1000
    seconds, micros = r.time()
    score = r.zscore(f"rc:sem:{{{name}}}", handle.token)
    assert score is not None
    return handle.semaphore.timeout - (seconds * 1000 + micros // 1000 - score) / 1000


@EACH_KIND
def test_renew_restarts_the_lease_and_raises_not_owned_when_it_is_gone(
    kind: str, r: redis.Redis
) -> None:
    handle = make(kind, "renewed", timeout=2).acquire(blocking=False)
    time.sleep(0.5)
    assert _lease_left(kind, "renewed", r, handle) < 1.8
    assert handle.renew() is None
    assert _lease_left(kind, "renewed", r, handle) > 1.8
    handle.release()
    with pytest.raises(gone_error(kind)):
        handle.renew()


@EACH_KIND
def test_arenew_and_arelease_are_the_async_forms(kind: str) -> None:
    async def scenario() -> None:
        try:
            handle = await make(kind, "async", timeout=2).aacquire(blocking=False)
            await handle.arenew()
            await handle.arelease()
            with pytest.raises(gone_error(kind)):
                await handle.arelease()
        finally:
            await aclose_async_client()

    asyncio.run(scenario())


@EACH_KIND
def test_auto_renew_keeps_the_lease_while_the_process_lives(kind: str) -> None:
    handle = make(kind, "kept", timeout=0.3, auto_renew=True).acquire(blocking=False)
    time.sleep(0.8)
    assert make(kind, "kept").acquire(blocking=False) is None
    handle.release()


def test_the_0_1_names_of_renewal_work_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match="auto_renew"):
        sem = RedisSemaphore("old", 1, timeout=5, auto_refresh=True)
    assert sem.auto_renew
    with pytest.warns(DeprecationWarning, match="auto_renew"):
        redis_semaphore("old", 1, auto_refresh=True, blocking=False)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    with pytest.warns(DeprecationWarning, match=r"permit\.renew\(\)"):
        assert sem.refresh(permit) is True
    permit.release()
    handle = RedisLock("old", timeout=5).acquire(blocking=False)
    assert handle is not None
    with pytest.warns(DeprecationWarning, match=r"renew\(\)"):
        handle.extend()
    handle.extend(1)  # redis-py's form, with the time to add, is not deprecated
    handle.release()


# -- values ----------------------------------------------------------------------------


def test_no_public_value_is_a_tuple_list_dict_or_str_and_every_dataclass_is_frozen() -> None:
    exported = [getattr(redis_components, name) for name in redis_components.__all__]
    classes = [obj for obj in exported if isinstance(obj, type)]
    values = [cls for cls in classes if not issubclass(cls, BaseException)]
    for cls in values:
        assert not issubclass(cls, (tuple, list, dict, str)), cls
        if dataclasses.is_dataclass(cls):
            assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
    assert sum(dataclasses.is_dataclass(cls) for cls in values) >= 9  # the values are some
