from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import AsyncRequestFactory, RequestFactory, override_settings

from conftest import CLUSTER, CommandCount, single_server_only
from redis_components import locks, metrics
from redis_components.connection import (
    aclose_async_client,
    get_async_client,
    get_client,
    node_client,
    text,
)
from redis_components.exceptions import (
    ConfigurationError,
    InvalidInput,
    LockAlreadyHeld,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
)
from redis_components.locks import (
    Busy,
    LockGroup,
    LockHandle,
    RedisLock,
    fenced_get,
    fenced_set,
    fenced_update,
    redis_lock,
)
from redis_components.semaphores import RedisSemaphore
from tests.processes import FORK, run_processes, wait_until
from tests.testapp.models import Document


@pytest.fixture(autouse=True)
def _no_held_locks() -> None:
    """Tests share one thread; start each without locks held by an earlier test."""
    locks._held.set({})


def hold_elsewhere(name: str, timeout: float = 5) -> LockHandle:
    """Acquire in another thread, as another holder would (our thread would be nesting)."""
    got: list[LockHandle | None] = []
    thread = threading.Thread(target=lambda: got.append(RedisLock(name, timeout).acquire()))
    thread.start()
    thread.join()
    assert got[0] is not None
    return got[0]


def _held(name: str) -> bool:
    return get_client().exists(f"rc:lock:{{{name}}}") == 1


def test_acquire_release_and_handle(redis_mode: str) -> None:
    handle = RedisLock("market:item:42", timeout=5).acquire()
    assert isinstance(handle, LockHandle)
    assert handle.name == "market:item:42"
    assert len(handle.token) == 32
    seconds, micros = get_client().time()
    assert 0 < seconds * 1_000_000 + micros - handle.fence < 1_000_000  # a new name: the clock
    assert not handle.lost
    assert _held("market:item:42")
    handle.check()
    handle.release()
    assert not _held("market:item:42")
    again = RedisLock("market:item:42").acquire()
    assert again is not None
    assert again.fence == handle.fence + 1
    again.release()


def test_fence_counters_expire_and_fences_still_grow(r: redis.Redis) -> None:
    for n in range(50):  # names used once, as failed purchases of new items use them
        RedisLock(f"once:{n}", timeout=5).acquire().release()
    fences = r.keys("rc:lock:*:fence")
    assert len(fences) == 50
    assert all(0 < r.pttl(fence) <= 5_000 + 3_600_000 for fence in fences)  # none forever
    first = RedisLock("kept", timeout=5).acquire()
    first.release()
    r.pexpire("rc:lock:{kept}:fence", 60_000)
    second = RedisLock("kept", timeout=5).acquire()
    second.release()
    # The counter's hour counts from its creation: later grants do not prolong it.
    assert 0 < r.pttl("rc:lock:{kept}:fence") <= 60_000
    r.pexpire("rc:lock:{kept}:fence", 1)  # as its hour running out would
    time.sleep(0.01)
    assert not r.exists("rc:lock:{kept}:fence")
    third = RedisLock("kept", timeout=5).acquire()
    third.release()
    assert first.fence < second.fence < third.fence
    # handed over to a waiter across the expiry too
    holder = RedisLock("kept", timeout=5).acquire()
    r.pexpire("rc:lock:{kept}:fence", 1)
    time.sleep(0.01)
    waiter: list[LockHandle | None] = []
    thread = threading.Thread(
        target=lambda: waiter.append(RedisLock("kept", timeout=5).acquire(blocking_timeout=5))
    )
    thread.start()
    time.sleep(0.2)  # blocked
    holder.release()
    thread.join()
    assert waiter[0] is not None
    assert holder.fence > third.fence
    assert waiter[0].fence > holder.fence
    waiter[0].release()


def test_lock_keys_share_one_hash_tag(r: redis.Redis) -> None:
    lock = RedisLock("order:7")
    assert lock.keys == [
        "rc:lock:{order:7}",
        "rc:lock:{order:7}:fence",
        "rc:lock:{order:7}:waiters",
        "rc:lock:{order:7}:grant",
    ]


def test_uncontended_acquire_and_release_are_two_round_trips(
    count_commands: CommandCount,
) -> None:
    lock = RedisLock("rt", timeout=5)
    handle = lock.acquire()  # warm up: load the scripts, open the connection
    assert handle is not None
    handle.release()
    with count_commands as counted:
        handle = lock.acquire()
        assert handle is not None
        handle.release()
    assert counted.sent == 2, counted.commands


def test_non_blocking_fails_at_once_and_reports_the_lease() -> None:
    hold_elsewhere("busy", timeout=5)
    started = time.monotonic()
    assert RedisLock("busy").acquire(blocking=False) is None
    assert time.monotonic() - started < 1
    busy = redis_lock("busy", blocking=False)
    with pytest.raises(LockNotAcquired, match="'busy' is busy") as info:
        busy.__enter__()
    assert info.value.name == "busy"


