"""Counting semaphores: at most ``limit`` holders at once, never more.

::

    sem = RedisSemaphore("remote-api", limit=5, timeout=10)
    permit = sem.acquire(blocking=False)    # a Permit, or None at once when all are taken
    ...
    permit.release()

    with redis_semaphore("remote-api", limit=5, blocking_timeout=3): ...
                                            # SemaphoreNotAcquired when still full after 3 s

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
``timeout`` seconds after it was acquired or last renewed; ``auto_renew=True``
renews it every ``timeout / 3`` while held. Acquire, release and renew follow the
contract that locks follow (docs/contract.md).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from django.utils.translation import gettext_lazy

from . import metrics
from .conf import conf
from .connection import get_async_client, get_client, text
from .deprecation import deprecated
from .exceptions import SemaphoreError, SemaphoreLost, SemaphoreNotAcquired, SemaphoreNotOwned
from .guard import Busy, Guard
from .keys import integer, key, validate_name
from .scripts import Arg, Call, load
from .tracing import holds
from .waiting import Attempt, await_grant, ms, positive_seconds, wait_for_grant, wait_seconds
from .watchdog import watchdog

ACQUIRE, RELEASE, REFRESH, COUNT = "sem_acquire", "sem_release", "sem_refresh", "sem_count"


def _limit(value: object) -> int:
    return integer(value, "limit")


def _blocking(blocking: bool | None, where: str, stacklevel: int = 3) -> bool:
    """``blocking``, or, when it was not given, today's default (not waiting), with a
    warning that the default becomes waiting, as a lock's is."""
    if blocking is not None:
        return blocking
    deprecated(
        f"{where} without blocking=",
        "from 0.3 a semaphore waits by default (up to blocking_timeout), as a lock does; "
        "pass blocking=False to keep trying once, or blocking=True to wait",
        stacklevel=stacklevel,
    )
    return False


def _auto_renew(auto_renew: bool, auto_refresh: bool | None, stacklevel: int = 3) -> bool:
    if auto_refresh is None:
        return auto_renew
    deprecated("auto_refresh=", "use auto_renew=, as locks do", stacklevel=stacklevel)
    return auto_refresh


class RedisSemaphore:
    """A counting semaphore named ``name`` that admits at most ``limit`` holders.

    ``timeout`` (default ``SEMAPHORE_TIMEOUT``) is how long a permit lasts without a
    renewal: a holder that dies frees its permit then. ``auto_renew=True`` renews it
    every ``timeout / 3`` while the process lives; if a renewal finds it gone, the
    permit is marked lost and ``on_lost(permit)`` is called (in the watchdog's thread).
    ``auto_refresh=`` is the deprecated name of ``auto_renew=``.
    """

    def __init__(
        self,
        name: str,
        limit: int,
        timeout: float | None = None,
        *,
        fair: bool = True,
        auto_renew: bool = False,
        on_lost: Callable[[Permit], object] | None = None,
        auto_refresh: bool | None = None,
    ) -> None:
        self.name = validate_name(name, "name")
        self.limit = _limit(limit)
        self.timeout = positive_seconds(
            conf.SEMAPHORE_TIMEOUT if timeout is None else timeout, "timeout"
        )
        self.fair = fair
        self.auto_renew = _auto_renew(auto_renew, auto_refresh)
        self.on_lost = on_lost
        self.keys = [key("sem", name), *(key("sem", name, part) for part in PARTS)]

    def __repr__(self) -> str:
        return f"<RedisSemaphore {self.name!r} limit={self.limit} fair={self.fair}>"

    def acquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> Permit | None:
        """Take a permit; return it, or ``None`` if none came free in time.

        ``blocking=False`` (or ``blocking_timeout=0``) tries once: the book's "system
        busy". ``blocking=True`` waits at most ``blocking_timeout`` seconds (default
        ``SEMAPHORE_BLOCKING_TIMEOUT``; ``math.inf``: without a limit), woken by a
        release or an expiry, never by polling. Not giving ``blocking`` tries once and
        warns: from 0.3 it waits, as :meth:`RedisLock.acquire` does.
        """
        return self._acquire(_blocking(blocking, "acquire()"), blocking_timeout)[0]

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> Permit | None:
        """:meth:`acquire` for asyncio code, on ``redis.asyncio``."""
        blocking = _blocking(blocking, "aacquire()")
        return (await self._aacquire(blocking, blocking_timeout))[0]

    @holds.acquisition("semaphore")
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

    @holds.acquisition("semaphore")
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

    # -- the 0.1 forms of renew and release ------------------------------------------

    def refresh(self, permit: Permit) -> bool:
        """Deprecated: use ``permit.renew()``, which raises instead of returning False."""
        deprecated("RedisSemaphore.refresh(permit)", "use permit.renew()", stacklevel=2)
        return permit._renew()

    async def arefresh(self, permit: Permit) -> bool:
        """Deprecated: use ``await permit.arenew()``."""
        deprecated("RedisSemaphore.arefresh(permit)", "use permit.arenew()", stacklevel=2)
        return await permit._arenew()

    def release(self, permit: Permit) -> bool:
        """Deprecated: use ``permit.release()``, which raises instead of returning False."""
        deprecated("RedisSemaphore.release(permit)", "use permit.release()", stacklevel=2)
        return permit._release()

    async def arelease(self, permit: Permit) -> bool:
        """Deprecated: use ``await permit.arelease()``."""
        deprecated("RedisSemaphore.arelease(permit)", "use permit.arelease()", stacklevel=2)
        return await permit._arelease()

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
            wait = wait_seconds(default, "blocking_timeout")
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
        return Permit(self.sem, token, int(counter), registration=self.token)


