from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from typing import Any

import pytest
import redis
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from conftest import CommandCount
from redis_components.connection import aclose_async_client, get_client
from redis_components.exceptions import (
    InvalidInput,
    SemaphoreError,
    SemaphoreNotAcquired,
    SemaphoreNotOwned,
)
from redis_components.semaphores import Permit, RedisSemaphore, redis_semaphore
from tests.processes import FORK, run_processes
from tests.test_locks import CountingFails, counting_fails

FAIRNESS = pytest.mark.parametrize("fair", [True, False], ids=["fair", "basic"])


def _keys(r: redis.Redis, name: str) -> tuple[set[bytes], set[bytes]]:
    holders = set(r.zrange(f"rc:sem:{{{name}}}", 0, -1))
    owners = set(r.zrange(f"rc:sem:{{{name}}}:owners", 0, -1))
    return holders, owners


@FAIRNESS
def test_acquire_up_to_the_limit_then_none(fair: bool, redis_mode: str) -> None:
    sem = RedisSemaphore("api", limit=3, timeout=10, fair=fair)
    permits = [sem.acquire(blocking=False) for _ in range(3)]
    assert all(isinstance(permit, Permit) for permit in permits)
    assert sem.holders() == 3
    started = time.monotonic()
    assert sem.acquire(blocking=False) is None  # the book's "system busy", at once
    assert time.monotonic() - started < 1
    first = permits[0]
    assert first is not None
    first.release()
    with pytest.raises(SemaphoreNotOwned, match="already released"):
        first.release()
    assert sem.holders() == 2
    assert sem.acquire(blocking=False) is not None


def test_fair_permits_carry_growing_counters(r: redis.Redis) -> None:
    sem = RedisSemaphore("counted", limit=2)
    a, b = sem.acquire(blocking=False), sem.acquire(blocking=False)
    assert a is not None
    assert b is not None
    assert b.counter == a.counter + 1
    assert _keys(r, "counted") == ({a.token.encode(), b.token.encode()},) * 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "", "limit": 1}, "name"),
        ({"name": "x\x07", "limit": 1}, "name"),
        ({"name": "ok", "limit": 0}, "limit"),
        ({"name": "ok", "limit": 2.5}, "limit"),
        ({"name": "ok", "limit": True}, "limit"),
        ({"name": "ok", "limit": 1, "timeout": 0}, "timeout"),
        ({"name": "ok", "limit": 1, "timeout": "10"}, "timeout"),
    ],
)
def test_bad_input_is_refused_before_any_redis_call(
    kwargs: dict[str, Any], field: str, count_commands: CommandCount
) -> None:
    with count_commands as counted:
        with pytest.raises(InvalidInput) as info:
            RedisSemaphore(**kwargs)
        assert info.value.field == field
        with pytest.raises(InvalidInput) as info:
            redis_semaphore(**kwargs)
        assert info.value.field == field
    assert counted.sent == 0


@FAIRNESS
def test_a_dead_holders_permit_frees_after_its_timeout(fair: bool) -> None:
    sem = RedisSemaphore("short", limit=1, timeout=0.2, fair=fair)
    assert sem.acquire(blocking=False) is not None  # and never released, as if its process died
    assert sem.acquire(blocking=False) is None
    time.sleep(0.25)
    assert sem.acquire(blocking=False) is not None


def test_owners_follow_holders_when_permits_expire(r: redis.Redis) -> None:
    # Margins of a second, so that a loaded machine's late wake-up cannot
    # move a permit to the wrong side of its expiry.
    sem = RedisSemaphore("expiring", limit=3, timeout=2.0, fair=True)
    assert sem.acquire(blocking=False) is not None  # the first permit
    time.sleep(1.2)
    second = sem.acquire(blocking=False)
    time.sleep(1.0)  # the first expired, the second has about 1 s left
    third = sem.acquire(blocking=False)  # sweeps the first from both ZSETs
    assert second is not None
    assert third is not None
    assert _keys(r, "expiring") == ({second.token.encode(), third.token.encode()},) * 2
    time.sleep(1.2)  # the second expired, the third has about 0.8 s left
    third.release()  # sweeps the second from both ZSETs
    assert _keys(r, "expiring") == (set(), set())