def test_a_waiter_gets_the_lock_when_it_is_released(redis_mode: str) -> None:
    holder = hold_elsewhere("handoff", timeout=10)
    got: list[LockHandle | None] = []
    waiter = threading.Thread(target=lambda: got.append(RedisLock("handoff").acquire()))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive()
    holder.release()
    waiter.join(5)
    [handle] = got
    assert handle is not None
    assert handle.fence == holder.fence + 1
    handle.check()
    handle.release()
    assert not _held("handoff")


def test_a_waiter_gives_up_after_its_blocking_timeout() -> None:
    holder = hold_elsewhere("slow", timeout=10)
    started = time.monotonic()
    assert RedisLock("slow").acquire(blocking_timeout=0.3) is None
    assert time.monotonic() - started >= 0.3
    holder.release()
    # The waiter that gave up left no registration that would swallow the next release.
    assert not _held("slow")


def test_fences_grow_strictly_across_grants_and_handoffs() -> None:
    fences = []
    lock = RedisLock("fenced", timeout=5)
    for _ in range(3):
        handle = lock.acquire()
        assert handle is not None
        fences.append(handle.fence)
        handle.release()
    holder = lock.acquire()
    assert holder is not None
    got: list[LockHandle | None] = []
    waiter = threading.Thread(target=lambda: got.append(lock.acquire()))
    waiter.start()
    time.sleep(0.1)
    holder.release()
    waiter.join(5)
    assert got[0] is not None
    fences += [holder.fence, got[0].fence]
    assert fences == sorted(set(fences))
    got[0].release()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 1001}, "name"),
        ({"name": "a\tb"}, "name"),
        ({"name": 42}, "name"),
        ({"name": "ok", "timeout": 0}, "timeout"),
        ({"name": "ok", "timeout": -1}, "timeout"),
        ({"name": "ok", "timeout": "30"}, "timeout"),
        ({"name": "ok", "timeout": float("nan")}, "timeout"),
    ],
)
def test_bad_input_is_refused_before_any_redis_call(
    kwargs: dict[str, Any], field: str, count_commands: CommandCount
) -> None:
    with count_commands as counted, pytest.raises(InvalidInput) as info:
        RedisLock(**kwargs)
    assert info.value.field == field
    with count_commands as counted, pytest.raises(InvalidInput) as info:
        redis_lock(kwargs["name"], timeout=kwargs.get("timeout"))
    assert info.value.field == field
    assert counted.sent == 0


def test_bad_blocking_timeout_is_refused(count_commands: CommandCount) -> None:
    with count_commands as counted:
        with pytest.raises(InvalidInput, match="blocking_timeout"):
            RedisLock("ok").acquire(blocking_timeout=-1)
        with pytest.raises(InvalidInput, match="blocking_timeout"):
            redis_lock("ok", blocking_timeout=float("nan"))
    assert counted.sent == 0


def test_lost_lease_is_reported() -> None:
    handle = hold_elsewhere("short", timeout=0.1)
    time.sleep(0.15)
    other = RedisLock("short", timeout=5).acquire(blocking=False)
    assert other is not None
    with pytest.raises(LockLost):
        handle.check()
    assert handle.lost
    with pytest.raises(LockNotOwned):
        handle.renew()
    with pytest.raises(LockNotOwned):
        handle.release()
    other.check()  # the stale holder changed nothing
    other.release()


def test_extend_gives_a_new_lease() -> None:
    handle = hold_elsewhere("ext", timeout=0.2)
    handle.extend(5)
    time.sleep(0.3)
    handle.check()
    assert get_client().pttl("rc:lock:{ext}") > 4000
    handle.release()


def test_auto_renew_keeps_the_lease_and_reports_loss() -> None:
    lost = threading.Event()
    lock = RedisLock("renewed", timeout=0.3, auto_renew=True, on_lost=lambda h: lost.set())
    handle = lock.acquire()
    assert handle is not None
    time.sleep(0.8)  # more than twice the lease
    handle.check()
    get_client().delete("rc:lock:{renewed}")  # the lease is gone, e.g. after a failover
    assert lost.wait(2)
    assert handle.lost
    with pytest.raises(LockLost):
        handle.check()


def test_nested_acquisition_raises_at_once_unless_reentrant() -> None:
    with redis_lock("nest"):
        started = time.monotonic()
        with pytest.raises(LockError, match="already held"), redis_lock("nest"):
            pass
        assert time.monotonic() - started < 1
    with redis_lock("nest", reentrant=True) as outer:
        with redis_lock("nest", reentrant=True) as inner:
            assert inner is outer
        assert _held("nest")
    assert not _held("nest")


def test_a_handle_can_be_released_from_another_thread() -> None:
    handle = RedisLock("shared").acquire()
    assert handle is not None
    thread = threading.Thread(target=handle.release)
    thread.start()
    thread.join()
    assert not _held("shared")
    assert RedisLock("shared").acquire(blocking=False) is not None


