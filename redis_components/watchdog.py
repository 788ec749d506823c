"""One thread per process that keeps leases alive: locks and semaphore permits with
``auto_renew``.

Each lease asks to be renewed every third of its timeout. The thread sleeps until the
earliest one is due, then renews every due lease in one pipeline of scripts (one round
trip on a single server). A renewal that finds the lease gone calls the lease's
``renewed(False)``, which marks it lost and calls its ``on_lost`` callback. A Redis
error is logged and retried soon after: the lease may still be valid, and a lease that
really ran out is reported at the next successful renewal.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Protocol

from .connection import get_client
from .scripts import Call, run_many

logger = logging.getLogger(__name__)

RETRY_AFTER_ERROR = 0.5


class Lease(Protocol):
    """What the watchdog needs from a lock handle or a semaphore permit."""

    @property
    def renew_interval(self) -> float:
        """Seconds between renewals."""

    def renewal(self) -> Call:
        """The script call that renews the lease; it returns 1 if the lease was renewed."""

    def renewed(self, ok: bool) -> None:
        """Called (in the watchdog's thread) with the outcome of each renewal."""


class Watchdog:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._due: dict[Lease, float] = {}
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._wakeup:
            self._due[lease] = time.monotonic() + lease.renew_interval
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="redis-components-watchdog", daemon=True
                )
                self._thread.start()
            self._wakeup.notify()

    def remove(self, lease: Lease) -> None:
        with self._wakeup:
            self._due.pop(lease, None)

    def __contains__(self, lease: Lease) -> bool:
        return lease in self._due

    def _run(self) -> None:
        while True:
            with self._wakeup:
                now = time.monotonic()
                due = [lease for lease, at in self._due.items() if at <= now]
                if not due:
                    next_at = min(self._due.values(), default=now + 60)
                    self._wakeup.wait(next_at - now)
                    continue
                for lease in due:
                    self._due[lease] = now + lease.renew_interval
            self._renew(due)

    def _renew(self, leases: list[Lease]) -> None:
        try:
            results: list[Any] = run_many(get_client(), [lease.renewal() for lease in leases])
        except Exception as error:  # Redis down, or settings changed under us: keep going
            logger.warning("Could not renew %d lease(s): %s; retrying", len(leases), error)
            with self._wakeup:
                for lease in leases:
                    if lease in self._due:
                        self._due[lease] = time.monotonic() + RETRY_AFTER_ERROR
            return
        for lease, result in zip(leases, results, strict=True):
            if isinstance(result, Exception):
                logger.warning("Renewing %r failed: %s", lease, result)
                continue
            if not result:
                self.remove(lease)
            try:
                lease.renewed(bool(result))
            except Exception:
                logger.exception("A callback for a lost lease (%r) raised", lease)


watchdog = Watchdog()
# A forked child has no watchdog thread and holds none of its parent's leases.
os.register_at_fork(after_in_child=watchdog.reset)