@FAIRNESS
def test_renew_keeps_a_permit_past_its_timeout(fair: bool, r: redis.Redis) -> None:
    sem = RedisSemaphore("refreshed", limit=1, timeout=1.0, fair=fair)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    for _ in range(4):  # 1.6 s in all, each renewal with 0.6 s to spare
        time.sleep(0.4)
        permit.renew()
    assert sem.acquire(blocking=False) is None
    time.sleep(1.1)
    with pytest.raises(SemaphoreNotOwned, match="expired before it was renewed"):
        permit.renew()
    assert permit.lost
    assert _keys(r, "refreshed") == (set(), set())  # no trace in either ZSET


def test_blocking_acquire_is_woken_by_a_release(redis_mode: str) -> None:
    sem = RedisSemaphore("wake", limit=1, timeout=10)
    holder = sem.acquire(blocking=False)
    assert holder is not None
    got: list[Permit | None] = []
    thread = threading.Thread(target=lambda: got.append(sem.acquire(True, blocking_timeout=5)))
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()
    holder.release()
    thread.join(5)
    assert got[0] is not None
    assert sem.holders() == 1


@FAIRNESS
def test_blocking_acquire_gives_up_after_its_timeout(fair: bool) -> None:
    sem = RedisSemaphore("full", limit=1, timeout=10, fair=fair)
    assert sem.acquire(blocking=False) is not None
    started = time.monotonic()
    assert sem.acquire(blocking=True, blocking_timeout=0.3) is None
    assert time.monotonic() - started >= 0.3


def test_fair_semaphore_admits_waiters_in_the_order_they_asked() -> None:
    sem = RedisSemaphore("queue", limit=1, timeout=30)
    holder = sem.acquire(blocking=False)
    assert holder is not None
    order: list[int] = []
    permits: dict[int, Permit] = {}

    def wait(n: int) -> None:
        permit = sem.acquire(blocking=True, blocking_timeout=20)
        assert permit is not None
        order.append(n)
        permits[n] = permit

    threads = []
    for n in range(5):
        thread = threading.Thread(target=wait, args=(n,))
        thread.start()
        threads.append(thread)
        time.sleep(0.1)  # so that they ask in this order
    holder.release()
    for n in range(5):
        deadline = time.monotonic() + 10
        while n not in permits and time.monotonic() < deadline:
            time.sleep(0.01)
        permits[n].release()
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3, 4]


@FAIRNESS
@pytest.mark.parametrize("limit", [1, 2])
def test_a_granted_waiter_leaves_no_registration_behind(fair: bool, limit: int) -> None:
    sem = RedisSemaphore("served", limit=limit, timeout=30, fair=fair)
    holders = [sem.acquire(blocking=False) for _ in range(limit)]
    got: list[Permit | None] = []
    waiter = threading.Thread(target=lambda: got.append(sem.acquire(True, blocking_timeout=10)))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive()
    first, *others = holders
    assert first is not None
    first.release()
    waiter.join(5)
    assert got[0] is not None
    for permit in others:  # releases while the served waiter holds its permit
        assert permit is not None
        permit.release()
    got[0].release()  # at once, well within the wait it had asked for
    # Every permit is free: none was handed to a waiter that is no longer waiting.
    assert all(sem.acquire(blocking=False) is not None for _ in range(limit))
    assert sem.holders() == limit


