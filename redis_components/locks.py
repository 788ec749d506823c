"""Distributed locks: ``RedisLock``, the ``redis_lock`` decorator and context manager.

::

    with redis_lock("market:item:42", timeout=30, blocking_timeout=5) as handle:
        ...                                   # LockNotAcquired if busy for 5 s

    @redis_lock("market:item:{item_id}")      # on a view: HTTP 409 + Retry-After when busy
    def purchase(request, item_id): ...

How it works (every key of one lock shares the ``{name}`` hash tag)::

    rc:lock:{name}          the holder's token, with the lease as its TTL (SET NX PX)
    rc:lock:{name}:fence    a counter incremented by every grant: the fencing token
    rc:lock:{name}:waiters  ZSET of waiters' tokens -> registration deadline
    rc:lock:{name}:grant    a list holding the grant a release hands to the next waiter

Acquiring is one script: take the lock if free (and a new fence), else register as a waiter.
A waiter then blocks on the grant list (BLPOP). Releasing is one script: if someone waits,
the lock is handed over (new token, new fence, full lease) and the grant is pushed to the
list, where Redis gives it to the longest-blocked waiter, who holds the lock as soon as its
BLPOP returns; if nobody waits, the key is deleted. So waiting costs no polling, blocked
waiters are served in the order they blocked (a releasing process cannot barge back in ahead
of them; a grant that finds nobody blocked goes to whoever asks next), and an uncontended
acquire + release is two round trips.

A waiter never blocks past the holder's lease (waiting.py keeps that deadline on the client:
an idle Redis notices blocking timeouts only every 1/hz seconds). A waiter that died is
unblocked by Redis when its connection closes; its registration lapses, and the next waiter
to register sweeps it.

The lease is the lock's safety net, not a promise: a holder paused past its lease loses the
lock. ``handle.check()`` and ``handle.lost`` tell it so, ``auto_renew`` keeps the lease
alive while the process lives, and the fence (which grows with every grant) lets the data
refuse a stale holder's write: see :func:`fenced_update` and :func:`fenced_set`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import metrics
from .conf import conf
from .connection import get_async_client, get_client, is_cluster, text
from .deprecation import deprecated
from .exceptions import (
    ConfigurationError,
    InvalidInput,
    LockAlreadyHeld,
    LockError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
)
from .guard import Busy, Guard
from .keys import MAX_SECONDS, is_integer, key, seconds, shorten, validate_name
from .scripts import Arg, Call, arun_and_wait, load, run_and_wait, run_many
from .tracing import holds
from .waiting import (
    LONGEST_REGISTRATION_MS,
    Attempt,
    await_grant,
    ms,
    positive_seconds,
    wait_for_grant,
    wait_seconds,
)
from .watchdog import watchdog

if TYPE_CHECKING:
    from django.db.models import QuerySet

logger = logging.getLogger(__name__)

ACQUIRE, RELEASE, EXTEND, FENCED_SET = "lock_acquire", "lock_release", "lock_extend", "fenced_set"
# How long a grant waits for the replicas to acknowledge it (with wait_for_replicas).
WAIT_TIMEOUT = 1.0
# The lock key is followed by these, in the order the scripts take them.
PARTS = ("fence", "waiters", "grant")

# The locks held in this context, by name, to notice nested acquisition (see `reentrant`).
_held: contextvars.ContextVar[dict[str, LockHandle]] = contextvars.ContextVar("rc_held_locks")

H = TypeVar("H", "LockHandle", "LockGroup")


def _current_owner() -> object:
    """The asyncio task running this code, or else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task if task is not None else threading.get_ident()


