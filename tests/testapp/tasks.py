"""Tasks for the worker tests; worker processes find them by autodiscovery.

They record what happened in Redis under ``test:`` keys, so a test can see what a
worker process did.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from redis_components import (
    RedisTask,
    Retry,
    concurrency_limit,
    current_task,
    get_progress,
    rate_limit,
    redis_task,
)
from redis_components.connection import get_client
from redis_components.exceptions import SoftTimeLimitExceeded
from redis_components.tasks import RedisTaskContext


@redis_task(queue="test")
def record(label: str, pause: float = 0.0) -> None:
    """Count a run of ``label`` (several runs mean duplicates), then sleep ``pause`` seconds."""
    client = get_client()
    pipe = client.pipeline(transaction=True)
    pipe.hincrby("{test}:runs", label, 1)
    pipe.rpush("{test}:order", label)
    pipe.execute()
    if pause:
        time.sleep(pause)


@redis_task(queue="test")
def record_time(label: str) -> None:
    """Record the server's clock (ms) when the task starts."""
    client = get_client()
    seconds, micros = client.time()
    client.hset("test:started", label, int(seconds) * 1000 + int(micros) // 1000)


@redis_task(queue="test")
def slow(label: str, seconds: float) -> None:
    """Mark the start, sleep, mark the end."""
    client = get_client()
    client.set(f"test:{label}:started", os.getpid())
    time.sleep(seconds)
    client.set(f"test:{label}:finished", os.getpid())


@redis_task(queue="test", max_retries=2, retry_backoff=0.01)
def fail(label: str) -> None:
    """Fail every time, counting the attempts."""
    get_client().hincrby("{test}:runs", label, 1)
    raise ValueError(f"{label} failed on purpose")


@redis_task(queue="test", max_retries=2, retry_backoff=60)
def fail_slowly(label: str) -> None:
    """Fail every time, each retry a minute later: a burst worker never sees its retry."""
    raise ValueError(f"{label} failed on purpose")


@redis_task(queue="test", max_retries=5)
def retry_once(label: str) -> None:
    """Ask for one retry after 10 ms, then succeed."""
    running = current_task()
    assert running is not None
    get_client().hincrby("{test}:runs", label, 1)
    if running.message.retries == 0:
        raise Retry(delay=0.01, reason="not yet")


@redis_task(queue="test")
def crash(label: str) -> None:
    """Kill the worker process running it, as a segfault would."""
    get_client().hincrby("{test}:runs", label, 1)
    os.kill(os.getpid(), signal.SIGKILL)


@redis_task(queue="test")
def add(a: int, b: int) -> int:
    """Return a sum (its result holds it)."""
    return a + b


@redis_task(queue="test")
async def async_add(a: int, b: int) -> int:
    """An ``async def`` task: the worker runs it on an event loop."""
    await asyncio.sleep(0)
    return a + b


@redis_task(queue="test", max_retries=3)
def returns_object(label: str) -> object:
    """Count a run, then return what JSON cannot carry."""
    get_client().hincrby("{test}:runs", label, 1)
    return object()


def at(priority: int) -> RedisTask[[str], None]:
    """``record`` with a priority of its own."""
    return redis_task(
        name=f"tests.testapp.tasks.record_at_{priority}", queue="test", priority=priority
    )(record.func)


@redis_task(queue="test")
def tick(name: str) -> None:
    """Record which tick of schedule ``name`` this run is for."""
    running = current_task()
    assert running is not None
    get_client().rpush("{test}:ticks", f"{name} {running.message.scheduled_for}")


@redis_task(queue="test", time_limit=2, max_retries=1, retry_backoff=0.01)
def forever(label: str) -> None:
    """Count a start, then never end (its time limit stops it)."""
    get_client().hincrby("{test}:runs", label, 1)
    while True:
        time.sleep(0.01)


@redis_task(queue="test", soft_time_limit=0.3, time_limit=10)
def slow_but_polite(label: str) -> str:
    """Work until told the soft time limit has passed, then tidy up and return."""
    try:
        while True:
            time.sleep(0.01)
    except SoftTimeLimitExceeded:
        get_client().hincrby("{test}:runs", label, 1)
        return "stopped in time"


@redis_task(queue="test", soft_time_limit=0.005, max_retries=0)
def near_soft_limit(label: str, seconds: float) -> None:
    """Send Redis commands for ``seconds``, about as long as the soft time limit allows.

    The limit lands anywhere: in this loop, inside redis-py, or just after the return.
    """
    client = get_client()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        client.hincrby("{test}:spins", label, 1)


@redis_task(queue="test", soft_time_limit=0.1, max_retries=0)
def ends_at_its_soft_limit(label: str) -> str:
    """Run 0.15 s in small sleeps (past its soft limit of 0.1 s, unless it lands), then
    return ``label``."""
    end = time.monotonic() + 0.15
    while time.monotonic() < end:
        time.sleep(0.005)
    return label


@redis_task(queue="test")
def exit_process(label: str) -> None:
    """Count a start, then end the worker process with exit code 0 (no clean-up)."""
    get_client().hincrby("{test}:runs", label, 1)
    os._exit(0)


@redis_task(queue="test")
def fork_and_exit(label: str) -> int:
    """Fork a child that ends with ``sys.exit(0)``; return the child's exit code."""
    pid = os.fork()
    if pid == 0:
        get_client().hincrby("{test}:runs", f"{label}-child", 1)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@redis_task(queue="test", unique_for=60)
def unique_record(label: str) -> None:
    """``record``, but enqueued once per minute for equal arguments."""
    record.func(label)


# Tasks whose queued form a release captured (tests/upgrade/): their names, queues and
# what they return must not change.
def _echo(*args: object, **kwargs: object) -> list[object]:
    return [list(args), kwargs]


echo = redis_task(name="tests.testapp.tasks.echo", queue="test")(_echo)
urgent_echo = redis_task(name="tests.testapp.tasks.urgent_echo", queue="test", priority=7)(_echo)
unique_echo = redis_task(name="tests.testapp.tasks.unique_echo", queue="test", unique_for=3600)(
    _echo
)


@redis_task(queue="test")
def together(label: str, count: int, timeout: float = 10.0) -> bool:
    """Wait until ``count`` runs of ``together`` have started; record whether they did
    within ``timeout`` (only a worker running that many at once can make them meet)."""
    client = get_client()
    client.incr("{test}:together")
    deadline = time.monotonic() + timeout
    met = False
    while not met and time.monotonic() < deadline:
        met = int(client.get("{test}:together") or 0) >= count
        time.sleep(0.005)
    client.hset("{test}:met", label, int(met))
    return met


@redis_task(queue="test", time_limit=2, max_retries=0)
def stuck(label: str) -> None:
    """Count a start, then sleep for an hour in one C call: nothing can interrupt it."""
    get_client().hincrby("{test}:runs", label, 1)
    time.sleep(3600)


@redis_task(queue="test")
def spin(label: str) -> None:
    """Count a start, then loop until stopped from outside (no time limit)."""
    get_client().hincrby("{test}:runs", label, 1)
    while True:
        time.sleep(0.01)


@redis_task(queue="test")
def whoami(label: str, seconds: float) -> int:
    """Count a start, sleep ``seconds``, and return the pid of the process that ran it."""
    get_client().hincrby("{test}:runs", label, 1)
    time.sleep(seconds)
    return os.getpid()


@redis_task(queue="test")
def write_document(label: str, pause: float = 0.0) -> int:
    """Write a row through the ORM, note the thread (each has its own connection), and
    count the rows with this label."""
    import threading

    from .models import Document

    Document.objects.create(body=label)
    time.sleep(pause)
    get_client().sadd("{test}:db-threads", threading.get_ident())
    return Document.objects.filter(body=label).count()


@redis_task(queue="test")
async def write_document_async(label: str) -> int:
    """The same through Django's async ORM, from an ``async def`` task."""
    from .models import Document

    await Document.objects.acreate(body=label)
    return await Document.objects.filter(body=label).acount()


@redis_task(queue="test")
async def together_async(label: str, count: int, timeout: float = 10.0) -> bool:
    """``together`` for ``async def`` tasks: only a worker running ``count`` of them on
    its event loop at once makes them meet."""
    client = get_client()
    client.incr("{test}:together")
    deadline = time.monotonic() + timeout
    met = False
    while not met and time.monotonic() < deadline:
        met = int(client.get("{test}:together") or 0) >= count
        await asyncio.sleep(0.005)
    client.hset("{test}:met", label, int(met))
    return met


@redis_task(queue="test", soft_time_limit=0.3, max_retries=0)
async def async_polite(label: str, tidy: bool) -> str:
    """Wait forever; at the soft limit, tidy up and return (``tidy``) or end there."""
    try:
        while True:
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        get_client().hincrby("{test}:runs", label, 1)
        if not tidy:
            raise
        return "tidied"


@redis_task(queue="test", time_limit=1, max_retries=0)
async def blocks_the_loop(label: str, seconds: float) -> None:
    """A mistake: a blocking sleep in an ``async def`` task, which stops its event loop."""
    get_client().hincrby("{test}:runs", label, 1)
    time.sleep(seconds)


@redis_task(queue="test", time_limit=1, max_retries=0)
async def async_forever(label: str) -> None:
    """Await forever (its hard time limit ends it; the coroutine is cancelled)."""
    get_client().hincrby("{test}:runs", label, 1)
    while True:
        await asyncio.sleep(0.01)


@redis_task(queue="test")
def gated(label: str) -> None:
    """Mark the start, then wait (30 s at most) until a test sets ``test:<label>:open``."""
    client = get_client()
    client.set(f"test:{label}:started", 1)
    deadline = time.monotonic() + 30
    while not client.exists(f"test:{label}:open") and time.monotonic() < deadline:
        time.sleep(0.005)


@redis_task(queue="test")
def member(label: str, pause: float = 0.0) -> str:
    """A workflow's step: count its run of ``label``, sleep ``pause`` seconds, return
    ``label``."""
    record.call(label, pause)
    return label


@redis_task(queue="test")
def follow(previous: str, label: str) -> str:
    """A step after another: count its run of ``label`` and return ``previous>label``."""
    record.call(label)
    return f"{previous}>{label}"


@redis_task(queue="test")
def total(results: list[object], label: str = "total") -> int:
    """A fan-in: count its run of ``label``, keep what it was given (JSON, under
    ``{test}:given:<label>``) and return how many results it got."""
    record.call(label)
    get_client().rpush(f"{{test}}:given:{label}", json.dumps(results))
    return len(results)


@redis_task(queue="test")
def length(results: list[object], plus: int) -> int:
    """A member of a group after a group: how many results it was given, plus ``plus``."""
    return len(results) + plus


@redis_task(queue="test", max_retries=0)
def fail_now(label: str) -> None:
    """Count a run of ``label`` and fail at once, for good."""
    record.call(label)
    raise ValueError(f"{label} failed")


class Halt(BaseException):
    """A ``BaseException`` of a user's own, neither an ``Exception`` nor ``SystemExit``."""


BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "Halt": Halt,
}


