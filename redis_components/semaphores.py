"""Counting semaphores: at most ``limit`` holders at once, never more.

::

    sem = RedisSemaphore("remote-api", limit=5, timeout=10)
    permit = sem.acquire()                  # a Permit, or None at once when all are taken
    ...
    sem.release(permit)

    with redis_semaphore("remote-api", limit=5): ...   # SemaphoreNotAcquired when full

    @redis_semaphore("export:{user}", limit=2)          # on a view: HTTP 429 + Retry-After
    def export(request): ...

Keys (all sharing the ``{name}`` hash tag)::

    rc:sem:{name}           ZSET holders: permit token -> server time (ms) of acquire/refresh
    rc:sem:{name}:owners    ZSET owners: permit token -> counter value (fair only)
    rc:sem:{name}:counter   the counter (fair only); 64-bit, so it cannot overflow in practice
                            (the book warns about 32-bit counters; Redis's INCR is 64-bit)
    rc:sem:{name}:waiters   ZSET of blocked acquirers' registrations
    rc:sem:{name}:grant     grants (fair) or wake signals (basic) for blocked acquirers

The book's three versions let a fourth holder in: two clients' round trips interleave,
and clients' clocks disagree. Here acquire, refresh and release are each one Lua script
that reads the time from the Redis server (``TIME``), so neither a race nor a skewed
client clock can admit an extra holder or steal a permit. Admission is one atomic test
(fewer live holders than ``limit``), so no ranking is needed to keep the count right.
``fair=False`` is the book's basic semaphore (a release wakes waiters, who then
compete); ``fair=True`` is the book's fair one: a release hands the permit straight to
the longest-waiting acquirer, so waiters are admitted in the order they asked, and the
owners ZSET and counter keep the book's data (``Permit.counter``). A permit expires
``timeout`` seconds after it was acquired or last refreshed; ``auto_refresh=True``
refreshes it every ``timeout / 3`` while held.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from django.utils.translation import gettext_lazy

from . import metrics
from .conf import conf
from .connection import get_async_client, get_client, text
from .exceptions import SemaphoreError, SemaphoreNotAcquired, SemaphoreNotOwned
from .guard import Busy, Guard
from .keys import integer, key, validate_name
from .scripts import Arg, Call, load
from .waiting import Attempt, await_grant, ms, positive_seconds, wait_for_grant
from .watchdog import watchdog

ACQUIRE, RELEASE, REFRESH, COUNT = "sem_acquire", "sem_release", "sem_refresh", "sem_count"


def _limit(value: object) -> int:
    return integer(value, "limit")


class RedisSemaphore:
    """A counting semaphore named ``name`` that admits at most ``limit`` holders.

    ``timeout`` (default ``SEMAPHORE_TIMEOUT``) is how long a permit lasts without a
    refresh: a holder that dies frees its permit then. ``acquire()`` returns ``None`` at
    once when every permit is taken (the book's "system busy"), or waits up to
    ``blocking_timeout`` seconds with ``blocking=True``, woken by a release or an expiry,
    never by polling.
    """

    def __init__(
        self,
        name: str,
        limit: int,
        timeout: float | None = None,
        *,
        fair: bool = True,
        auto_refresh: bool = False,
        on_lost: Callable[[Permit], object] | None = None,
    ) -> None:
        self.name = validate_name(name, "name")
        self.limit = _limit(limit)
        self.timeout = positive_seconds(
            conf.SEMAPHORE_TIMEOUT if timeout is None else timeout, "timeout"
        )
        self.fair = fair
        self.auto_refresh = auto_refresh
        self.on_lost = on_lost
        self.keys = [key("sem", name), *(key("sem", name, part) for part in PARTS)]

    def __repr__(self) -> str:
        return f"<RedisSemaphore {self.name!r} limit={self.limit} fair={self.fair}>"

    def acquire(
        self, blocking: bool = False, blocking_timeout: float | None = None
    ) -> Permit | None:
        """A permit, or ``None`` if none came free in time (at once unless ``blocking``)."""
        return self._acquire(blocking, blocking_timeout)[0]

    async def aacquire(
        self, blocking: bool = False, blocking_timeout: float | None = None
    ) -> Permit | None:
        return (await self._aacquire(blocking, blocking_timeout))[0]

    def _acquire(
        self, blocking: bool, blocking_timeout: float | None
    ) -> tuple[Permit | None, float]:
        attempt = _Attempt(self, blocking, blocking_timeout)
        client = get_client()
        while True:
            permit = attempt.outcome(load(ACQUIRE)(client, self.keys, attempt.arguments()))
            if permit is not None:
                return permit.holding(), 0.0
            if attempt.expired():
                metrics.count("semaphore_refusals")
                return None, attempt.retry_after
            signal = wait_for_grant(client, self.keys[4], attempt.wait_slice())
            if signal is not None and signal != "wake":
                return attempt.granted(signal).holding(), 0.0

    async def _aacquire(
        self, blocking: bool, blocking_timeout: float | None
    ) -> tuple[Permit | None, float]:
        attempt = _Attempt(self, blocking, blocking_timeout)
        client = get_async_client()
        while True:
            reply = await load(ACQUIRE).run_async(client, self.keys, attempt.arguments())
            permit = attempt.outcome(reply)
            if permit is not None:
                return await permit.aholding(), 0.0
            if attempt.expired():
                metrics.count("semaphore_refusals")
                return None, attempt.retry_after
            signal = await await_grant(client, self.keys[4], attempt.wait_slice())
            if signal is not None and signal != "wake":
                return await attempt.granted(signal).aholding(), 0.0

    # -- refresh and release ---------------------------------------------------------

    def _refresh_call(self, permit: Permit) -> Call:
        args: list[Arg] = [permit.token, ms(self.timeout)]
        return load(REFRESH), self.keys[:2], args

    def refresh(self, permit: Permit) -> bool:
        """Restart the permit's timeout; ``False`` (and removed) if it had expired."""
        script, keys, args = self._refresh_call(permit)
        return permit.refreshed(bool(script(get_client(), keys, args)))

    async def arefresh(self, permit: Permit) -> bool:
        script, keys, args = self._refresh_call(permit)
        return permit.refreshed(bool(await script.run_async(get_async_client(), keys, args)))

    def _release_call(self, permit: Permit) -> Call:
        fair = "1" if self.fair else "0"
        args: list[Arg] = [permit.token, self.limit, ms(self.timeout), fair, _prefix()]
        return load(RELEASE), self.keys, args

    def release(self, permit: Permit) -> bool:
        """Give the permit back; ``False`` if it had expired already."""
        script, keys, args = self._release_call(permit)
        return permit.released_with(bool(script(get_client(), keys, args)))

    async def arelease(self, permit: Permit) -> bool:
        script, keys, args = self._release_call(permit)
        return permit.released_with(bool(await script.run_async(get_async_client(), keys, args)))

    def holders(self) -> int:
        """How many permits are held right now (for monitoring)."""
        return int(load(COUNT)(get_client(), self.keys[:1], [ms(self.timeout)]))


PARTS = ("owners", "counter", "waiters", "grant")


def _prefix() -> str:
    return secrets.token_hex(8)


class _Attempt(Attempt):
    """One acquisition of a permit."""

    def __init__(self, sem: RedisSemaphore, blocking: bool, blocking_timeout: float | None) -> None:
        wait = 0.0
        if blocking:
            default = (
                conf.SEMAPHORE_BLOCKING_TIMEOUT if blocking_timeout is None else blocking_timeout
            )
            wait = positive_seconds(default, "blocking_timeout")
        super().__init__(wait)
        self.sem = sem

    def arguments(self) -> list[Arg]:
        sem = self.sem
        fair = "1" if sem.fair else "0"
        return [self.token, sem.limit, ms(sem.timeout), self.register_ms(), fair, _prefix()]

    def outcome(self, reply: Sequence[Any]) -> Permit | None:
        acquired, token, counter_or_retry = reply
        if int(acquired):
            return Permit(self.sem, text(token), int(counter_or_retry))
        self.retry_after = int(counter_or_retry) / 1000
        return None

    def granted(self, grant: str) -> Permit:
        counter, token = grant.split(" ", 1)
        return Permit(self.sem, token, int(counter))


class Permit:
    """One of a semaphore's ``limit`` permits; give it back with ``semaphore.release(permit)``.

    ``counter`` is the fair semaphore's counter value at acquisition (0 for a basic one).
    ``lost`` turns true when a refresh or release finds the permit expired.
    """

    def __init__(self, semaphore: RedisSemaphore, token: str, counter: int) -> None:
        self.semaphore = semaphore
        self.token = token
        self.counter = counter
        self.released = False
        self._lost = False

    def __repr__(self) -> str:
        state = "lost" if self._lost else "released" if self.released else "held"
        return f"<Permit {self.name!r} {state}>"

    @property
    def name(self) -> str:
        return self.semaphore.name

    @property
    def lost(self) -> bool:
        return self._lost

    # Once Redis granted the permit, whatever raises before the caller has it (a
    # cancelled task, a signal handler) gives it back first: nobody else could release
    # it, and it would stay taken until it expires.

    def holding(self) -> Permit:
        """Start holding a granted permit (count it, refresh it); if that raises, give it
        back first."""
        try:
            self._start()
        except BaseException:
            self.semaphore.release(self)
            raise
        return self

    async def aholding(self) -> Permit:
        try:
            self._start()
        except BaseException:
            await self.semaphore.arelease(self)
            raise
        return self

    def _start(self) -> None:
        metrics.count("semaphore_grants")
        if self.semaphore.auto_refresh:
            watchdog.add(self)

    def refreshed(self, ok: bool) -> bool:
        if not ok:
            self._lost = True
            watchdog.remove(self)
        return ok

    def released_with(self, ok: bool) -> bool:
        self.released = True
        watchdog.remove(self)
        if not ok:
            self._lost = True
        return ok

    # -- the watchdog's Lease protocol -------------------------------------------

    @property
    def renew_interval(self) -> float:
        return self.semaphore.timeout / 3

    def renewal(self) -> Call:
        return self.semaphore._refresh_call(self)

    def renewed(self, ok: bool) -> None:
        if not ok and not self.released:
            self._lost = True
            if self.semaphore.on_lost is not None:
                self.semaphore.on_lost(self)


class SemaphoreScope(Guard[Permit]):
    """What :func:`redis_semaphore` returns: a context manager (sync and async) and a decorator."""

    kind = "semaphore"
    busy_status = 429
    busy_message = gettext_lazy("Too many of these are running right now; try again shortly.")
    error = SemaphoreError

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        timeout: float | None,
        fair: bool,
        blocking: bool,
        blocking_timeout: float | None,
        auto_refresh: bool,
        on_lost: Callable[[Permit], object] | None,
        on_busy: Callable[[Busy], Any] | None,
    ) -> None:
        super().__init__([name], on_busy)
        self.options: dict[str, Any] = {
            "limit": _limit(limit),
            "timeout": positive_seconds(
                conf.SEMAPHORE_TIMEOUT if timeout is None else timeout, "timeout"
            ),
            "fair": fair,
            "auto_refresh": auto_refresh,
            "on_lost": on_lost,
        }
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        if blocking and blocking_timeout is not None:
            positive_seconds(blocking_timeout, "blocking_timeout")

    def take(self, names: Sequence[str]) -> Permit | Busy:
        sem = RedisSemaphore(names[0], **self.options)
        permit, retry_after = sem._acquire(self.blocking, self.blocking_timeout)
        return permit if permit is not None else Busy(tuple(names), retry_after)

    async def atake(self, names: Sequence[str]) -> Permit | Busy:
        sem = RedisSemaphore(names[0], **self.options)
        permit, retry_after = await sem._aacquire(self.blocking, self.blocking_timeout)
        return permit if permit is not None else Busy(tuple(names), retry_after)

    def give_back(self, taken: Permit, ok: bool) -> None:
        _report(taken, taken.semaphore.release(taken), ok)

    async def agive_back(self, taken: Permit, ok: bool) -> None:
        _report(taken, await taken.semaphore.arelease(taken), ok)

    def not_taken(self, busy: Busy) -> SemaphoreNotAcquired:
        return SemaphoreNotAcquired(
            f"Semaphore {busy.names[0]!r} is full (retry after {busy.retry_after:.1f} s)",
            busy.names[0],
        )


