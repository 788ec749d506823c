"""The leases facet of the task store: a worker's heartbeat and lease copies, and the
recovery of a dead worker's tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...connection import text
from ..messages import flow_of, task_id_of
from . import layout, replies
from .calls import heartbeat_call, recover_call, renew_call
from .flows import Flows
from .migration import Migration
from .records import Heartbeat
from .router import raw


class Leases(Flows, Migration):
    """Workers' leases, and the recovery of the tasks of those whose lease ran out."""

    def heartbeat(
        self,
        worker_id: str,
        lease_ms: int,
        info: str,
        queues: Sequence[str],
        *,
        lead: bool = False,
        running_ids: Sequence[str] = (),
    ) -> Heartbeat:
        """Renew (or make) a worker's lease, and the scheduler's when ``lead``, and its
        copies in the other homes of ``queues``; say which workers' leases ran out and
        which of the tasks ``running_ids`` are to be terminated."""
        here = layout.registry()
        by_home: dict[str, list[str]] = {head: [] for head in layout.homes_of(queues)}
        by_home.pop(here, None)
        for task_id in running_ids:
            by_home.setdefault(layout.task_home(task_id), []).append(task_id)
        call = heartbeat_call(
            worker_id=worker_id,
            lease_ms=lease_ms,
            info=info,
            queues=queues,
            lead=lead,
            running_ids=by_home.pop(here, []),
        )
        expired, leader, terminate, expiry, registered = self._run(call, raw=True)
        stop = [text(i) for i in terminate]
        commands: list[tuple[str, tuple[Any, ...]]] = []
        asked: list[str | None] = []  # the task each reply is about (None: a copy's)
        for head, ids in by_home.items():
            commands.append((head, ("ZADD", layout.lease_copy_key(head), expiry, worker_id)))
            commands += [(head, ("DEL", layout.terminate_key(task_id))) for task_id in ids]
            asked += [None, *ids]
        deleted = self._each_home(commands)  # (a pipeline per node, whatever the homes)
        stop += [i for i, gone in zip(asked, deleted, strict=True) if i is not None and gone]
        return Heartbeat(
            expired=expired, leader=bool(leader), terminate=stop, registered=bool(registered)
        )

    def recover_worker(
        self, worker_id: str, queues: Sequence[str], *, only_if_expired: bool, max_crashes: int
    ) -> tuple[int, int] | None:
        """Put a worker's in-progress tasks back in their queues; deregister it: returns
        ``(requeued, dead-lettered)``, or ``None`` when ``only_if_expired`` and its lease
        has not run out. ``max_crashes`` > 0 counts a crash against each task (and in its
        result) and dead-letters those that reach it.

        Each home of ``queues`` is recovered by a script of its own, fenced by the copy of
        the lease there; the registry's last, where the lease and the description go. A
        copy can outlive the registry's lease (renewed a round trip later, on another
        node's clock): when a home refused, the registry's step waits for a later call
        (``None`` is returned), or nothing would ever recover that home.
        """
        here = layout.registry()
        by_home = layout.homes_of(queues)
        shared = layout.shared_home()
        if shared is not None:  # (where a worker of an earlier release held its tasks)
            by_home[shared] = list(queues)
        held: dict[str, dict[str, bytes]] = {}  # in each home: task id -> payload
        started: dict[str, int] = {}  # in each home: a crash with others is shared
        for head, served in by_home.items():
            pipe = self.at(head).pipeline(transaction=False)
            for queue in served:
                key = layout.running_key(worker_id, queue, head)
                raw(pipe, "ZRANGE", key, 0, -1, "WITHSCORES", withscores=True)
            pairs = [pair for reply in pipe.execute() for pair in reply]
            held[head] = {task_id_of(payload): payload for payload, _ in pairs}
            held[head].pop("", None)
            started[head] = sum(float(score) >= 0 for _, score in pairs)
        total = sum(started.values())
        order = sorted(by_home, key=lambda head: head == here)
        if here not in by_home:
            order.append(here)  # (no queue: the lease and the description only)
        if only_if_expired and len(order) > 1 and self._lease_alive(worker_id, order):
            return None  # recovered in no home, so that each later counts the others'
        found_any, refused, requeued, buried = False, False, 0, 0
        for head in order:
            if head == here and refused:
                return None  # the lease stays, so that a later pass recovers that home
            payloads = held.get(head, {})
            own = started.get(head, 0)
            call = recover_call(
                worker_id=worker_id,
                queues=by_home.get(head, []),
                head=head,
                tasks={task_id: flow_of(payloads[task_id]) for task_id in sorted(payloads)},
                only_if_expired=only_if_expired,
                max_crashes=max_crashes,
                started_elsewhere=total - own,
            )
            result = self._run(call)
            if result is None:  # its lease copy still looked alive: its tasks stay held
                refused, total = True, total - own
            else:
                found_any = True
                requeued, buried = requeued + int(result[0]), buried + int(result[1])
                steps = [task_id for task_id, p in payloads.items() if flow_of(p)]
                if steps and layout.settled_elsewhere(steps[0]):  # (one home: all or none)
                    self.carry_outcomes(head, steps)  # those it dead-lettered or cancelled
        if shared is not None and requeued:
            self.migrate_layout(queues)
        return (requeued, buried) if found_any else None

    def _lease_alive(self, worker_id: str, heads: Sequence[str]) -> bool:
        """Whether the copy of the worker's lease in any of these homes has not run out
        (by the clock of its node)."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for head in heads:
            commands += [
                (head, ("ZSCORE", layout.lease_copy_key(head), worker_id)),
                (head, ("TIME",)),
            ]
        found = self._each_home(commands)
        for score, (seconds, micros) in zip(found[::2], found[1::2], strict=True):
            if score is not None and float(score) >= replies.server_ms(seconds, micros):
                return True
        return False

    def renew_leases(
        self, worker_ids: Sequence[str], lease_ms: int, queues: Sequence[str] = ()
    ) -> int:
        """Renew the leases that these workers (serving ``queues``) hold, and their
        copies in the queues' homes; how many of the registry's leases were renewed."""
        if not worker_ids:
            return 0
        others = sorted(set(layout.homes_of(queues)) - {layout.registry()})
        heads = ["", *others]  # "": the registry's
        calls = [renew_call(head=head, worker_ids=worker_ids, lease_ms=lease_ms) for head in heads]
        return int(self._run_each(calls)[0])  # (a pipeline per node)

    def drop_lease(self, raw_id: bytes) -> None:
        """Forget a lease whose owner is not a worker of ours (it holds no task)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(layout.leases_key(), raw_id)
        pipe.hdel(layout.workers_key(), raw_id)
        pipe.execute()

    def copy_lease(self, worker_id: str, head: str) -> None:
        """Copy the worker's lease to the home ``head``, which its takes start to serve
        (the heartbeat renews it from then on: see :meth:`heartbeat`)."""
        expiry = raw(self.client, "ZSCORE", layout.leases_key(), worker_id)
        if expiry is not None:
            raw(self.at(head), "ZADD", layout.lease_copy_key(head), expiry, worker_id)

    def holds_tasks(self, head: str, queues: Sequence[str], worker_id: str) -> bool:
        """Whether the home ``head`` holds tasks of ``queues`` (ready, delayed, or taken by
        the worker ``worker_id``)."""
        queue_keys = [layout.ready_key(queue, head) for queue in queues]
        queue_keys += [layout.delayed_key(queue, head) for queue in queues]
        queue_keys += [layout.running_key(worker_id, queue, head) for queue in queues]
        return bool(raw(self.at(head), "EXISTS", *queue_keys))