@redis_task(queue="test", max_retries=0)
def raise_base(label: str) -> None:
    """Count a run of ``label``, then end with the ``BaseException`` it names."""
    record.call(label)
    raise BASE_EXCEPTIONS[label]


@redis_task(queue="test", max_retries=0)
async def araise_base(label: str) -> None:
    """``raise_base`` as an ``async def`` task; ``"CancelledError"``: the task awaits a
    sub-task that something else cancels."""
    record.call(label)
    if label == "CancelledError":
        inner = asyncio.ensure_future(asyncio.sleep(10))
        asyncio.get_running_loop().call_later(0.01, inner.cancel)
        await inner
    raise BASE_EXCEPTIONS[label]


@redis_task(queue="test")
def thread_ident() -> int:
    """The ident of the thread that runs it."""
    return threading.get_ident()


@redis_task(queue="test", time_limit=1, max_retries=0)
def quick_with_limit(label: str) -> str:
    """Return at once, well within its time limit of 1 s."""
    record.call(label)
    return label


@redis_task(queue="test")
def hold_gil(label: str, n: int) -> int:
    """Count a start, then compute in one C call that holds the GIL throughout (no
    other thread of the process runs meanwhile), and count the end."""
    record.call(label)
    total = sum(range(n))
    get_client().hincrby("{test}:ended", label, 1)
    return total