def test_multi_lock_is_all_or_nothing() -> None:
    blocker = hold_elsewhere("b")
    with pytest.raises(LockNotAcquired), redis_lock("c", "b", "a", blocking_timeout=0.2):
        pass
    assert not _held("a")
    assert not _held("c")
    blocker.release()
    with redis_lock("c", "b", "a") as group:
        assert isinstance(group, LockGroup)
        assert [handle.name for handle in group] == ["a", "b", "c"]
        assert all(_held(name) for name in "abc")
        group.check()
    assert not any(_held(name) for name in "abc")


def test_a_busy_multi_lock_names_the_lock_that_was_held() -> None:
    blocker = hold_elsewhere("b")
    # Tried once, waited for, and on the async client: each names "b", not the first name.
    for blocking_timeout in (0, 0.05):
        scope = redis_lock("c", "b", "a", blocking_timeout=blocking_timeout)
        with pytest.raises(LockNotAcquired) as caught, scope:
            pass
        assert caught.value.name == "b"
        assert str(caught.value).startswith("Lock 'b' is busy (retry after ")
        assert "none of 'c', 'b', 'a' was taken" in str(caught.value)

    async def scenario() -> str | None:
        try:
            async with redis_lock("c", "b", "a", blocking=False):
                return None
        except LockNotAcquired as error:
            return error.name
        finally:
            await aclose_async_client()

    assert asyncio.run(scenario()) == "b"
    assert not _held("a")
    assert not _held("c")
    blocker.release()


def test_a_decorated_function_names_the_busy_lock_of_its_group() -> None:
    seen: list[Busy] = []

    @redis_lock("item:{n}", "buyer:{who}", blocking=False)
    def purchase(n: int, who: str) -> str:
        return "bought"

    @redis_lock("item:{n}", "buyer:{who}", blocking=False, on_busy=seen.append)
    def politely(n: int, who: str) -> str:
        return "bought"

    blocker = hold_elsewhere("buyer:ann")
    with pytest.raises(LockNotAcquired) as caught:
        purchase(45, "ann")
    assert caught.value.name == "buyer:ann"
    assert "'item:45', 'buyer:ann'" in str(caught.value)
    assert politely(45, "ann") is None
    [busy] = seen
    assert busy.names == ("item:45", "buyer:ann")
    assert busy.name == "buyer:ann"
    assert purchase(45, "bob") == "bought"
    blocker.release()


def test_context_manager_reports_a_lease_lost_inside_the_block() -> None:
    with pytest.raises(LockLost), redis_lock("brief", timeout=0.1):
        time.sleep(0.2)

    def lose_then_fail() -> None:
        with redis_lock("brief", timeout=0.1):
            time.sleep(0.2)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):  # the block's own error is not masked
        lose_then_fail()


def test_decorator_fills_names_from_the_call() -> None:
    seen = []

    @redis_lock("order:{order_id}:{kind}", timeout=5)
    def process(order_id: int, kind: str = "pay") -> str:
        seen.append(_held(f"order:{order_id}:{kind}"))
        return "done"

    assert process(7) == "done"
    assert process(order_id=8, kind="ship") == "done"
    assert seen == [True, True]

    @redis_lock("order:{missing}")
    def broken(order_id: int) -> None:
        pass

    with pytest.raises(LockError, match="missing"):
        broken(1)


def test_decorator_on_busy_decides_the_result() -> None:
    calls: list[Busy] = []

    @redis_lock("job:{n}", blocking=False, on_busy=lambda busy: calls.append(busy) or "later")
    def job(n: int) -> str:
        return "ran"

    hold_elsewhere("job:1", timeout=5)
    assert job(1) == "later"
    assert job(2) == "ran"
    [busy] = calls
    assert busy.names == ("job:1",)
    assert busy.args == (1,)
    assert 4 < busy.retry_after <= 5


def _view_request(accept: str) -> HttpRequest:
    request = RequestFactory().post("/buy/42/", HTTP_ACCEPT=accept)
    request.user = AnonymousUser()
    return request


@redis_lock("market:item:{item_id}", blocking=False)
def buy(request: HttpRequest, item_id: int) -> HttpResponse:
    return JsonResponse({"bought": item_id})


@redis_lock("market:item:{item_id}", blocking=False)
async def abuy(request: HttpRequest, item_id: int) -> HttpResponse:
    return JsonResponse({"bought": item_id})


def test_view_answers_409_with_retry_after_when_busy() -> None:
    assert buy(_view_request("application/json"), item_id=42).status_code == 200
    hold_elsewhere("market:item:42", timeout=7)
    response = buy(_view_request("application/json"), item_id=42)
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    assert json.loads(response.content)["lock"] == "market:item:42"
    response = buy(_view_request("text/html,*/*;q=0.8"), item_id=42)
    assert response.status_code == 409
    assert response["Content-Type"].startswith("text/plain")
    assert buy(_view_request("application/json"), item_id=43).status_code == 200