class RedisLock:
    """A lock on one name, shared by every process that uses the same Redis.

    ``timeout`` is the lease in seconds (default ``LOCK_TIMEOUT``): a holder that does not
    release or extend it within that time loses the lock. ``auto_renew=True`` renews the lease
    every ``timeout / 3`` while the process lives; if a renewal finds the lease gone, the
    handle is marked lost and ``on_lost(handle)`` is called (in the watchdog's thread).

    Nested acquisition: a blocking acquire of a name that the same thread or asyncio task
    already holds raises :class:`LockAlreadyHeld` at once (instead of waiting for its own
    lease to run out), and a non-blocking one returns ``None`` (busy), unless
    ``reentrant=True``: then the same handle is returned and counted, and only the outermost
    release releases the lock.

    ``with RedisLock(...) as handle:`` acquires as :meth:`acquire` does (raising
    :class:`LockNotAcquired` when it times out) and releases at the end, raising
    :class:`LockLost` there if the lease ran out during the block, as ``redis_lock`` does.
    """

    def __init__(
        self,
        name: str,
        timeout: float | None = None,
        *,
        auto_renew: bool = False,
        on_lost: Callable[[LockHandle], object] | None = None,
        reentrant: bool = False,
        wait_for_replicas: int | None = None,
    ) -> None:
        self.name = validate_name(name, "name")
        self.timeout = positive_seconds(
            conf.LOCK_TIMEOUT if timeout is None else timeout, "timeout"
        )
        self.lease_ms = ms(self.timeout)
        self.auto_renew = auto_renew
        self.on_lost = on_lost
        self.reentrant = reentrant
        if wait_for_replicas is not None and not (
            is_integer(wait_for_replicas) and wait_for_replicas >= 1
        ):
            raise InvalidInput(
                "wait_for_replicas",
                f"must be a positive integer or None, not {wait_for_replicas!r}",
            )
        self.wait_for_replicas = wait_for_replicas
        self.keys = [key("lock", name), *(key("lock", name, part) for part in PARTS)]
        # What `with` took, per thread or task: its exit releases that one.
        self._entered: dict[object, list[LockHandle]] = {}

    def __repr__(self) -> str:
        return f"<RedisLock {self.name!r} timeout={self.timeout:g}>"

    def acquire(
        self, blocking: bool = True, blocking_timeout: float | None = None
    ) -> LockHandle | None:
        """Take the lock; return its handle, or ``None`` if not acquired in time.

        ``blocking=False`` (or ``blocking_timeout=0``) tries once. Otherwise wait at most
        ``blocking_timeout`` seconds (default ``LOCK_BLOCKING_TIMEOUT``; ``math.inf``: without
        a limit), woken by the holder's release or its lease's expiry, never by polling.
        """
        return self._acquire(blocking, blocking_timeout)[0]

    async def aacquire(
        self, blocking: bool = True, blocking_timeout: float | None = None
    ) -> LockHandle | None:
        """:meth:`acquire` for asyncio code, on ``redis.asyncio``."""
        return (await self._aacquire(blocking, blocking_timeout))[0]

    # The acquire loop exists twice, sync and async; everything else is shared.

    @holds.acquisition("lock")
    def _acquire(
        self, blocking: bool, blocking_timeout: float | None
    ) -> tuple[LockHandle | None, float]:
        """The handle (or None) and, when busy, the seconds left on the holder's lease."""
        attempt = _Attempt(self, blocking, blocking_timeout)
        nested = self._nested(attempt.waits)
        if nested is not None:
            return nested
        client = get_client()
        waited = False
        while True:
            handle = attempt.outcome(load(ACQUIRE)(client, self.keys, attempt.arguments()))
            if handle is not None:
                return _holding(handle, waited), 0.0
            if attempt.expired():
                _counted(None, waited)
                return None, attempt.retry_after
            waited = True
            grant = wait_for_grant(client, self.keys[3], attempt.wait_slice())
            if grant is not None:
                return _holding(attempt.granted(grant), waited), 0.0

    @holds.acquisition("lock")
    async def _aacquire(
        self, blocking: bool, blocking_timeout: float | None
    ) -> tuple[LockHandle | None, float]:
        attempt = _Attempt(self, blocking, blocking_timeout)
        nested = self._nested(attempt.waits)
        if nested is not None:
            return nested
        client = get_async_client()
        if self.wait_for_replicas and is_cluster(client):
            raise ConfigurationError(
                "wait_for_replicas needs the sync API on Redis Cluster (its WAIT must share a "
                "connection with the grant, which the asyncio cluster client does not offer)"
            )
        waited = False
        while True:
            reply = await load(ACQUIRE).run_async(client, self.keys, attempt.arguments())
            handle = attempt.outcome(reply)
            if handle is not None:
                return await _aholding(handle, waited), 0.0
            if attempt.expired():
                _counted(None, waited)
                return None, attempt.retry_after
            waited = True
            grant = await await_grant(client, self.keys[3], attempt.wait_slice())
            if grant is not None:
                return await _aholding(attempt.granted(grant), waited), 0.0

    def _held_here(self) -> LockHandle | None:
        """This thread's or task's handle of this name, if it holds one."""
        held = _held.get({}).get(self.name)
        # A task started by the holder inherits its context, but is not the holder.
        if held is None or held.owner != _current_owner() or not held.maybe_held():
            return None
        return held

    def _nested(self, waits: bool) -> tuple[LockHandle | None, float] | None:
        """What an acquire of a name this thread or task holds gives (``None``: not
        held here): the same handle if reentrant, else busy, or an error if it waits."""
        held = self._held_here()
        if held is None:
            return None
        if self.reentrant:
            held.depth += 1
            return held, 0.0
        if not waits:
            return None, max(held.lease_ends - time.monotonic(), 0.0)
        raise LockAlreadyHeld(
            f"Lock {self.name!r} is already held by this thread or task: waiting for it "
            "would wait for its own lease. Release it first, try with blocking=False, or "
            "create the lock with reentrant=True to allow nesting.",
            self.name,
        )

    def locked(self) -> bool:
        """Whether anyone holds this name now (one round trip)."""
        return bool(get_client().exists(self.keys[0]))

    async def alocked(self) -> bool:
        return bool(await get_async_client().exists(self.keys[0]))

    def __enter__(self) -> LockHandle:
        return self._entering(self.acquire())

    def __exit__(self, exc_type: object, *exc: object) -> None:
        _release_all([self._leaving()], ok=exc_type is None)

    async def __aenter__(self) -> LockHandle:
        return self._entering(await self.aacquire())

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        await _arelease_all([self._leaving()], ok=exc_type is None)

    def _entering(self, handle: LockHandle | None) -> LockHandle:
        if handle is None:
            raise LockNotAcquired(f"Lock {self.name!r} is busy", self.name)
        self._entered.setdefault(_current_owner(), []).append(holds.entered(handle))
        return handle

    def _leaving(self) -> LockHandle:
        owner = _current_owner()
        handle = self._entered[owner].pop()
        if not self._entered[owner]:
            del self._entered[owner]
        return handle