@redis_task(queue="test")
def copies(label: str) -> int:
    """Count a run, wait (10 s at most) until two runs of ``label`` have started, and
    return; a copy delivered again (a retry count above 0) returns 0.3 s later."""
    running = current_task()
    assert running is not None
    client = get_client()
    client.hincrby("{test}:runs", label, 1)
    deadline = time.monotonic() + 10
    while int(client.hget("{test}:runs", label) or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    if running.message.retries:
        time.sleep(0.3)
    return running.message.retries


# -- limits: each run counts how many of its key run at once, as it starts ------------

_AT_ONCE = """
local now = redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2]))
if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or 0) < now then
  redis.call('HSET', KEYS[2], ARGV[1], now)
end
"""


def _at_once(key: str, pause: float) -> None:
    """Count ``key`` as running ("{test}:now") and its most at once ("{test}:most") while
    sleeping ``pause`` seconds."""
    client = get_client()
    client.eval(_AT_ONCE, 2, "{test}:now", "{test}:most", key, 1)
    try:
        time.sleep(pause)
    finally:
        client.eval(_AT_ONCE, 2, "{test}:now", "{test}:most", key, -1)


@redis_task(queue="test", limits=[concurrency_limit(3, key="customer:{customer}")])
def per_customer(customer: str, label: str, pause: float = 0.0) -> None:
    """At most 3 at once per customer."""
    _at_once(customer, pause)
    record.call(label)


@redis_task(queue="test", limits=[concurrency_limit(1, key="turn:{key}")])
def one_per_key(key: str, label: str, pause: float = 0.0) -> None:
    """One at a time per key."""
    _at_once(key, pause)
    record.call(label)


@redis_task(queue="test", limits=[concurrency_limit(1, key="past")], time_limit=1.0, max_retries=0)
def past_its_limit(label: str, seconds: float) -> None:
    """One at a time; counted as running ("past") for ``seconds`` in one call, past its
    hard limit of 1 s: until its code really ends, not until it is settled."""
    _at_once("past", seconds)


@redis_task(queue="test", limits=[concurrency_limit(1, key="spans")])
def key_spans(label: str, seconds: float) -> None:
    """One at a time; its first run sleeps ``seconds``, a run again 0.05 s; each run adds
    "<label> <start> <end>" (time.time()) to "{test}:spans"."""
    client = get_client()
    first = client.hsetnx("{test}:first", label, os.getpid())
    start = time.time()
    time.sleep(seconds if first else 0.05)
    client.rpush("{test}:spans", f"{label} {start} {time.time()}")


def _mixed(label: str, pause: float) -> None:
    """Count "mix" as running while sleeping ``pause``; note how many ran at the start."""
    client = get_client()
    client.eval(_AT_ONCE, 2, "{test}:now", "{test}:most", "mix", 1)
    try:
        client.rpush("{test}:mix", f"{label} {client.hget('{test}:now', 'mix').decode()}")
        time.sleep(pause)
    finally:
        client.eval(_AT_ONCE, 2, "{test}:now", "{test}:most", "mix", -1)


@redis_task(queue="test", limits=[concurrency_limit(1, key="mix")])
def mix_low(label: str, pause: float) -> None:
    """Key "mix" at 1 at once."""
    _mixed(label, pause)


@redis_task(queue="test", limits=[concurrency_limit(4, key="mix")])
def mix_high(label: str, pause: float) -> None:
    """Key "mix" at 4 at once."""
    _mixed(label, pause)


@redis_task(queue="test", limits=[concurrency_limit(1, key="stuck")])
def stuck_on_key(label: str, seconds: float) -> None:
    """One at a time; counted as running ("stuck") for ``seconds`` in one call."""
    _at_once("stuck", seconds)


@redis_task(queue="test", limits=[concurrency_limit(2, key="account:{account}")])
def per_account(account: str, label: str) -> None:
    """At most 2 at once per account; counts its run."""
    _at_once(account, 0.005)
    record.call(label)


@redis_task(queue="email", limits=[concurrency_limit(2, key="account:{name}")])
def mail_account(name: str, label: str) -> None:
    """per_account's key (another argument's name) from another queue: on a cluster,
    counted apart (rc_worker warns of it)."""
    record.call(label)


@redis_task(queue="test", limits=[rate_limit(20, per=1.0, burst=5, key="api")])
def rated(label: str) -> None:
    """At most 20 starts a second, 5 more in a burst."""
    record.call(label)


@redis_task(queue="test", limits=[rate_limit(4, per=1.0, key="four")])
def four_a_second(label: str) -> None:
    """At most 4 starts a second; notes "<label> <time.time()>" as its code starts."""
    get_client().rpush("{test}:code_starts", f"{label} {time.time()}")


@redis_task(queue="test", limits=[concurrency_limit(1)])
def one_at_a_time(label: str) -> None:
    """Its own limit: one at a time; waits for "test:<label>:open" as gated does."""
    gated.call(label)


@redis_task(
    queue="test",
    limits=[concurrency_limit(5, key="both"), rate_limit(5, per=1.0, key="both")],
)
def both_limits(label: str, gate: bool = False) -> None:
    """At most 5 at once and 5 starts a second; ``gate``: waits as gated does."""
    if gate:
        gated.call(label)
    record.call(label)


@redis_task(queue="test", partition_key="customer:{customer}")
def customer_step(customer: str, step: int) -> None:
    """Append ``step`` to the customer's list (on a partitioned queue, one partition's)."""
    get_client().rpush(f"{{test}}:steps:{customer}", step)


@redis_task(queue="test", takes_context=True)
def save_and_wait(context: RedisTaskContext, label: str) -> bool:
    """Save {"stage": "saved"} in its metadata, wait for ``test:<label>:go`` (10 s at
    most), then end with {"stage": "done"}: whether the save was saved."""
    context.metadata["stage"] = "saved"
    saved = context.save_metadata()
    get_client().set(f"test:{label}:saved", 1)
    deadline = time.monotonic() + 10
    while not get_client().exists(f"test:{label}:go") and time.monotonic() < deadline:
        time.sleep(0.005)
    context.metadata["stage"] = "done"
    return saved


@redis_task(queue="test", max_attempts=2)
def crash_first(label: str) -> int:
    """Kill its worker process in its first attempt; a crash counts as an attempt."""
    runs = get_client().hincrby("{test}:runs", label, 1)
    if runs == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return runs


@redis_task(queue="test", max_attempts=2)
def crash_always(label: str) -> None:
    """Kill its worker process in every attempt: its 2 attempts are spent by crashes."""
    crash.call(label)


@redis_task(queue="test", takes_context=True, max_attempts=2)
def save_then_crash(context: RedisTaskContext, label: str) -> dict[str, Any]:
    """In its first attempt, save metadata, change it again, and kill its worker; return
    the metadata its next attempt starts from."""
    if context.attempt == 1:
        context.metadata["saved"] = label
        context.save_metadata()
        context.metadata["unsaved"] = True  # lost with the process
        os.kill(os.getpid(), signal.SIGKILL)
    return dict(context.metadata)


@redis_task(queue="test", takes_context=True)
def progress_until_killed(context: RedisTaskContext, label: str) -> list[object] | None:
    """Its first run says 3 of 10, sets ``test:<label>:said`` and waits to be killed
    (30 s at most); a run after it returns the progress it finds (done, total, note),
    then says 10 of 10."""
    client = get_client()
    if client.set(f"test:{label}:ran", 1, nx=True):
        context.set_progress(3, 10, "before the kill")
        client.set(f"test:{label}:said", 1)
        time.sleep(30)
    found = get_progress(context.task_result.id)
    context.set_progress(10, 10, "after")
    return None if found is None else [found.done, found.total, found.note]


@redis_task(queue="test")
def traced_child(label: str) -> None:
    """Start a span of its own (tests/test_tracing.py): OpenTelemetry is imported here,
    never by this module, which every test process imports."""
    from opentelemetry import trace

    with trace.get_tracer("test").start_as_current_span(f"inside {label}"):
        pass


@redis_task(queue="test", max_attempts=2)
def traced_crash(label: str) -> int:
    """Start a span of its own, then kill its worker process in its first attempt: the
    span, ended and exported before the kill, names the lost attempt as its parent."""
    from opentelemetry import trace

    with trace.get_tracer("test").start_as_current_span(f"before the crash {label}"):
        pass
    time.sleep(0.2)  # (long enough for its context to be kept: tracing.KEEP_AFTER)
    return crash_first.call(label)


@redis_task(queue="test", max_retries=5)
def slow_retry_once(label: str) -> None:
    """:func:`retry_once`, each attempt 0.2 s long (its context is kept while it runs)."""
    time.sleep(0.2)
    retry_once.call(label)


@redis_task(queue="test")
async def async_traced_child(label: str) -> None:
    """:func:`traced_child` on a worker's event loop."""
    await asyncio.sleep(0)
    traced_child.call(label)


@redis_task(queue="test", time_limit=0.3, max_retries=1, retry_backoff=0.01)
def stuck_once(label: str) -> str:
    """A first attempt that outlives its hard time limit and the stop it is sent by 0.5 s,
    then says when its code ended (epoch ns); the second returns at once."""
    client = get_client()
    if client.hincrby("{test}:runs", label, 1) > 1:
        return "second"
    try:
        while True:
            time.sleep(0.01)
    finally:
        time.sleep(0.5)
        client.set(f"{{test}}:{label}:ended", time.time_ns())
