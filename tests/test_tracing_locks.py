"""OpenTelemetry spans of locks and semaphores (redis_components/tracing/holds.py): a span from
the start of each acquisition to its release, current while a scope holds it, with the
wait, the fence or permit, a refusal's and a lost lease's ERROR, no round trip added,
and nothing of OpenTelemetry imported while tracing is off. Spans are read from the
SDK's in-memory exporter (tests/spans.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from conftest import CommandCount
from redis_components import locks
from redis_components.connection import aclose_async_client
from redis_components.exceptions import (
    LockAlreadyHeld,
    LockLost,
    LockNotOwned,
    SemaphoreLost,
    SemaphoreNotOwned,
)
from redis_components.locks import LockHandle, RedisLock, redis_lock
from redis_components.semaphores import Permit, RedisSemaphore, redis_semaphore
from tests import spans

Exported = Callable[[], list[ReadableSpan]]
LOCK = "redis_components.lock."
SEM = "redis_components.semaphore."


@pytest.fixture(autouse=True)
def _no_held_locks() -> None:
    """Tests share one thread; start each without locks held by an earlier test."""
    locks._held.set({})


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans named ``name``, or for "lock <name>" ("semaphore <name>") the spans of
    that lock: named by their kind alone (a span's name must not grow with its
    arguments), its name in an attribute."""
    kind, _, target = name.partition(" ")
    return [
        span
        for span in found
        if span.name == name
        or (span.name == kind and attributes(span).get(f"redis_components.{kind}.name") == target)
    ]


def started_in_order(found: list[ReadableSpan]) -> list[ReadableSpan]:
    """(A release and the next holder's work race: the order they end in is not fixed.)"""
    return sorted(found, key=lambda span: span.start_time or 0)


def attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def in_thread(action: Callable[[], object]) -> object:
    """What ``action`` returns in another thread: another holder, as far as a lock sees."""
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(action()))
    thread.start()
    thread.join()
    return got[0]


def release_later(taken: LockHandle | Permit, delay: float) -> threading.Thread:
    thread = threading.Timer(delay, taken.release)
    thread.start()
    return thread


def test_a_locks_span_covers_its_hold_and_the_protected_work_is_its_child(
    exported: Exported,
) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        with redis_lock("order:42", timeout=7) as handle, tracer.start_as_current_span("work"):
            pass
        after = trace.get_current_span()
    assert after is request  # the lock's span is current no more
    [span] = named(exported(), "lock order:42")
    [work] = named(exported(), "work")
    assert span.kind == SpanKind.INTERNAL
    assert span.status.status_code == StatusCode.UNSET
    assert span.parent is not None
    assert span.parent.span_id == request.get_span_context().span_id
    assert work.parent is not None
    assert work.parent.span_id == span.context.span_id
    found = attributes(span)
    assert found[LOCK + "name"] == "order:42"
    assert found[LOCK + "lease_ms"] == 7000
    assert found[LOCK + "fence"] == handle.fence
    assert 0 <= found[LOCK + "wait_ms"] < 1000
    assert span.start_time is not None
    assert span.end_time is not None
    assert work.end_time is not None
    assert span.start_time < work.start_time <= work.end_time < span.end_time
    assert not span.events


def test_each_grant_has_a_new_fence(exported: Exported) -> None:
    lock = RedisLock("fenced", timeout=5)
    for _ in range(2):
        handle = lock.acquire()
        assert handle is not None
        handle.release()
    first, second = named(exported(), "lock fenced")
    assert attributes(first)[LOCK + "fence"] < attributes(second)[LOCK + "fence"]