def test_a_view_answers_503_while_redis_is_down() -> None:
    closed = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}

    async def abuy_once() -> HttpResponse:
        request = AsyncRequestFactory().post("/buy/42/", HTTP_ACCEPT="application/json")
        request.user = AnonymousUser()
        try:
            return await abuy(request, item_id=42)
        finally:
            await aclose_async_client()

    with override_settings(CACHES={"default": closed}):
        as_json = buy(_view_request("application/json"), item_id=42)
        as_text = buy(_view_request("text/html,*/*;q=0.8"), item_id=42)
        from_async = asyncio.run(abuy_once())
        with pytest.raises(redis.ConnectionError), redis_lock("market:item:42"):
            pass  # not a view: the error, unchanged
    for response in (as_json, as_text, from_async):
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
    assert json.loads(as_json.content) == {"error": "Redis is unavailable; try again shortly."}
    assert json.loads(from_async.content) == json.loads(as_json.content)
    assert as_text["Content-Type"].startswith("text/plain")
    assert buy(_view_request("application/json"), item_id=42).status_code == 200  # back


@redis_lock("market:item:{item_id}", "market:user:{user}", blocking=False)
def buy_as_user(request: HttpRequest, item_id: int) -> HttpResponse:
    return JsonResponse({"bought": item_id})


def test_a_view_with_several_locks_answers_409_naming_the_busy_one() -> None:
    hold_elsewhere("market:user:anonymous", timeout=7)
    response = buy_as_user(_view_request("application/json"), item_id=45)
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    assert json.loads(response.content)["lock"] == "market:user:anonymous"
    assert not _held("market:item:45")


def test_async_view_answers_409_when_busy() -> None:
    async def scenario() -> tuple[int, int, str]:
        request = AsyncRequestFactory().post("/buy/42/", HTTP_ACCEPT="application/json")
        request.user = AnonymousUser()
        free = await abuy(request, item_id=42)
        # Another task holds the lock (in this task it would be a nested acquisition).
        holder = await asyncio.create_task(RedisLock("market:item:42", timeout=3).aacquire())
        assert holder is not None
        busy = await abuy(request, item_id=42)
        await holder.arelease()
        await aclose_async_client()
        return free.status_code, busy.status_code, busy["Retry-After"]

    assert asyncio.run(scenario()) == (200, 409, "3")


def test_view_template_may_use_the_user() -> None:
    @redis_lock("export:{user}", blocking=False)
    def export(request: HttpRequest) -> HttpResponse:
        return HttpResponse(str(_held("export:anonymous")))

    assert export(_view_request("*/*")).content == b"True"


def test_async_lock_api(redis_mode: str) -> None:
    async def scenario() -> list[object]:
        lock = RedisLock("async", timeout=5)
        handle = await lock.aacquire()
        assert handle is not None
        waiter = asyncio.ensure_future(RedisLock("async").aacquire(blocking_timeout=5))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await handle.acheck()
        await handle.aextend(10)
        await handle.arelease()
        second = await waiter
        assert second is not None
        results: list[object] = [second.fence - handle.fence]
        await second.arelease()

        @redis_lock("async:{n}")
        async def work(n: int) -> bool:
            return _held(f"async:{n}")

        results.append(await work(3))
        await aclose_async_client()
        return results

    assert asyncio.run(scenario()) == [1, True]


@pytest.mark.django_db
def test_fenced_update_refuses_an_older_fence() -> None:
    document = Document.objects.create(body="v0")
    rows = Document.objects.filter(pk=document.pk)
    assert fenced_update(rows, 5, body="v5")
    assert not fenced_update(rows, 4, body="stale")
    assert not fenced_update(rows, 5, body="same fence")
    assert fenced_update(rows, 6, body="v6")
    document.refresh_from_db()
    assert (document.body, document.fence) == ("v6", 6)
    with pytest.raises(InvalidInput, match="fence"):
        fenced_update(rows, "7", body="x")  # type: ignore[arg-type]


def test_fenced_set_refuses_an_older_fence(redis_mode: str) -> None:
    assert fenced_get("report") == (None, 0)
    assert fenced_set("report", "from 5", 5)
    assert not fenced_set("report", "from 3", 3)
    assert fenced_get("report") == ("from 5", 5)


# -- real processes ------------------------------------------------------------------


def _increment_under_lock(rounds: int) -> None:
    client = get_client()
    for _ in range(rounds):
        with redis_lock("counter", timeout=10, blocking_timeout=60):
            if client.incr("holders") != 1:
                client.incr("overlaps")
            value = int(client.get("count") or 0)  # a deliberate read-sleep-write race
            time.sleep(0.0005)
            client.set("count", value + 1)
            client.decr("holders")


def test_mutual_exclusion_across_16_processes(r: redis.Redis) -> None:
    run_processes(_increment_under_lock, [(25,)] * 16, timeout=120)
    assert int(r.get("count") or 0) == 16 * 25
    assert r.get("overlaps") is None


