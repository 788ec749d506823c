"""WorkerStore: what one worker says of its own tasks."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .calls import fetch_keys
from .layout import tasks_client
from .records import Fetched, Heartbeat, Outcome
from .task_store import TaskStore


class WorkerStore:
    """One worker's side of the store: what a worker process says of its own tasks.

    It owns what every such call needs: the worker's keys, whether its takes move due
    delayed tasks (``move_delayed``: a worker that runs the scheduler does; see
    :meth:`TaskStore.fetch`), and the server's time at its last call, whose hour files
    the throughput counts. ``client`` gives the client each call uses (on a cluster the
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
        self.mode = "take+move" if move_delayed else "take"
        self.now_ms = int(time.time() * 1000)  # until the server says
        self._client = client
        self._keys = fetch_keys(worker_id, self.queues)

    @property
    def store(self) -> TaskStore:
        return TaskStore(self._client())

    def take(self, finished: Outcome | None = None, *, taken_ms: int = 0) -> Fetched:
        """Record ``finished`` (how a task it took ended), if given, and take the next
        task, in one script. ``taken_ms``: the ``now_ms`` of the take of ``finished``."""
        return self._fetch(self.mode, finished, taken_ms)

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
        )
        self.now_ms = fetched.now_ms
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