def test_auto_renew_keeps_the_permit_and_reports_loss(r: redis.Redis) -> None:
    lost = threading.Event()
    sem = RedisSemaphore(
        "kept", limit=1, timeout=0.3, auto_renew=True, on_lost=lambda p: lost.set()
    )
    permit = sem.acquire(blocking=False)
    assert permit is not None
    time.sleep(0.8)
    assert sem.acquire(blocking=False) is None  # still held
    r.zrem("rc:sem:{kept}", permit.token)  # taken away behind its back
    assert lost.wait(2)
    assert permit.lost


def test_context_manager_raises_when_full() -> None:
    with redis_semaphore("cm", limit=1, blocking=False) as permit:
        assert isinstance(permit, Permit)
        with (
            pytest.raises(SemaphoreNotAcquired, match="'cm' is full"),
            redis_semaphore("cm", limit=1, blocking=False),
        ):
            pass
    with redis_semaphore("cm", limit=1, blocking=False):
        pass


def test_context_manager_reports_an_expired_permit() -> None:
    with (
        pytest.raises(SemaphoreNotOwned),
        redis_semaphore("brief", limit=1, timeout=0.1, blocking=False),
    ):
        time.sleep(0.2)


@redis_semaphore("export:{user}", limit=1, timeout=8, blocking=False)
def export(request: HttpRequest) -> HttpResponse:
    return HttpResponse("exported")


def test_view_answers_429_with_retry_after_when_full() -> None:
    request = RequestFactory().get("/export/", HTTP_ACCEPT="application/json")
    request.user = AnonymousUser()
    assert export(request).status_code == 200
    holder = RedisSemaphore("export:anonymous", limit=1, timeout=8).acquire(blocking=False)
    assert holder is not None
    response = export(request)
    assert response.status_code == 429
    assert response["Retry-After"] == "8"
    assert json.loads(response.content)["semaphore"] == "export:anonymous"


def test_decorator_template_needs_its_fields() -> None:
    @redis_semaphore("job:{missing}", limit=1, blocking=False)
    def job(n: int) -> None:
        pass

    with pytest.raises(SemaphoreError, match="missing"):
        job(1)


def test_async_api(redis_mode: str) -> None:
    async def scenario() -> list[object]:
        sem = RedisSemaphore("async", limit=1, timeout=10)
        permit = await sem.aacquire(blocking=False)
        assert permit is not None
        waiter = asyncio.ensure_future(sem.aacquire(blocking=True, blocking_timeout=5))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await permit.arenew()
        await permit.arelease()
        second = await waiter
        assert second is not None
        await second.arelease()

        @redis_semaphore("async:{n}", limit=1, blocking=False)
        async def work(n: int) -> int:
            return RedisSemaphore(f"async:{n}", limit=1).holders()

        result = await work(2)
        await aclose_async_client()
        return [second.counter - permit.counter, result]

    assert asyncio.run(scenario()) == [1, 1]


# -- real processes ------------------------------------------------------------------


KEEP_MAX = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or 0) then
  redis.call('SET', KEYS[1], ARGV[1])