class Permit:
    """One of a semaphore's ``limit`` permits; give it back with :meth:`release`.

    ``counter`` is the fair semaphore's counter value at acquisition (0 for a basic one).
    ``lost`` turns true when a renewal or the release finds the permit expired.
    """

    def __init__(
        self, semaphore: RedisSemaphore, token: str, counter: int, registration: str = ""
    ) -> None:
        self.semaphore = semaphore
        self.token = token
        self.counter = counter
        # The waiter registration of an acquire that a release handed this permit to.
        self.registration = registration
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

    # A permit handed over by a release was received by a blocked waiter, whose
    # registration says it still waits: it is dropped first, or later releases would
    # hand permits to a waiter that no longer waits, and newcomers would queue behind it.
    # (A release that runs between the grant and this drop hands one permit too many to
    # the grant list; the next acquire takes it from there, so none is lost.)

    def holding(self) -> Permit:
        """Start holding a granted permit (stop waiting, count it, renew it); if that
        raises, give it back first."""
        try:
            if self.registration:
                get_client().zrem(self.semaphore.keys[3], self.registration)
            self._start()
        except BaseException:
            self._release()
            raise
        return self

    async def aholding(self) -> Permit:
        try:
            if self.registration:
                await get_async_client().zrem(self.semaphore.keys[3], self.registration)
            self._start()
        except BaseException:
            await self._arelease()
            raise
        return self

    def _start(self) -> None:
        metrics.count("semaphore_grants")
        if self.semaphore.auto_renew:
            watchdog.add(self)

    # -- renew and release ---------------------------------------------------------

    def renew(self) -> None:
        """Restart the permit's lease: ``timeout`` seconds from now.

        Raises :class:`SemaphoreNotOwned` (and marks the permit lost) if it had expired,
        or if it was released.
        """
        self._owned("renewed", self._renew())

    async def arenew(self) -> None:
        self._owned("renewed", await self._arenew())

    def release(self) -> None:
        """Give the permit back (a fair semaphore hands it to its longest waiter).

        Raises :class:`SemaphoreNotOwned` if it had expired (someone else may hold it
        now) or was released already.
        """
        self._owned("released", self._release())

    async def arelease(self) -> None:
        self._owned("released", await self._arelease())

    def _owned(self, what: str, ok: bool) -> None:
        if not ok:
            name = self.name
            if self.released and not self._lost:
                problem = f"The permit of semaphore {name!r} was already released"
            else:
                problem = f"The permit of semaphore {name!r} expired before it was {what}"
            raise SemaphoreNotOwned(problem, name)

    def _renew_call(self) -> Call:
        args: list[Arg] = [self.token, ms(self.semaphore.timeout)]
        return load(REFRESH), self.semaphore.keys[:2], args

    def _renew(self) -> bool:
        if self.released:
            return False
        script, keys, args = self._renew_call()
        return self._renewed(bool(script(get_client(), keys, args)))

    async def _arenew(self) -> bool:
        if self.released:
            return False
        script, keys, args = self._renew_call()
        return self._renewed(bool(await script.run_async(get_async_client(), keys, args)))

    def _renewed(self, ok: bool) -> bool:
        if not ok:
            self._lost = True
            self._stop()
        return ok

    def _release_call(self) -> Call:
        holds.releasing(self)
        sem = self.semaphore
        fair = "1" if sem.fair else "0"
        args: list[Arg] = [self.token, sem.limit, ms(sem.timeout), fair, _prefix()]
        return load(RELEASE), sem.keys, args

    def _release(self) -> bool:
        """Give the permit back; False if it had expired or was given back already."""
        if self.released:
            return False
        script, keys, args = self._release_call()
        return self._released(bool(script(get_client(), keys, args)))

    async def _arelease(self) -> bool:
        if self.released:
            return False
        script, keys, args = self._release_call()
        return self._released(bool(await script.run_async(get_async_client(), keys, args)))

    def _released(self, ok: bool) -> bool:
        self.released = True
        self._lost = self._lost or not ok
        self._stop()
        return ok

    def _stop(self) -> None:
        """No more renewals; the permit's span (with tracing on) says it was lost or
        released."""
        watchdog.remove(self)
        holds.stopped(self)

    # -- the watchdog's Lease protocol -------------------------------------------

    @property
    def renew_interval(self) -> float:
        return self.semaphore.timeout / 3

    def renewal(self) -> Call:
        return self._renew_call()

    def renewed(self, ok: bool) -> None:
        if not ok and not self.released:
            self._lost = True
            self._stop()
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
        blocking: bool | None,
        blocking_timeout: float | None,
        auto_renew: bool,
        auto_refresh: bool | None,
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
            "on_lost": on_lost,
        }
        if blocking_timeout is not None:
            wait_seconds(blocking_timeout, "blocking_timeout")
        self.blocking_timeout = blocking_timeout
        # Warned about once the arguments are known to be good (redis_semaphore's caller).
        self.blocking = _blocking(blocking, "redis_semaphore()", stacklevel=4)
        self.options["auto_renew"] = _auto_renew(auto_renew, auto_refresh, stacklevel=4)

    def take(self, names: Sequence[str]) -> Permit | Busy:
        sem = RedisSemaphore(names[0], **self.options)
        permit, retry_after = sem._acquire(self.blocking, self.blocking_timeout)
        return holds.entered(permit) if permit is not None else Busy(tuple(names), retry_after)

    async def atake(self, names: Sequence[str]) -> Permit | Busy:
        sem = RedisSemaphore(names[0], **self.options)
        permit, retry_after = await sem._aacquire(self.blocking, self.blocking_timeout)
        return holds.entered(permit) if permit is not None else Busy(tuple(names), retry_after)

    def give_back(self, taken: Permit, ok: bool) -> None:
        _report(taken, taken._release(), ok)

    async def agive_back(self, taken: Permit, ok: bool) -> None:
        _report(taken, await taken._arelease(), ok)

    def not_taken(self, busy: Busy) -> SemaphoreNotAcquired:
        return SemaphoreNotAcquired(
            f"Semaphore {busy.names[0]!r} is full (retry after {busy.retry_after:.1f} s)",
            busy.names[0],
        )