def _lock_pair(first: str, second: str, rounds: int) -> None:
    for _ in range(rounds):
        with redis_lock(first, second, timeout=10, blocking_timeout=30):
            pass


def test_multi_lock_in_opposite_orders_never_deadlocks() -> None:
    run_processes(_lock_pair, [("a", "b", 1000), ("b", "a", 1000)], timeout=120)


def _hold_and_report(lease: float, conn: Any) -> None:
    handle = RedisLock("crash", timeout=lease).acquire()
    assert handle is not None
    conn.send(time.monotonic())
    time.sleep(60)


def test_a_killed_holders_lock_is_taken_soon_after_its_lease_expires() -> None:
    lease = 0.5
    parent, child = FORK.Pipe()
    holder = FORK.Process(target=_hold_and_report, args=(lease, child))
    holder.start()
    acquired_at = parent.recv()
    os.kill(holder.pid or 0, signal.SIGKILL)
    holder.join()
    handle = RedisLock("crash", timeout=5).acquire(blocking_timeout=5)
    late = time.monotonic() - (acquired_at + lease)
    assert handle is not None
    assert late < 0.1, f"the waiter got the lock {late * 1000:.0f} ms after the lease expired"


def _wait_then_die(ready: Any, name: str, seconds: float) -> None:
    ready.send("waiting")
    RedisLock(name).acquire(blocking_timeout=seconds)


def _blocked_clients(name: str) -> int:
    """How many clients are blocked on the server (or cluster node) that holds lock ``name``."""
    node = node_client(get_client(), f"rc:lock:{{{name}}}")
    return int(node.info("clients")["blocked_clients"])


def _kill_a_waiter(name: str, seconds: float) -> None:
    """A process that registers as a waiter for ``seconds`` and blocks, killed meanwhile.

    Returns once the server has seen the waiter's connection close: until then Redis could
    still hand a grant to the dead connection's BLPOP (the lease then frees the lock).
    """
    before = _blocked_clients(name)
    parent, child = FORK.Pipe()
    waiter = FORK.Process(target=_wait_then_die, args=(child, name, seconds))
    waiter.start()
    parent.recv()
    wait_until(lambda: _blocked_clients(name) > before)  # registered and blocked
    os.kill(waiter.pid or 0, signal.SIGKILL)
    waiter.join()
    wait_until(lambda: _blocked_clients(name) == before)


def test_a_dead_waiter_does_not_swallow_the_lock() -> None:
    holder = hold_elsewhere("deadwaiter", timeout=10)
    _kill_a_waiter("deadwaiter", 30)
    holder.release()  # hands over to the dead waiter's registration, if it is still listed
    handle = RedisLock("deadwaiter", timeout=10).acquire(blocking=False)
    assert handle is not None
    assert handle.fence > holder.fence


def test_the_next_waiter_sweeps_a_dead_waiters_lapsed_registration() -> None:
    holder = hold_elsewhere("lapsed", timeout=10)
    _kill_a_waiter("lapsed", 1)  # registered for 1 s and the slack of 1 s
    time.sleep(2.0)  # its registration lapses
    # A waiter that registers sweeps it, then gives up and drops its own.
    assert RedisLock("lapsed").acquire(blocking_timeout=0.05) is None
    holder.release()
    # Nobody is registered, so the release freed the lock instead of handing it over.
    assert not RedisLock("lapsed").locked()


def _handed_over_after(name: str, seconds: float) -> None:
    holder = hold_elsewhere(name, timeout=10)
    threading.Timer(seconds, holder.release).start()


@single_server_only
def test_a_waiter_asks_its_connection_id_once(r: redis.Redis) -> None:
    lock = RedisLock("idonce")
    for round_ in range(4):  # the first round connects and learns the connection's id
        if round_ == 1:
            r.config_resetstat()
        _handed_over_after("idonce", 0.05)
        handle = lock.acquire(blocking_timeout=5)  # blocks (BLPOP), then gets the grant
        assert handle is not None
        handle.release()
    stats = r.info("commandstats")
    assert stats["cmdstat_blpop"]["calls"] == 3
    # Redis 6.2 counts CLIENT ID under "client" (and MONITOR does not show it).
    assert "cmdstat_client" not in stats, stats.get("cmdstat_client")


def test_a_grant_no_replica_acknowledged_is_released_and_reported() -> None:
    lock = RedisLock("durable", timeout=5, wait_for_replicas=1)
    with pytest.raises(LockError, match="0 of 1 replicas acknowledged"):
        lock.acquire()
    assert not _held("durable")  # released again
    with pytest.raises(InvalidInput, match="wait_for_replicas"):
        RedisLock("durable", wait_for_replicas=0)


@pytest.mark.skipif(not CLUSTER, reason="the asyncio cluster client is used only on a cluster")
def test_wait_for_replicas_needs_the_sync_api_on_a_cluster() -> None:
    async def scenario() -> None:
        try:
            await RedisLock("durable", wait_for_replicas=1).aacquire()
        finally:
            await aclose_async_client()

    with pytest.raises(ConfigurationError, match="sync API"):
        asyncio.run(scenario())
    assert not _held("durable")


