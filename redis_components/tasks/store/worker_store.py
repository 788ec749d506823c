"""WorkerStore: what one worker says of its own tasks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from .calls import fetch_keys
from .layout import tasks_client
from .records import Fetched, Heartbeat, Outcome
from .task_store import TaskStore

# How often (server ms) the takes of a busy worker that moves delayed tasks look for due
# ones (others may have delayed tasks meanwhile).
MOVE_EVERY_MS = 100


class WorkerStore:
    """One worker's side of the store: what a worker process says of its own tasks.

    It owns what every such call needs: the worker's keys, whether its takes move due
    delayed tasks (``move_delayed``: a worker that runs the scheduler does; see
    :meth:`TaskStore.fetch`), and the server's time at its last call, whose hour files
    the throughput counts. A take moves due delayed tasks only when one may be due: when
    the last move said one falls due by now, when a retry or deferral it recorded falls
    due, every ``MOVE_EVERY_MS``, and whenever no ready task is left. So a busy worker
    does not look at the delayed tasks on each take, and a due one waits at most that
    long for a busy worker. ``client`` gives the client each call uses (on a cluster the
    keys' node may move; a worker's loop holds one connection of its own, which runs
    :meth:`take` and :meth:`record`, not the pipelines of :meth:`put_back` and
    :meth:`held`): one object per thread that talks to Redis. The worker's loop, its
    lease, ``rc_worker``'s supervisor and :mod:`redis_components.testing` all use it.
    """

    def __init__(
        self,
        worker_id: str,
        queues: Sequence[str],
        *,
        move_delayed: bool = True,
        client: Callable[[], Any] = tasks_client,
    ) -> None:
        self.worker_id = worker_id
        self.queues = list(queues)
        self.move_delayed = move_delayed
        self.now_ms = int(time.time() * 1000)  # until the server says
        self._move_at = 0  # (server ms) when a take next moves due delayed tasks
        self._client = client
        self._keys = fetch_keys(worker_id, self.queues)

    @property
    def store(self) -> TaskStore:
        return TaskStore(self._client())

    def take(self, finished: Outcome | None = None, *, taken_ms: int = 0) -> Fetched:
        """Record ``finished`` (how a task it took ended), if given, and take the next
        task, in one script. ``taken_ms``: the ``now_ms`` of the take of ``finished``.
        Its log line (``Outcome.said``) is written while the server runs the script."""
        move = self.move_delayed and self.now_ms >= self._move_at
        fetched = self._fetch("take+move" if move else "take", finished, taken_ms)
        if self.move_delayed and not move and fetched.payload is None and fetched.position >= 0:
            # Nothing ready: a due delayed task may be. (Recorded is the first call's.)
            again = self._fetch("take+move", None, 0)
            fetched = dataclasses.replace(again, recorded=fetched.recorded)
        return fetched

    def record(self, finished: Outcome, *, taken_ms: int = 0) -> Fetched:
        """Record how a task it took ended, and take nothing."""
        return self._fetch("", finished, taken_ms)

    def _fetch(self, mode: str, finished: Outcome | None, taken_ms: int) -> Fetched:
        fetched = self.store.fetch(
            self.worker_id,
            self._keys,
            mode,
            finished,
            queue=self.queues[finished.position - 1] if finished is not None else "",
            hour=self.now_ms // 3_600_000,
            taken_ms=taken_ms,
            meanwhile=finished.said if finished is not None else None,
        )
        now = self.now_ms = fetched.now_ms
        if mode == "take+move":  # wait: -1 when no delayed task is left, 0 if more are due
            wait = fetched.wait_ms
            self._move_at = now + (MOVE_EVERY_MS if wait < 0 else min(wait, MOVE_EVERY_MS))
        if finished is not None and finished.kind in ("retry", "defer"):
            self._move_at = min(self._move_at, now + finished.delay_ms)
        return fetched

    def beat(
        self, lease_ms: int, info: str, *, lead: bool = False, running_ids: Sequence[str] = ()
    ) -> Heartbeat:
        """Renew (or make) its lease for ``lease_ms`` (see :meth:`TaskStore.heartbeat`)."""
        return self.store.heartbeat(
            self.worker_id, lease_ms, info, self.queues, lead=lead, running_ids=running_ids
        )

    def put_back(self, *, max_crashes: int = 0) -> tuple[int, int] | None:
        """Put the tasks it holds back on their queues (counting a crash against each
        with ``max_crashes``) and deregister it: ``(requeued, dead-lettered)``."""
        return self.store.recover_worker(
            self.worker_id, self.queues, only_if_expired=False, max_crashes=max_crashes
        )

    def held(self) -> list[tuple[int, bytes]]:
        """The tasks it holds, as ``(position of their queue, payload)``."""
        store = self.store
        return [
            (position, payload)
            for position, queue in enumerate(self.queues, 1)
            for payload in store.held_payloads(self.worker_id, queue)
        ]