def _report(permit: Permit, released: bool, ok: bool) -> None:
    if not released and ok:
        raise SemaphoreLost(
            f"The permit of semaphore {permit.name!r} expired before the block ended",
            permit.name,
        )


def redis_semaphore(
    name: str,
    limit: int,
    *,
    timeout: float | None = None,
    fair: bool = True,
    blocking: bool | None = None,
    blocking_timeout: float | None = None,
    auto_renew: bool = False,
    on_lost: Callable[[Permit], object] | None = None,
    on_busy: Callable[[Busy], Any] | None = None,
    auto_refresh: bool | None = None,
) -> SemaphoreScope:
    """Hold a permit of a semaphore around a block or a function call (sync or async).

    As a context manager it yields the :class:`Permit` and raises
    :class:`SemaphoreNotAcquired` when every permit is taken (at once with
    ``blocking=False``, or after ``blocking_timeout`` with ``blocking=True``), and
    :class:`SemaphoreLost` (a :class:`SemaphoreNotOwned`) at the end of a block whose
    permit expired meanwhile.
    Not giving ``blocking`` tries once and warns: from 0.3 it waits, as
    :func:`redis_lock` does. As a decorator, the name is a
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
        auto_renew=auto_renew,
        auto_refresh=auto_refresh,
        on_lost=on_lost,
        on_busy=on_busy,
    )