def _extension_ms(value: object) -> int:
    """``extend()``'s ``additional_time`` in ms: any finite number of seconds (at most
    ``MAX_SECONDS`` either way), as redis-py takes it; 0 or less asks for no change."""
    if (is_integer(value) or isinstance(value, float)) and value < 0:
        try:
            number = seconds(-value, "additional_time")
        except InvalidInput:
            raise InvalidInput(
                "additional_time",
                f"must be a finite number of seconds, at least -{MAX_SECONDS:,}, "
                f"not {shorten(value)}",
            ) from None
        return -math.floor(number * 1000)
    number = seconds(value, "additional_time")
    return ms(number) if number > 0 else 0


def _counted(handle: LockHandle | None, waited: bool) -> None:
    """Count an acquisition for the metrics (nothing is counted unless METRICS is on)."""
    if waited:
        metrics.count("lock_waits")
    metrics.count("lock_grants" if handle is not None else "lock_refusals")


# Once Redis granted a lock, whatever raises before the caller has the handle (a failed
# extend or WAIT, a cancelled task, a signal handler) gives the lock back first: nobody
# else could release it, and it would stay taken for its whole lease.


def _holding(handle: LockHandle, waited: bool) -> LockHandle:
    """Finish a grant (confirm it, count it); if anything raises, release it first."""
    try:
        handle.confirm()
        _counted(handle, waited)
    except BaseException:
        _release_all([handle], ok=False)
        raise
    return handle


async def _aholding(handle: LockHandle, waited: bool) -> LockHandle:
    try:
        await handle.aconfirm()
        _counted(handle, waited)
    except BaseException:
        await _arelease_all([handle], ok=False)
        raise
    return handle