def test_reentrant_multi_lock_is_released_by_the_outermost_block() -> None:
    with redis_lock("a", "b", reentrant=True) as outer:
        with redis_lock("a", "b", reentrant=True) as inner:
            assert [h.token for h in inner] == [h.token for h in outer]
        assert _held("a")
        assert _held("b")
    assert not _held("a")
    assert not _held("b")


def test_a_multi_lock_that_fails_to_confirm_holds_nothing() -> None:
    # No replica acknowledges on the test server, so confirming the first lock fails.
    with pytest.raises(LockError, match="replicas"), redis_lock("x", "y", wait_for_replicas=1):
        pass
    assert not _held("x")
    assert not _held("y")


def test_a_view_whose_arguments_make_a_bad_lock_name_answers_400() -> None:
    response = buy(_view_request("application/json"), item_id="x" * 2000)
    assert response.status_code == 400
    assert json.loads(response.content)["field"] == "name"
    response = buy(_view_request("text/html"), item_id="bad\nname")
    assert response.status_code == 400
    assert b"control character" in response.content


def test_a_guard_exited_in_another_thread_or_task_than_it_entered_releases() -> None:
    guard = redis_lock("elsewhere", timeout=5)
    entering = threading.Thread(target=guard.__enter__)
    entering.start()
    entering.join(10)
    assert _held("elsewhere")
    guard.__exit__(None, None, None)
    assert not _held("elsewhere")

    async def scenario() -> None:
        try:
            await asyncio.create_task(guard.__aenter__())  # the task's context, not ours
            assert _held("elsewhere")
            await guard.__aexit__(None, None, None)
        finally:
            await aclose_async_client()

    asyncio.run(scenario())
    assert not _held("elsewhere")


# -- a release that is interrupted can be retried ------------------------------------------


class Interrupted(Exception):
    """What a signal handler raised in the middle of a release."""


def _take_and_release(name: str) -> None:
    handle = RedisLock(name, timeout=5).acquire(blocking=False)
    assert handle is not None, f"{name} is still held"
    handle.release()


def _free_for_everyone(name: str) -> None:
    """The lock is free: this thread takes it again, and so does another process."""
    assert not _held(name)
    again = RedisLock(name, timeout=5).acquire(blocking=False)
    assert again is not None
    again.release()
    run_processes(_take_and_release, [(name,)])


def _while_redis_sleeps(r: redis.Redis, seconds: float) -> threading.Thread:
    """Put the server to sleep (DEBUG SLEEP) from another connection; return at once."""
    sleeper = threading.Thread(target=r.execute_command, args=("DEBUG", "SLEEP", seconds))
    sleeper.start()
    time.sleep(0.1)  # it is asleep: a command sent now waits for it
    return sleeper


@single_server_only
def test_a_release_interrupted_by_a_signal_handler_can_be_retried(r: redis.Redis) -> None:
    handle = RedisLock("job", timeout=30, auto_renew=True).acquire()

    def interrupt(*_: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        sleeper = _while_redis_sleeps(r, 0.6)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):
            handle.release()  # sent; the reply never read
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not handle.released  # nothing is marked that was not confirmed
    sleeper.join()
    handle.release()  # Redis had run the release when it woke: the retry finds it gone
    assert handle.released
    assert not handle.lost
    _free_for_everyone("job")


def _drop_connections_soon() -> None:
    """In 0.2 s, shut down the sockets of the app's client that are in use, as a network
    failure would (the next read finds the connection closed)."""

    def drop() -> None:
        for connection in list(get_client().connection_pool._in_use_connections):
            connection._sock.shutdown(socket.SHUT_RDWR)

    threading.Timer(0.2, drop).start()


@single_server_only
def test_a_release_whose_connection_drops_before_redis_runs_it_still_holds(
    r: redis.Redis,
) -> None:
    handle = RedisLock("job", timeout=30).acquire()
    r.execute_command("CLIENT", "PAUSE", 600)  # commands of other clients wait
    _drop_connections_soon()
    with pytest.raises(redis.ConnectionError):
        handle.release()
    assert not handle.released
    time.sleep(0.5)  # the pause is over; the dropped client's release never ran
    assert _held("job")
    with pytest.raises(LockError):
        RedisLock("job", timeout=5).acquire()  # this thread still holds it
    handle.release()  # the retry releases it
    assert handle.released
    _free_for_everyone("job")


@single_server_only
def test_a_cancelled_async_release_can_be_retried(r: redis.Redis) -> None:
    async def scenario() -> None:
        handle = await RedisLock("job", timeout=30).aacquire()
        assert handle is not None
        sleeper = _while_redis_sleeps(r, 0.6)
        releasing = asyncio.ensure_future(handle.arelease())
        await asyncio.sleep(0.2)
        releasing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await releasing
        assert not handle.released
        sleeper.join()
        await handle.arelease()
        assert handle.released
        await aclose_async_client()

    asyncio.run(scenario())
    _free_for_everyone("job")