def _report(permit: Permit, released: bool, ok: bool) -> None:
    if not released and ok:
        raise SemaphoreNotOwned(
            f"The permit of semaphore {permit.name!r} expired before the block ended",
            permit.name,
        )


def redis_semaphore(
    name: str,
    limit: int,
    *,
    timeout: float | None = None,
    fair: bool = True,
    blocking: bool = False,
    blocking_timeout: float | None = None,
    auto_refresh: bool = False,
    on_lost: Callable[[Permit], object] | None = None,
    on_busy: Callable[[Busy], Any] | None = None,
) -> SemaphoreScope:
    """Hold a permit of a semaphore around a block or a function call (sync or async).

    As a context manager it yields the :class:`Permit` and raises
    :class:`SemaphoreNotAcquired` when every permit is taken (at once, or after
    ``blocking_timeout`` with ``blocking=True``), and :class:`SemaphoreNotOwned` at the
    end of a block whose permit expired meanwhile. As a decorator, the name is a
    template filled from the call's arguments (and ``{user}`` on a view); when full,
    ``on_busy(busy)`` decides the result, a Django view answers HTTP 429 with
    ``Retry-After``, anything else raises :class:`SemaphoreNotAcquired`.
    """
    return SemaphoreScope(
        name,
        limit,
        timeout=timeout,
        fair=fair,
        blocking=blocking,
        blocking_timeout=blocking_timeout,
        auto_refresh=auto_refresh,
        on_lost=on_lost,
        on_busy=on_busy,
    )