class _Attempt(Attempt):
    """One acquisition of a lock."""

    def __init__(self, lock: RedisLock, blocking: bool, blocking_timeout: float | None) -> None:
        wait = 0.0
        if blocking:
            default = conf.LOCK_BLOCKING_TIMEOUT if blocking_timeout is None else blocking_timeout
            wait = wait_seconds(default, "blocking_timeout")
        super().__init__(wait)
        self.lock = lock
        # Whether a try of this attempt registered it as a waiter (then its next try, or
        # the grant's release, drops the registration).
        self.registered = False

    def arguments(self) -> list[Arg]:
        register = self.register_ms()
        registered = "1" if self.registered else ""
        self.registered = self.registered or register > 0
        return [self.token, self.lock.lease_ms, register, registered, LONGEST_REGISTRATION_MS]

    def outcome(self, reply: Sequence[Any]) -> LockHandle | None:
        acquired, token, fence, lease_ms = reply
        if int(acquired):
            handle = LockHandle(self.lock, text(token), int(fence), registration="")
            handle.granted_lease = int(lease_ms) / 1000
            return handle
        self.retry_after = max(int(lease_ms), 0) / 1000
        return None

    def granted(self, grant: str) -> LockHandle:
        fence, lease_ms, token = grant.split(" ", 2)
        handle = LockHandle(self.lock, token, int(fence), registration=self.token)
        handle.granted_lease = int(lease_ms) / 1000
        return handle