@single_server_only
def test_a_with_block_whose_release_fails_leaves_the_handle_to_retry(r: redis.Redis) -> None:
    scope = redis_lock("a", "b", timeout=30)
    with pytest.raises(redis.ConnectionError), scope as group:  # noqa: PT012 - its exit fails
        r.execute_command("CLIENT", "PAUSE", 600)
        _drop_connections_soon()
    time.sleep(0.5)
    assert all(not handle.released for handle in group)
    for handle in group:
        handle.release()
    _free_for_everyone("a")
    _free_for_everyone("b")


@single_server_only
def test_an_async_block_whose_release_fails_still_releases_the_other_locks(
    r: redis.Redis,
) -> None:
    async def drop_connections() -> None:
        for connection in list(get_async_client().connection_pool._in_use_connections):
            connection._writer.transport.abort()

    async def scenario() -> tuple[LockHandle, ...]:
        scope = redis_lock("a", "b", timeout=30)
        with pytest.raises(redis.ConnectionError):  # noqa: PT012 - the block's exit fails
            async with scope as group:
                r.execute_command("CLIENT", "PAUSE", 600)  # "b" is released first
                asyncio.get_running_loop().call_later(
                    0.2, lambda: asyncio.ensure_future(drop_connections())
                )
        await aclose_async_client()
        return tuple(group)

    first, second = asyncio.run(scenario())
    assert (first.name, first.released, second.name, second.released) == ("a", True, "b", False)
    assert not _held("a")
    assert _held("b")
    second.release()  # the retry releases it
    _free_for_everyone("b")


def test_check_after_a_release_says_it_was_released() -> None:
    handle = RedisLock("job", timeout=5).acquire()
    handle.release()
    with pytest.raises(LockLost, match="was released"):
        handle.check()


# -- what users of redis-py's and python-redis-lock's locks expect -------------------------


def test_our_lock_errors_are_redis_py_lock_errors() -> None:
    assert issubclass(LockError, redis.exceptions.LockError)
    assert issubclass(LockNotOwned, redis.exceptions.LockNotOwnedError)
    handle = hold_elsewhere("gone", timeout=0.05)
    time.sleep(0.1)
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        handle.release()


def test_acquiring_a_lock_this_thread_holds() -> None:
    held = RedisLock("own", timeout=5).acquire()
    assert RedisLock("own", timeout=5).acquire(blocking=False) is None  # busy, like the peers
    assert RedisLock("own", timeout=5).acquire(blocking_timeout=0) is None
    with pytest.raises(LockAlreadyHeld, match="reentrant=True"):
        RedisLock("own", timeout=5).acquire()  # would wait for its own lease
    assert redis_lock("own", blocking=False).take(["own"]) == Busy(
        ("own",), pytest.approx(5, abs=0.1), held="own"
    )
    held.release()


def test_extend_adds_time_or_replaces_it_as_in_redis_py() -> None:
    handle = RedisLock("ext2", timeout=2).acquire()
    handle.extend(3)  # 3 s more than what is left
    assert 4_500 < get_client().pttl("rc:lock:{ext2}") <= 5_000
    handle.extend(1, replace_ttl=True)
    assert 500 < get_client().pttl("rc:lock:{ext2}") <= 1_000
    handle.renew()  # the lock's timeout from now
    assert 1_500 < get_client().pttl("rc:lock:{ext2}") <= 2_000
    handle.extend(-0.5)  # negative: 0.5 s less than what is left, as in redis-py
    assert 1_000 < get_client().pttl("rc:lock:{ext2}") <= 1_500
    handle.release()


@pytest.mark.parametrize(
    ("additional_time", "replace_ttl"),
    [(0, True), (0.0, False), (-1, True), (-20, False), (-0.0001, False), (0.0004, False)],
)
def test_an_extension_to_0_seconds_or_less_keeps_the_lease_as_in_redis_py(
    additional_time: float, replace_ttl: bool
) -> None:
    """redis-py 8.2's extend(): where the new lease would be 0 s or less (a time of 0 or
    less; a negative one larger than what is left), the lease stays and it succeeds."""
    handle = RedisLock("keep", timeout=10).acquire()
    assert handle is not None
    client = get_client()
    before = client.pttl("rc:lock:{keep}")
    handle.extend(additional_time, replace_ttl=replace_ttl)
    assert text(client.get("rc:lock:{keep}")) == handle.token
    assert before - 100 < client.pttl("rc:lock:{keep}") <= before + 1
    assert 9 < handle.lease_ends - time.monotonic() <= 10.01  # what is left, as Redis said
    handle.check()
    handle.release()


def test_an_extension_to_0_seconds_or_less_still_finds_a_lost_lock() -> None:
    handle = hold_elsewhere("gone", timeout=5)
    get_client().delete("rc:lock:{gone}")
    with pytest.raises(LockNotOwned) as caught:
        handle.extend(0, replace_ttl=True)
    assert caught.value.lock_name == "gone"  # redis-py's attribute: the lock's name
    assert handle.lost


