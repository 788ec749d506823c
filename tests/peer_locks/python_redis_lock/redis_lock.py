"""python-redis-lock's ``redis_lock`` module on :class:`RedisLock`.

On ``PYTHONPATH`` only while python-redis-lock's own tests run against our lock
(``tests/test_peer_lock_suites.py``). The Redis client given is not used: our lock talks
to the server the Django settings name (the same one, in those tests). Lines are logged
as python-redis-lock logs them, under the same logger names, since its tests read them.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import django
from django.apps import apps

if not apps.ready:  # a helper process of their tests: DJANGO_SETTINGS_MODULE is set
    django.setup()

from redis_components import LockHandle, RedisLock
from redis_components.exceptions import LockAlreadyHeld, LockNotOwned
from redis_components.waiting import positive_seconds

acquire_log = logging.getLogger("redis_lock.acquire")
release_log = logging.getLogger("redis_lock.release")


class AlreadyAcquired(RuntimeError):
    pass


class NotAcquired(RuntimeError):
    pass


class NotExpirable(RuntimeError):
    pass


class TimeoutNotUsable(RuntimeError):
    pass


class InvalidTimeout(RuntimeError):
    pass


class TimeoutTooLarge(RuntimeError):
    pass


class Lock:
    def __init__(
        self,
        redis_client: Any,
        name: str,
        expire: float | None = None,
        id: object = None,
        auto_renewal: bool = False,
        strict: bool = True,
        signal_expire: int = 1000,
        blocking: bool = True,
    ) -> None:
        if id is not None:
            raise TypeError("RedisLock makes its own tokens; an id cannot be given")
        expire = float(expire) if expire else None
        self.lock = RedisLock(name, expire, auto_renew=auto_renewal)
        self._name = f"lock:{name}"
        self._expire = None if expire is None else self.lock.timeout
        self.blocking = blocking
        self.handle: LockHandle | None = None

    @property
    def id(self) -> str:
        """The holder's token: made by the server at acquisition, so none before."""
        if self.handle is None:
            raise NotAcquired(f"Lock {self._name} has no id until it is acquired")
        return self.handle.token

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if timeout is not None:
            timeout = float(timeout)
            if not blocking:
                raise TimeoutNotUsable("timeout cannot be used if blocking is False")
            if timeout < 0:
                raise InvalidTimeout(f"timeout ({timeout}) cannot be less than 0")
        acquire_log.debug("Acquiring Lock(%r) ...", self._name)
        waits = timeout or math.inf
        try:
            self.handle = self.lock.acquire(blocking, waits if blocking else None)
        except LockAlreadyHeld as held:
            raise AlreadyAcquired("Already acquired from this Lock instance.") from held
        if self.handle is None:
            acquire_log.warning("Failed to acquire Lock(%r).", self._name)
            return False
        acquire_log.info("Acquired Lock(%r).", self._name)
        return True

    def extend(self, expire: float | None = None) -> None:
        if expire is not None:
            expire = positive_seconds(float(expire), "expire")
        if self.handle is None:
            raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.")
        try:
            if expire is None:
                self.handle.renew()
            else:
                self.handle.extend(expire, replace_ttl=True)
        except LockNotOwned as lost:
            raise NotAcquired(str(lost)) from lost

    def release(self) -> None:
        release_log.debug("Releasing Lock(%r).", self._name)
        if self.handle is None:
            raise NotAcquired(f"Lock {self._name} is not acquired or it already expired.")
        handle, self.handle = self.handle, None
        try:
            handle.release()
        except LockNotOwned as lost:
            raise NotAcquired(str(lost)) from lost

    def locked(self) -> bool:
        return self.lock.locked()

    def get_owner_id(self) -> str | None:
        return self.id if self.handle is not None and self.handle.owned() else None

    def __enter__(self) -> Lock:
        if not self.acquire(blocking=self.blocking):
            raise NotAcquired(f"Lock({self._name!r}) is busy")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def reset_all(redis_client: Any) -> None:
    raise NotImplementedError("RedisLock has no way to break every lock at once")