class LockHandle:
    """Proof of holding a lock: its ``name``, ``token`` and ``fence``.

    The handle, not the thread, owns the lock: it may be released from another thread
    or asyncio task. ``fence`` grows with every grant of this name, so data written
    under the lock can refuse an older holder (see :func:`fenced_update`).
    """

    def __init__(self, lock: RedisLock, token: str, fence: int, registration: str) -> None:
        self.lock = lock
        self.token = token
        self.fence = fence
        self.registration = registration
        self.granted_lease = lock.timeout
        self.lease_ends = time.monotonic() + lock.timeout
        self.depth = 1
        self.owner: object = None
        self.released = False
        self._lost = False
        # A release was sent and its reply never handled (the connection dropped, the task
        # was cancelled, a signal handler raised): Redis may have released the lock.
        self._release_interrupted = False

    def __repr__(self) -> str:
        state = "lost" if self._lost else "released" if self.released else "held"
        return f"<LockHandle {self.name!r} fence={self.fence} {state}>"

    @property
    def name(self) -> str:
        return self.lock.name

    @property
    def lost(self) -> bool:
        """True once the lease is known to be gone (watchdog, failed extend, release or check)."""
        return self._lost

    def maybe_held(self) -> bool:
        """False when the lock is surely not held: released, lost, or past its lease."""
        if self.released or self._lost:
            return False
        return self.lock.auto_renew or time.monotonic() < self.lease_ends

    # -- acquisition bookkeeping -------------------------------------------------

    def confirm(self) -> LockHandle:
        """Finish a grant: make the lease as long as this lock asks, then start holding.

        With ``wait_for_replicas``, the lease is renewed once more and Redis WAITs for
        the replicas to have it: the master's replication stream is ordered, so they then
        have the grant too.
        """
        replicas = self.lock.wait_for_replicas
        if replicas:
            call = self._extend_call(self.lock.timeout)
            extended, acknowledged = run_and_wait(get_client(), call, replicas, WAIT_TIMEOUT)
            self._replicated(extended, acknowledged)
        elif self.granted_lease < self.lock.timeout:
            self.renew()
        return self._start()

    async def aconfirm(self) -> LockHandle:
        replicas = self.lock.wait_for_replicas
        if replicas:
            call = self._extend_call(self.lock.timeout)
            client = get_async_client()
            extended, acknowledged = await arun_and_wait(client, call, replicas, WAIT_TIMEOUT)
            self._replicated(extended, acknowledged)
        elif self.granted_lease < self.lock.timeout:
            await self.arenew()
        return self._start()

    def _replicated(self, extended: object, acknowledged: int) -> None:
        self._extended(extended)
        if acknowledged < (self.lock.wait_for_replicas or 0):
            self.depth = 1
            with contextlib.suppress(LockNotOwned):
                self.release()
            raise LockError(
                f"Lock {self.name!r} was granted, but {acknowledged} of "
                f"{self.lock.wait_for_replicas} replicas acknowledged it within "
                f"{WAIT_TIMEOUT:g} s; it was released again",
                self.name,
            )

    def _start(self) -> LockHandle:
        self.owner = _current_owner()
        _held.set({**_held.get({}), self.name: self})
        if self.lock.auto_renew:
            watchdog.add(self)
        return self

    def _mark_lost(self) -> None:
        self._lost = True
        self._stop()

    def _stop(self) -> None:
        holds.stopped(self)
        if self.lock.auto_renew:
            watchdog.remove(self)
        held = _held.get({})
        if held.get(self.name) is self:
            _held.set({k: v for k, v in held.items() if k != self.name})

    # -- renew and extend -------------------------------------------------------

    def _extend_call(self, seconds: float, add: bool = False) -> Call:
        return self._extend_ms_call(ms(seconds), add)

    def _extend_ms_call(self, milliseconds: int, add: bool) -> Call:
        args: list[Arg] = [self.token, milliseconds, "add" if add else "set"]
        return load(EXTEND), self.lock.keys[:1], args

    def _extended(self, result: object) -> None:
        if not result:
            self._mark_lost()
            raise LockNotOwned(f"Lock {self.name!r} was lost before it was extended", self.name)
        self.lease_ends = time.monotonic() + int(str(result)) / 1000

    def renew(self) -> None:
        """Restart the lease: the lock's ``timeout`` from now.

        Raises :class:`LockNotOwned` (and marks the handle lost) if the lease had run out.
        """
        script, keys, args = self._extend_call(self.lock.timeout)
        self._extended(script(get_client(), keys, args))

    async def arenew(self) -> None:
        script, keys, args = self._extend_call(self.lock.timeout)
        self._extended(await script.run_async(get_async_client(), keys, args))

    def _extension(self, additional_time: float | None, replace_ttl: bool) -> Call:
        if additional_time is None:
            deprecated("extend() without additional_time", "use renew()", stacklevel=3)
            return self._extend_call(self.lock.timeout)
        return self._extend_ms_call(_extension_ms(additional_time), add=not replace_ttl)

    def extend(self, additional_time: float | None = None, replace_ttl: bool = False) -> None:
        """Change the lease, as redis-py's ``Lock.extend`` does: add ``additional_time``
        seconds to what is left of it, or, with ``replace_ttl=True``, make it
        ``additional_time`` seconds from now. Where that comes to 0 seconds or less (a
        time of 0 or less, or a negative one larger than what is left), the lease stays
        as it is, as in redis-py. (Without arguments it renews, as :meth:`renew` does,
        with a deprecation warning.)

        Raises :class:`LockNotOwned` (and marks the handle lost) if the lease had run out.
        """
        script, keys, args = self._extension(additional_time, replace_ttl)
        self._extended(script(get_client(), keys, args))

    async def aextend(
        self, additional_time: float | None = None, replace_ttl: bool = False
    ) -> None:
        script, keys, args = self._extension(additional_time, replace_ttl)
        self._extended(await script.run_async(get_async_client(), keys, args))

    def owned(self) -> bool:
        """Whether this handle still holds the lock (one round trip; none once released)."""
        if self.released or self._lost:
            return False
        value = get_client().get(self.lock.keys[0])
        return value is not None and text(value) == self.token

    async def aowned(self) -> bool:
        if self.released or self._lost:
            return False
        value = await get_async_client().get(self.lock.keys[0])
        return value is not None and text(value) == self.token

    # -- check -------------------------------------------------------------------

    def _checked(self, value: object) -> None:
        if self.released:
            raise LockLost(
                f"Lock {self.name!r} was released: this handle holds it no more", self.name
            )
        if value is None or text(value) != self.token:
            self._mark_lost()
        if self._lost:
            raise LockLost(f"The lease of lock {self.name!r} ran out", self.name)

    def check(self) -> None:
        """Raise :class:`LockLost` if the lease is gone (one GET, or none once known lost)."""
        self._checked(None if self._lost or self.released else get_client().get(self.lock.keys[0]))

    async def acheck(self) -> None:
        gone = self._lost or self.released
        self._checked(None if gone else await get_async_client().get(self.lock.keys[0]))

    # -- release -----------------------------------------------------------------

    def _release_call(self) -> tuple[Call, bool]:
        """The release script's call, and whether an earlier release was interrupted.

        Nothing about the handle changes until the reply is handled (:meth:`_released`):
        a release that raises, for whatever reason, leaves the handle held, and a retry
        sends the release again.
        """
        interrupted = self._release_interrupted
        self._release_interrupted = True  # until the reply is handled
        holds.releasing(self)
        args: list[Arg] = [self.token, self.registration, self.lock.lease_ms]
        return (load(RELEASE), self.lock.keys, args), interrupted

    def _outermost(self) -> bool:
        """Whether this release must reach Redis; an inner one of a reentrant lock only
        counts down (no I/O, so it cannot be interrupted half-way)."""
        if self.released:
            raise LockNotOwned(f"Lock {self.name!r} was already released", self.name)
        if self.depth > 1:
            self.depth -= 1
            return False
        return True

    def _released(self, result: object, retried: bool) -> None:
        self._release_interrupted = False
        self.depth = 0
        self.released = True
        if not result and not retried:
            self._mark_lost()
            raise LockNotOwned(f"Lock {self.name!r} was lost before it was released", self.name)
        # After an interrupted release, finding the lock gone is that release's success.
        self._stop()

    def release(self) -> None:
        """Release the lock (hand it to the next waiter, if any).

        Raises :class:`LockNotOwned` if the lease had run out (someone else may hold the
        lock now). With ``reentrant=True``, only the outermost release releases. If the
        call raises (a lost connection, a cancelled task), the handle is still held:
        call ``release()`` again.
        """
        if self._outermost():
            (script, keys, args), retried = self._release_call()
            self._released(script(get_client(), keys, args), retried)

    async def arelease(self) -> None:
        if self._outermost():
            (script, keys, args), retried = self._release_call()
            self._released(await script.run_async(get_async_client(), keys, args), retried)

    # -- the watchdog's Lease protocol -------------------------------------------

    @property
    def renew_interval(self) -> float:
        return self.lock.timeout / 3

    def renewal(self) -> Call:
        return self._extend_call(self.lock.timeout)

    def renewed(self, ok: bool) -> None:
        if not ok and not self.released:
            logger.warning("Lock %r was lost: its lease could not be renewed", self.name)
            self._mark_lost()
            if self.lock.on_lost is not None:
                self.lock.on_lost(self)