end
"""


def _use_the_api(fair: bool, skew: float, seconds: float) -> None:
    real_time = time.time
    time.time = lambda: real_time() + skew  # a client whose clock is off
    client = get_client()
    sem = RedisSemaphore("limited", limit=3, timeout=5, fair=fair)
    rng = random.Random(os.getpid())
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        permit = sem.acquire(blocking=True, blocking_timeout=10)
        assert permit is not None
        inside = client.incr("inside")
        client.eval(KEEP_MAX, 1, "most", inside)
        time.sleep(rng.uniform(0, 0.005))
        client.decr("inside")
        client.incr("acquired")
        permit.release()  # SemaphoreNotOwned if it was taken away while held


@FAIRNESS
def test_16_processes_never_exceed_the_limit_even_with_skewed_clocks(
    fair: bool, r: redis.Redis
) -> None:
    skews = [0, 5, -5, 0] * 4
    run_processes(_use_the_api, [(fair, skew, 2.0) for skew in skews], timeout=60)
    assert int(r.get("most") or 0) == 3
    assert int(r.get("acquired") or 0) > 100
    assert r.get("inside") == b"0"


def _hold_forever(ready: Any) -> None:
    permit = RedisSemaphore("crash", limit=1, timeout=0.5).acquire(blocking=False)
    assert permit is not None
    ready.send(time.monotonic())
    time.sleep(60)


def test_a_waiter_gets_a_killed_holders_permit_when_it_expires() -> None:
    parent, child = FORK.Pipe()
    holder = FORK.Process(target=_hold_forever, args=(child,))
    holder.start()
    acquired_at = parent.recv()
    os.kill(holder.pid or 0, signal.SIGKILL)
    holder.join()
    permit = RedisSemaphore("crash", limit=1, timeout=0.5).acquire(True, blocking_timeout=5)
    assert permit is not None
    late = time.monotonic() - (acquired_at + 0.5)
    assert late < 0.1, f"got the permit {late * 1000:.0f} ms after it expired"


def test_one_guard_shared_by_threads_gives_each_exit_its_own_permit() -> None:
    guard = redis_semaphore("shared-guard", limit=2, timeout=10, blocking=False)
    permits: dict[str, Permit] = {}
    seen: dict[str, bool] = {}  # what the second thread saw once the first had left
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with guard as permit:
            permits["first"] = permit
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with guard as permit:
            permits["second"] = permit
            second_in.set()
            first_out.wait(5)
            seen["first released"] = permits["first"].released
            seen["second released"] = permit.released

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)
    assert seen == {"first released": True, "second released": False}
    assert permits["second"].released
    assert RedisSemaphore("shared-guard", limit=2).holders() == 0


def test_one_guard_shared_by_asyncio_tasks_gives_each_exit_its_own_permit() -> None:
    guard = redis_semaphore("shared-guard", limit=2, timeout=10, blocking=False)

    async def hold(seconds: float) -> Permit:
        async with guard as permit:
            await asyncio.sleep(seconds)
        assert permit.released
        return permit

    async def scenario() -> tuple[Permit, Permit]:
        try:
            first = asyncio.ensure_future(hold(0.1))
            await asyncio.sleep(0.05)
            second = await hold(0.3)  # enters second, leaves last
            return await first, second
        finally:
            await aclose_async_client()

    first, second = asyncio.run(scenario())
    assert first.token != second.token
    assert RedisSemaphore("shared-guard", limit=2).holders() == 0


@FAIRNESS
@pytest.mark.parametrize("waits", [False, True], ids=["free", "handed-over"])
def test_an_exception_after_the_grant_gives_the_permit_back(fair: bool, waits: bool) -> None:
    sem = RedisSemaphore("after-grant", limit=1, timeout=30, fair=fair, auto_renew=True)
    if waits:  # the permit comes free (fair: is handed over) while the acquire waits
        holder = sem.acquire(blocking=False)
        assert holder is not None
        threading.Timer(0.2, holder.release).start()
    with counting_fails(), pytest.raises(CountingFails):
        sem.acquire(blocking=True, blocking_timeout=5)
    # Free for the next one (fair, handed over: the grant the release handed on, which the
    # failed acquire's registration, still alive, would have taken)
    assert sem.acquire(blocking=True, blocking_timeout=2) is not None


def test_an_exception_after_the_grant_gives_the_permit_back_async() -> None:
    sem = RedisSemaphore("after-grant", limit=1, timeout=30)

    async def scenario() -> None:
        with pytest.raises(CountingFails):
            await sem.aacquire(blocking=False)
        with pytest.raises(CountingFails):
            async with redis_semaphore("after-grant", 1, timeout=30, blocking=False):
                pass  # pragma: no cover - never entered
        await aclose_async_client()

    with counting_fails():
        asyncio.run(scenario())
    assert sem.acquire(blocking=True, blocking_timeout=2) is not None