def test_the_wait_for_another_holder_is_the_spans_wait_ms(exported: Exported) -> None:
    held = in_thread(lambda: RedisLock("busy", timeout=5).acquire())
    assert isinstance(held, LockHandle)
    releasing = release_later(held, 0.3)
    handle = RedisLock("busy", timeout=5).acquire(blocking_timeout=5)
    assert handle is not None
    handle.release()
    releasing.join()
    holder, waiter = started_in_order(named(exported(), "lock busy"))
    assert attributes(holder)[LOCK + "fence"] == held.fence
    assert attributes(waiter)[LOCK + "fence"] == handle.fence > held.fence
    assert 250 <= attributes(waiter)[LOCK + "wait_ms"] < 5000
    assert attributes(holder)[LOCK + "wait_ms"] < 250
    assert waiter.status.status_code == StatusCode.UNSET


def test_a_refused_acquisition_is_an_error_span(exported: Exported) -> None:
    in_thread(lambda: RedisLock("taken", timeout=5).acquire())
    assert RedisLock("taken").acquire(blocking=False) is None
    [span] = named(exported(), "lock taken")  # (the holder's span has not ended)
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "busy"
    assert 4000 < attributes(span)[LOCK + "retry_after_ms"] <= 5000
    assert LOCK + "fence" not in attributes(span)


def test_an_acquisition_that_raises_ends_its_span_with_the_error(exported: Exported) -> None:
    handle = RedisLock("nested", timeout=5).acquire()
    assert handle is not None
    with pytest.raises(LockAlreadyHeld):
        RedisLock("nested").acquire()
    handle.release()
    failed, held = named(exported(), "lock nested")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "LockAlreadyHeld"
    assert [event.name for event in failed.events] == ["exception"]
    assert held.status.status_code == StatusCode.UNSET


def test_a_lost_lease_is_an_event_and_an_error(exported: Exported, r: redis.Redis) -> None:
    lock = RedisLock("lease", timeout=5)
    handle = lock.acquire()
    assert handle is not None
    r.delete(lock.keys[0])  # as if the lease ran out
    with pytest.raises(LockNotOwned):
        handle.renew()
    assert not named(exported(), "lock lease")  # still held, as far as its code knows
    with pytest.raises(LockNotOwned):
        handle.release()
    [span] = named(exported(), "lock lease")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "lease lost"
    [event] = span.events
    assert event.name == "lease lost"
    assert 0 <= event.attributes[LOCK + "held_ms"] < 5000


def test_a_lease_lost_in_a_scope_is_found_at_its_release(
    exported: Exported, r: redis.Redis
) -> None:
    with pytest.raises(LockLost), redis_lock("scoped", timeout=5) as handle:
        r.delete(handle.lock.keys[0])
    [span] = named(exported(), "lock scoped")
    assert span.status.status_code == StatusCode.ERROR
    assert [event.name for event in span.events] == ["lease lost"]
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_the_watchdog_finding_a_lease_lost_marks_its_span(
    exported: Exported, r: redis.Redis
) -> None:
    lost = threading.Event()
    lock = RedisLock("renewed", timeout=0.3, auto_renew=True, on_lost=lambda _: lost.set())
    handle = lock.acquire()
    assert handle is not None
    r.delete(lock.keys[0])
    assert lost.wait(5)
    with pytest.raises(LockNotOwned):
        handle.release()
    [span] = named(exported(), "lock renewed")
    assert [event.name for event in span.events] == ["lease lost"]
    assert span.status.status_code == StatusCode.ERROR


def test_several_locks_have_a_span_each_and_the_work_is_a_child_of_the_last(
    exported: Exported,
) -> None:
    # Free: taken in one round trip.
    with redis_lock("b", "a"), trace.get_tracer("test").start_as_current_span("work"):
        pass
    found = exported()
    [a], [b], [work] = named(found, "lock a"), named(found, "lock b"), named(found, "work")
    assert attributes(a)[LOCK + "fence"]
    assert attributes(b)[LOCK + "fence"]
    assert work.parent is not None
    assert work.parent.span_id == b.context.span_id
    assert a.parent is None  # (siblings, under what was current: nothing here)
    assert b.parent is None