# -- the decorator and context manager ----------------------------------------------


class LockGroup:
    """The handles of several locks taken together, in sorted name order."""

    def __init__(self, handles: Sequence[LockHandle]) -> None:
        self.handles = tuple(handles)

    def __iter__(self) -> Iterator[LockHandle]:
        return iter(self.handles)

    def __repr__(self) -> str:
        return f"<LockGroup {[handle.name for handle in self.handles]!r}>"

    @property
    def lost(self) -> bool:
        return any(handle.lost for handle in self.handles)

    def check(self) -> None:
        """Raise :class:`LockLost` if any of the leases is gone."""
        for handle in self.handles:
            handle.check()


class LockScope(Guard[H]):
    """What :func:`redis_lock` returns: a context manager (sync and async) and a decorator."""

    kind = "lock"
    busy_status = 409
    error = LockError

    def __init__(
        self,
        names: Sequence[str],
        *,
        timeout: float | None,
        blocking: bool,
        blocking_timeout: float | None,
        auto_renew: bool,
        on_lost: Callable[[LockHandle], object] | None,
        on_busy: Callable[[Busy], Any] | None,
        reentrant: bool,
        wait_for_replicas: int | None,
    ) -> None:
        super().__init__(names, on_busy)
        self.options: dict[str, Any] = {
            "timeout": positive_seconds(
                conf.LOCK_TIMEOUT if timeout is None else timeout, "timeout"
            ),
            "auto_renew": auto_renew,
            "on_lost": on_lost,
            "reentrant": reentrant,
            "wait_for_replicas": wait_for_replicas,
        }
        self.blocking = blocking
        self.blocking_timeout = None
        if blocking:
            self.blocking_timeout = wait_seconds(
                conf.LOCK_BLOCKING_TIMEOUT if blocking_timeout is None else blocking_timeout,
                "blocking_timeout",
            )

    def _locks(self, names: Sequence[str]) -> list[RedisLock]:
        # Sorted, so two callers locking {a, b} and {b, a} cannot deadlock.
        return [RedisLock(name, **self.options) for name in sorted(set(names))]

    def _left(self, deadline: float) -> float | None:
        if self.blocking_timeout is None:
            return None
        if self.blocking_timeout == 0:  # try once, as acquire(blocking_timeout=0) does
            return 0.0
        return max(deadline - time.monotonic(), 0.001)

    def take(self, names: Sequence[str]) -> H | Busy:
        deadline = time.monotonic() + (self.blocking_timeout or 0)
        locks = self._locks(names)
        at_once = _try_all(locks)
        if at_once is not None:
            return self._taken(names, at_once)
        handles: list[LockHandle] = []
        try:
            for lock in locks:
                handle, retry_after = lock._acquire(self.blocking, self._left(deadline))
                if handle is None:
                    _release_all(handles, ok=False)
                    return Busy(tuple(names), retry_after, held=lock.name)
                handles.append(handle)
        except BaseException:
            _release_all(handles, ok=False)
            raise
        return self._taken(names, handles)

    async def atake(self, names: Sequence[str]) -> H | Busy:
        deadline = time.monotonic() + (self.blocking_timeout or 0)
        handles: list[LockHandle] = []
        try:
            for lock in self._locks(names):
                handle, retry_after = await lock._aacquire(self.blocking, self._left(deadline))
                if handle is None:
                    await _arelease_all(handles, ok=False)
                    return Busy(tuple(names), retry_after, held=lock.name)
                handles.append(handle)
        except BaseException:
            await _arelease_all(handles, ok=False)
            raise
        return self._taken(names, handles)

    def _taken(self, names: Sequence[str], handles: list[LockHandle]) -> H:
        holds.entered(handles[-1])
        return handles[0] if len(names) == 1 else LockGroup(handles)  # type: ignore[return-value]

    def give_back(self, taken: H, ok: bool) -> None:
        _release_all(_handles(taken), ok)

    async def agive_back(self, taken: H, ok: bool) -> None:
        await _arelease_all(_handles(taken), ok)

    def not_taken(self, busy: Busy) -> LockNotAcquired:
        """Names the lock that someone else holds; of several names, lists them all."""
        message = f"Lock {busy.name!r} is busy (retry after {busy.retry_after:.1f} s)"
        if len(busy.names) > 1:
            message += f", so none of {', '.join(map(repr, busy.names))} was taken"
        return LockNotAcquired(message, busy.name)