def test_an_async_extension_to_0_seconds_or_less_keeps_the_lease() -> None:
    async def scenario() -> None:
        handle = await RedisLock("akeep", timeout=10).aacquire()
        assert handle is not None
        await handle.aextend(-1, replace_ttl=True)
        assert 9_000 < get_client().pttl("rc:lock:{akeep}") <= 10_000
        await handle.arelease()
        await aclose_async_client()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "additional_time",
    [-1e300, -math.inf, math.nan, -(10**5000), True, "1"],
    ids=["-1e300", "-inf", "nan", "-10**5000", "True", "'1'"],
)
def test_an_extension_that_is_no_finite_number_of_seconds_is_refused(
    additional_time: object, count_commands: CommandCount
) -> None:
    handle = RedisLock("bad", timeout=5).acquire()
    assert handle is not None
    with count_commands as counted, pytest.raises(InvalidInput, match="additional_time") as info:
        handle.extend(additional_time)  # type: ignore[arg-type]
    assert counted.sent == 0
    assert len(str(info.value)) < 150
    handle.release()


def test_locked_owned_and_with_a_lock() -> None:
    lock = RedisLock("w", timeout=5)
    assert not lock.locked()
    with lock as handle:
        assert lock.locked()
        assert handle.owned()
        assert not RedisLock("w", timeout=5).acquire(blocking=False)
    assert not handle.owned()
    assert not lock.locked()

    async def scenario() -> None:
        async with RedisLock("w", timeout=5) as handle:
            assert await handle.aowned()
            assert await RedisLock("w").alocked()
        assert not await handle.aowned()
        await aclose_async_client()

    asyncio.run(scenario())


def test_waiting_without_a_limit() -> None:
    hold_elsewhere("forever", timeout=0.3)
    started = time.monotonic()
    handle = RedisLock("forever", timeout=5).acquire(blocking_timeout=math.inf)
    assert handle is not None
    assert time.monotonic() - started < 5  # taken when the holder's lease ran out
    handle.release()


@pytest.mark.parametrize(
    "attempt",
    [
        lambda: RedisLock("huge", timeout=1e14),
        lambda: RedisLock("huge", timeout=5).acquire(blocking_timeout=1e300),
        lambda: RedisLock("huge", timeout=5).acquire(blocking_timeout=10**5000),
        lambda: redis_lock("huge", timeout=1e12),
        lambda: RedisSemaphore("huge", 2, timeout=1e300),
        lambda: RedisSemaphore("huge", 2).acquire(blocking=True, blocking_timeout=1e300),
    ],
)
def test_huge_durations_are_refused_and_say_the_maximum(attempt: Any, r: redis.Redis) -> None:
    with pytest.raises(InvalidInput, match=r"at most 315,360,000 seconds|finite") as info:
        attempt()
    assert len(str(info.value)) < 150
    assert r.keys("*") == []


def test_a_huge_extension_is_refused() -> None:
    handle = RedisLock("huge", timeout=5).acquire()
    with pytest.raises(InvalidInput, match="at most"):
        handle.extend(1e300)
    assert 4_000 < get_client().pttl("rc:lock:{huge}") <= 5_000  # unchanged
    handle.release()


class CountingFails(Exception):
    """What a metric that breaks raises, in the tests below."""


@contextlib.contextmanager
def counting_fails() -> Iterator[None]:
    """Inside, anything that runs right after a grant raises (counting it, here)."""

    def fail(event: str) -> None:
        raise CountingFails(event)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(metrics, "count", fail)
        yield


@pytest.mark.parametrize("waits", [False, True], ids=["free", "handed-over"])
def test_an_exception_after_the_grant_gives_the_lock_back(waits: bool) -> None:
    if waits:  # the grant comes from the holder's release, while the acquire waits
        threading.Timer(0.2, hold_elsewhere("after-grant").release).start()
    with counting_fails(), pytest.raises(CountingFails):
        RedisLock("after-grant", timeout=30, auto_renew=True).acquire(blocking_timeout=5)
    _free_for_everyone("after-grant")


def test_an_exception_after_the_grant_gives_the_lock_back_async() -> None:
    async def scenario() -> None:
        with pytest.raises(CountingFails):
            await RedisLock("after-grant", timeout=30).aacquire()
        with pytest.raises(CountingFails):
            async with redis_lock("after-grant", "and-another", timeout=30):
                pass  # pragma: no cover - never entered
        await aclose_async_client()

    with counting_fails():
        asyncio.run(scenario())
    _free_for_everyone("after-grant")
    _free_for_everyone("and-another")


def test_an_exception_after_the_grants_gives_every_lock_back() -> None:
    with counting_fails(), pytest.raises(CountingFails), redis_lock("one", "two", timeout=30):
        pass  # pragma: no cover - never entered
    _free_for_everyone("one")
    _free_for_everyone("two")