def test_a_reentrant_acquisition_is_a_short_span_of_its_own(exported: Exported) -> None:
    lock = RedisLock("again", timeout=5, reentrant=True)
    with lock as outer, lock as inner:
        assert inner is outer
    inner_span, outer_span = named(exported(), "lock again")
    assert attributes(inner_span)[LOCK + "reentrant"] is True
    assert LOCK + "reentrant" not in attributes(outer_span)
    assert outer_span.end_time >= inner_span.end_time


def test_a_scope_inside_a_handles_hold_leaves_nothing_current(exported: Exported) -> None:
    """A reentrant lock taken by ``acquire()``, then again by a scope: the scope's end only
    counts down, so the lock's span never became current there, nor stays current."""
    lock = RedisLock("handheld", timeout=5, reentrant=True)
    handle = lock.acquire()
    assert handle is not None
    with lock:
        pass
    assert not trace.get_current_span().get_span_context().is_valid
    handle.release()
    assert not trace.get_current_span().get_span_context().is_valid
    assert len(named(exported(), "lock handheld")) == 2


def test_tracing_adds_no_round_trip(exported: Exported, count_commands: CommandCount) -> None:
    sem = RedisSemaphore("rt", limit=2, timeout=5)
    sent = {}
    for tracing in (False, True, False, True):  # the first loads the scripts
        options = {**settings.REDIS_COMPONENTS, "TRACING": tracing}
        lock = redis_lock("rt", timeout=5)
        with override_settings(REDIS_COMPONENTS=options), count_commands as counted, lock:
            permit = sem.acquire(blocking=False)
            assert permit is not None
            permit.release()
        sent[tracing] = counted.sent
    assert sent == {False: 4, True: 4}
    assert len(named(exported(), "lock rt")) == 2
    assert len(named(exported(), "semaphore rt")) == 2


def test_async_locks_have_the_same_spans(exported: Exported, r: redis.Redis) -> None:
    tracer = trace.get_tracer("test")

    async def scenario() -> tuple[int, int | None]:
        try:
            async with redis_lock("async", timeout=5) as handle:
                with tracer.start_as_current_span("work"):
                    await asyncio.sleep(0)
                busy = await RedisLock("async").aacquire(blocking=False)
                assert busy is None  # (nested in this task, without reentrant: busy)
            taken = await RedisLock("async", timeout=5).aacquire()
            assert taken is not None
            r.delete(taken.lock.keys[0])
            with pytest.raises(LockNotOwned):
                await taken.arelease()
            return handle.fence, None
        finally:
            await aclose_async_client()

    fence, _ = asyncio.run(scenario())
    refused, held, lost = named(exported(), "lock async")
    [work] = named(exported(), "work")
    assert attributes(held)[LOCK + "fence"] == fence
    assert work.parent is not None
    assert work.parent.span_id == held.context.span_id
    assert refused.status.status_code == StatusCode.ERROR
    assert refused.status.description == "busy"
    assert [event.name for event in lost.events] == ["lease lost"]


def test_a_semaphores_span_says_its_permit_limit_and_fairness(exported: Exported) -> None:
    tracer = trace.get_tracer("test")
    scope = redis_semaphore("api", limit=3, timeout=4, blocking=False)
    with scope as permit, tracer.start_as_current_span("work"):
        pass
    basic = RedisSemaphore("api-basic", limit=1, fair=False).acquire(blocking=False)
    assert basic is not None
    basic.release()
    [span] = named(exported(), "semaphore api")
    [work] = named(exported(), "work")
    assert span.kind == SpanKind.INTERNAL
    assert work.parent is not None
    assert work.parent.span_id == span.context.span_id
    found = attributes(span)
    assert found[SEM + "name"] == "api"
    assert found[SEM + "limit"] == 3
    assert found[SEM + "fair"] is True
    assert found[SEM + "lease_ms"] == 4000
    assert found[SEM + "permit"] == permit.token
    assert found[SEM + "counter"] == permit.counter
    assert 0 <= found[SEM + "wait_ms"] < 1000
    [basic_span] = named(exported(), "semaphore api-basic")
    assert attributes(basic_span)[SEM + "fair"] is False
    assert SEM + "counter" not in attributes(basic_span)