def _handles(taken: LockHandle | LockGroup) -> tuple[LockHandle, ...]:
    return taken.handles if isinstance(taken, LockGroup) else (taken,)


@holds.at_once
def _try_all(locks: Sequence[RedisLock]) -> list[LockHandle] | None:
    """Several free locks in one round trip: try each once, in order, in one pipeline.

    All or nothing: if any is busy (or one is already held by this task), what was taken
    is released and the caller takes them one by one, waiting, in the same order.
    """
    if len(locks) < 2 or any(lock._held_here() for lock in locks):
        return None
    attempts = [_Attempt(lock, blocking=False, blocking_timeout=None) for lock in locks]
    calls = [
        (load(ACQUIRE), lock.keys, a.arguments()) for lock, a in zip(locks, attempts, strict=True)
    ]
    replies = run_many(get_client(), calls)
    outcomes = [
        a.outcome(reply) if not isinstance(reply, Exception) else None
        for a, reply in zip(attempts, replies, strict=True)
    ]
    taken = [handle for handle in outcomes if handle is not None]
    if len(taken) < len(locks):
        _release_all(taken, ok=False)
        return None
    try:
        for handle in taken:
            handle.confirm()
            metrics.count("lock_grants")
    except BaseException:
        _release_all(taken, ok=False)
        raise
    return taken


def _release_all(handles: Sequence[LockHandle], ok: bool) -> None:
    """Release what was taken (in one round trip); report a lost lease unless an exception
    is on its way."""
    releasing = [
        handle for handle in reversed(handles) if not handle.released and handle._outermost()
    ]
    calls = [handle._release_call() for handle in releasing]
    results = run_many(get_client(), [call for call, _ in calls])
    lost, failed = None, None
    for handle, (_, retried), result in zip(releasing, calls, results, strict=True):
        if isinstance(result, Exception):
            failed = failed or result  # still held: releasing the handle again retries
            continue
        try:
            handle._released(result, retried)
        except LockNotOwned as error:
            lost = error
    if failed is not None:
        raise failed
    _report(lost, ok)


