"""redis-py's ``redis.lock.Lock`` and ``redis.asyncio.lock.Lock`` on :class:`RedisLock`.

The constructor is the one ``Redis.lock(name, ..., lock_class=...)`` calls. The Redis
client given is not used: our lock talks to the server that the Django settings name
(the same one, in these tests). ``timeout=None`` takes ``LOCK_TIMEOUT``: every lock has
a lease here; so does ``timeout=0``, which redis-py takes as ``None`` (no expiry).

``release()`` is redis-py's: it sends the release through ``do_release(token)`` and
forgets the token once the release is done, or found the lock gone (``LockError``), and
only if the token is still the one it released (``thread_local=False`` shares it). A
release that fails otherwise (a lost connection) keeps the lock held: call it again.
"""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace
from typing import Any

from redis.exceptions import LockError

from redis_components import LockHandle, RedisLock


class _Base:
    def __init__(
        self,
        redis: Any,
        name: str,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
    ) -> None:
        self.redis = redis
        self.name = name
        self.lock = RedisLock(name, timeout or None)
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.raise_on_release_error = raise_on_release_error
        self.local: Any = threading.local() if thread_local else SimpleNamespace()
        self.local.token = None

    def _waits(self, blocking: bool | None, blocking_timeout: float | None) -> dict[str, Any]:
        blocking = self.blocking if blocking is None else blocking
        timeout = self.blocking_timeout if blocking_timeout is None else blocking_timeout
        if not blocking:
            return {"blocking": False}
        return {"blocking": True, "blocking_timeout": math.inf if timeout is None else timeout}

    def _took(self, handle: LockHandle | None, token: object) -> bool:
        if token is not None:
            raise LockError("RedisLock makes its own tokens; one cannot be given", self.name)
        self.local.handle = handle
        self.local.token = None if handle is None else handle.token.encode()
        return handle is not None

    def _held(self, doing: str) -> LockHandle:
        handle: LockHandle | None = getattr(self.local, "handle", None)
        if handle is None:
            raise LockError(f"Cannot {doing} an unlocked lock", lock_name=self.name)
        return handle

    def _unlocked(self) -> bytes:
        """The token to release, or ``LockError`` if this lock holds none."""
        token: bytes | None = self.local.token
        if token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        return token

    def _forget(self, token: bytes) -> None:
        """Forget the lock released with ``token``, unless another acquirer's is there now."""
        if self.local.token == token:
            self.local.handle = None
            self.local.token = None

    def _release_error(self, error: LockError) -> None:
        if self.raise_on_release_error:
            raise error


class Lock(_Base):
    def acquire(
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: object = None,
    ) -> bool:
        if token is not None:
            return self._took(None, token)
        return self._took(self.lock.acquire(**self._waits(blocking, blocking_timeout)), None)

    def locked(self) -> bool:
        return self.lock.locked()

    def owned(self) -> bool:
        handle = getattr(self.local, "handle", None)
        return handle is not None and handle.owned()

    def release(self) -> None:
        token = self._unlocked()
        try:
            self.do_release(token)
        except LockError:
            self._forget(token)  # gone from Redis: nothing to retry
            raise
        self._forget(token)

    def do_release(self, expected_token: bytes) -> None:
        self._held("release").release()

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        self._held("extend").extend(additional_time, replace_ttl)
        return True

    def reacquire(self) -> bool:
        self._held("reacquire").extend(self.lock.timeout, replace_ttl=True)
        return True

    def __enter__(self) -> Lock:
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except LockError as error:
            self._release_error(error)


class AsyncLock(_Base):
    async def acquire(
        self,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: object = None,
        *,
        sleep: float | None = None,
    ) -> bool:
        # ``sleep`` (redis-py's time between polls) has no use here: waiters never poll.
        if token is not None:
            return self._took(None, token)
        handle = await self.lock.aacquire(**self._waits(blocking, blocking_timeout))
        return self._took(handle, None)

    async def locked(self) -> bool:
        return await self.lock.alocked()

    async def owned(self) -> bool:
        handle = getattr(self.local, "handle", None)
        return handle is not None and await handle.aowned()

    async def release(self) -> None:
        token = self._unlocked()
        try:
            await self.do_release(token)
        except LockError:
            self._forget(token)
            raise
        self._forget(token)

    async def do_release(self, expected_token: bytes) -> None:
        await self._held("release").arelease()

    async def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:
        await self._held("extend").aextend(additional_time, replace_ttl)
        return True

    async def reacquire(self) -> bool:
        await self._held("reacquire").aextend(self.lock.timeout, replace_ttl=True)
        return True

    async def __aenter__(self) -> AsyncLock:
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.release()
        except LockError as error:
            self._release_error(error)