def test_a_full_semaphore_and_a_wait_for_a_permit(exported: Exported) -> None:
    sem = RedisSemaphore("one", limit=1, timeout=5)
    held = in_thread(lambda: sem.acquire(blocking=False))
    assert isinstance(held, Permit)
    assert sem.acquire(blocking=False) is None
    releasing = release_later(held, 0.3)
    permit = sem.acquire(blocking=True, blocking_timeout=5)
    assert permit is not None
    permit.release()
    releasing.join()
    holder, refused, waiter = started_in_order(named(exported(), "semaphore one"))
    assert refused.status.status_code == StatusCode.ERROR
    assert refused.status.description == "full"
    assert attributes(holder)[SEM + "permit"] == held.token
    assert 250 <= attributes(waiter)[SEM + "wait_ms"] < 5000
    assert attributes(waiter)[SEM + "permit"] == permit.token


def test_a_semaphores_lost_permit_is_an_event_and_an_error(
    exported: Exported, r: redis.Redis
) -> None:
    sem = RedisSemaphore("lossy", limit=2, timeout=5)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    r.delete(sem.keys[0])
    with pytest.raises(SemaphoreNotOwned):
        permit.renew()
    with pytest.raises(SemaphoreNotOwned):
        permit.release()
    with pytest.raises(SemaphoreLost), redis_semaphore("lossy", limit=2, blocking=False):
        r.delete(sem.keys[0])
    for span in named(exported(), "semaphore lossy"):
        assert span.status.status_code == StatusCode.ERROR
        assert [event.name for event in span.events] == ["lease lost"]
    assert len(named(exported(), "semaphore lossy")) == 2


def test_the_watchdog_finding_a_permit_lost_marks_its_span(
    exported: Exported, r: redis.Redis
) -> None:
    lost = threading.Event()
    sem = RedisSemaphore("kept", 1, 0.3, auto_renew=True, on_lost=lambda _: lost.set())
    permit = sem.acquire(blocking=False)
    assert permit is not None
    r.delete(sem.keys[0])
    assert lost.wait(5)
    with pytest.raises(SemaphoreNotOwned):
        permit.release()
    [span] = named(exported(), "semaphore kept")
    assert [event.name for event in span.events] == ["lease lost"]
    assert span.status.status_code == StatusCode.ERROR


def test_tracing_off_makes_no_span(exported: Exported) -> None:
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": False}):
        with redis_lock("quiet"):
            pass
        with redis_semaphore("quiet", limit=1, blocking=False):
            pass
    assert exported() == []


def test_nothing_of_opentelemetry_is_imported_for_locks_while_tracing_is_off() -> None:
    """Locks (sync and async, one and several) and semaphores, in a process where
    ``opentelemetry`` cannot be imported: they work, and nothing tried to import it."""
    code = (
        "import asyncio\n"
        "from redis_components import RedisLock, redis_lock, redis_semaphore\n"
        "from redis_components.connection import aclose_async_client\n"
        "with redis_lock('a', 'b'):\n"
        "    pass\n"
        "handle = RedisLock('a').acquire()\n"
        "handle.release()\n"
        "with redis_semaphore('s', limit=1, blocking=False):\n"
        "    pass\n"
        "async def scenario():\n"
        "    async with redis_lock('a'), redis_semaphore('s', limit=1, blocking=False):\n"
        "        pass\n"
        "    await aclose_async_client()\n"
        "asyncio.run(scenario())\n"
    )
    tried = spans.run_django(code, settings.REDIS_COMPONENTS, otel_absent=True)
    assert tried.strip() == "[]"


def test_a_tracing_failure_costs_the_span_not_the_lock(
    exported: Exported, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from redis_components.tracing import holds

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an SDK that fails")

    monkeypatch.setattr(holds.Hold, "__init__", broken)
    with redis_lock("sturdy") as handle:
        assert handle.owned()
    assert not RedisLock("sturdy").locked()
    assert exported() == []
    assert "No span for lock 'sturdy': tracing failed" in caplog.text