async def _arelease_all(handles: Sequence[LockHandle], ok: bool) -> None:
    """:func:`_release_all` on the async client, one release after another: a release
    that fails (the handle stays held, to retry) does not keep the others held."""
    lost, failed = None, None
    for handle in reversed(handles):
        if handle.released:
            continue
        try:
            await handle.arelease()
        except LockNotOwned as error:
            lost = error
        except Exception as error:
            failed = failed or error
    if failed is not None:
        raise failed
    _report(lost, ok)


def _report(lost: LockNotOwned | None, ok: bool) -> None:
    if lost is not None and ok:
        raise LockLost(f"{lost} (the block ran without exclusivity)", lost.name) from lost


@overload
def redis_lock(
    name: str,
    /,
    *,
    timeout: float | None = None,
    blocking: bool = True,
    blocking_timeout: float | None = None,
    auto_renew: bool = False,
    on_lost: Callable[[LockHandle], object] | None = None,
    on_busy: Callable[[Busy], Any] | None = None,
    reentrant: bool = False,
    wait_for_replicas: int | None = None,
) -> LockScope[LockHandle]: ...


@overload
def redis_lock(
    name: str,
    second: str,
    /,
    *names: str,
    timeout: float | None = None,
    blocking: bool = True,
    blocking_timeout: float | None = None,
    auto_renew: bool = False,
    on_lost: Callable[[LockHandle], object] | None = None,
    on_busy: Callable[[Busy], Any] | None = None,
    reentrant: bool = False,
    wait_for_replicas: int | None = None,
) -> LockScope[LockGroup]: ...


def redis_lock(
    *names: str,
    timeout: float | None = None,
    blocking: bool = True,
    blocking_timeout: float | None = None,
    auto_renew: bool = False,
    on_lost: Callable[[LockHandle], object] | None = None,
    on_busy: Callable[[Busy], Any] | None = None,
    reentrant: bool = False,
    wait_for_replicas: int | None = None,
) -> LockScope[Any]:
    """Hold one or more locks around a block or a function call (sync or async).

    As a context manager it yields the :class:`LockHandle` (a :class:`LockGroup` for several
    names) and raises :class:`LockNotAcquired` when a lock stays busy for ``blocking_timeout``
    seconds. Several names are locked in sorted order, all or nothing. If a lease was lost
    before the block ended, :class:`LockLost` is raised at its end (unless the block raised
    already).

    As a decorator, names are templates filled from the call's arguments
    (``"market:item:{item_id}"``); on a Django view they may also use ``{user}``, the
    request's user id. When busy, ``on_busy(busy)`` decides what the call returns; by default
    a view answers HTTP 409 with ``Retry-After``, anything else raises
    :class:`LockNotAcquired`.
    """
    return LockScope(
        names,
        timeout=timeout,
        blocking=blocking,
        blocking_timeout=blocking_timeout,
        auto_renew=auto_renew,
        on_lost=on_lost,
        on_busy=on_busy,
        reentrant=reentrant,
        wait_for_replicas=wait_for_replicas,
    )


# -- fencing -------------------------------------------------------------------------


def fenced_update(
    queryset: QuerySet[Any], fence: int, *, field: str = "fence", **values: Any
) -> bool:
    """Apply ``values`` to the rows only if their ``field`` is older than ``fence``.

    One conditional ``UPDATE ... SET field = fence, ... WHERE field < fence``: a holder
    whose lease ran out (and whose fence is therefore older than the next holder's)
    cannot overwrite what a newer holder wrote. Returns whether any row changed.
    """
    if not is_integer(fence):
        raise InvalidInput("fence", f"must be an integer fence token, not {fence!r}")
    changed: int = queryset.filter(**{f"{field}__lt": fence}).update(**{field: fence}, **values)
    return changed > 0


def fenced_set(name: str, value: str, fence: int) -> bool:
    """Store ``value`` under ``name`` in Redis unless a write with a newer fence came first."""
    if not is_integer(fence):
        raise InvalidInput("fence", f"must be an integer fence token, not {fence!r}")
    validate_name(name, "name")
    return bool(load(FENCED_SET)(get_client(), [key("fenced", name)], [fence, value]))


def fenced_get(name: str) -> tuple[str | None, int]:
    """The value stored by :func:`fenced_set` and the fence it was written with."""
    validate_name(name, "name")
    fence, value = get_client().hmget(key("fenced", name), ["fence", "value"])
    if fence is None:
        return None, 0
    return text(value), int(fence)
