"""The flows facet of the task store: a workflow's creation, the carrying of its steps'
outcomes between homes (outboxes), and its reads."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from ... import scripts
from ...conf import conf
from ...connection import text
from ...exceptions import TaskNotDurable
from ..messages import Barrier, PlannedStep
from . import layout, replies
from .calls import flow_create_call, flow_release_call, flow_settle_call
from .flow_records import (
    PAGE,
    REFERENCE,
    SUMMARY_FIELDS,
    Step,
    Summary,
    fill,
    record_fields,
    step_of,
)
from .router import Router, raw

logger = logging.getLogger("redis_components.tasks")


def _read(client: Any, key: str, task_ids: Sequence[str]) -> dict[bytes, bytes]:
    """The entries of these tasks in the outbox ``key`` (a HASH), those it holds."""
    values = raw(client, "HMGET", key, *task_ids) if task_ids else []
    return {i.encode(): v for i, v in zip(task_ids, values, strict=True) if v}


class Flows(Router):
    """Workflows: created, their steps' outcomes carried to them, and read."""

    def create_workflow(
        self, workflow_id: str, steps: list[PlannedStep], barriers: list[Barrier], result: str
    ) -> int | None:
        """Write a workflow (``result``: its result's template) and enqueue its first steps
        in one script: the server's time (ms), or ``None`` if the workflow exists already."""
        fields, roots = record_fields(steps, barriers, workflow_id, result)
        queues = [step.message.queue for step in steps]
        call = flow_create_call(workflow_id=workflow_id, fields=fields, roots=roots, queues=queues)
        created, problem = self._run_durable(call, f"Workflow {workflow_id} was enqueued")
        if created is None:
            return None
        elsewhere = [message.id for _, message, _ in roots if layout.settled_elsewhere(message.id)]
        # Written to the workflows' outbox: enqueued in their homes now.
        if elsewhere and self.carry_released(elsewhere) < len(elsewhere) and not problem:
            problem = (
                f"Workflow {workflow_id} was enqueued, but some of its first steps did not "
                "reach enough replicas in time (a worker's heartbeat enqueues them again)"
            )
        if problem:
            raise TaskNotDurable(problem, workflow_id)
        return int(created)

    def carry_step(self, task_id: str, known: bytes | None = None, *, delete: bool = True) -> int:
        """Carry the outcome of the step ``task_id`` (:meth:`carry_outcomes`; ``known``: its
        entry, if known) if it lives in another home than its workflow (else no round
        trip): how many entries (0 or 1) it carried."""
        if not layout.settled_elsewhere(task_id):
            return 0
        entries = None if known is None else {task_id.encode(): known}
        return self.carry_outcomes(layout.task_home(task_id), [task_id], entries, delete=delete)

    def carry_outcomes(
        self,
        head: str,
        task_ids: Sequence[str],
        entries: dict[bytes, bytes] | None = None,  # theirs, if known (else read)
        *,
        delete: bool = True,  # False: the caller deletes them (see lua/queue_fetch.lua)
    ) -> int:
        """Carry the final outcomes of these steps in the outbox of ``head`` to their
        workflows: each is settled (lua/flow_settle.lua), the steps it releases are
        enqueued, and its entry goes. Any process may carry any entry, as often as it likes:
        each counts once (lua/lib/flow.lua). How many entries it carried."""
        client, key = self.at(head), layout.settled_key(head)
        if entries is None:
            entries = _read(client, key, task_ids)
        for entry in entries.values():
            self._settle(entry)
        if delete and entries:
            raw(client, "HDEL", key, *entries)
        return len(entries)

    def _settle(self, entry: bytes) -> None:
        """Settle an outbox's entry in its workflow, and enqueue the steps it releases."""
        step, workflow, _, state, record = entry.split(b" ", 4)
        call = flow_settle_call(
            workflow_id=workflow.decode(), step=int(step), state=state.decode(), record=record
        )
        self.carry_released(replies.pairs(self._run(call, raw=True)))

    def outbox_entries(self, queues: Sequence[str]) -> set[tuple[str, str]]:
        """The entries in the outboxes of ``queues``' homes and in the workflows' outbox,
        each as (its outbox's key, its task id), read in one pipeline per node."""
        if layout.shared_home() is None:  # one server: every workflow settles in place
            return set()
        keys = [*map(layout.settled_key, sorted(layout.homes_of(queues))), layout.released_key()]
        replies = self._each_home([(layout.head_of(key), ("HKEYS", key)) for key in keys])
        return {(key, text(i)) for key, ids in zip(keys, replies, strict=True) for i in ids}

    def carry_left(self, entries: Iterable[tuple[str, str]]) -> int:
        """Carry these entries of :meth:`outbox_entries` (left by a process that died or
        lost Redis), those still there: how many."""
        by_key: dict[str, list[str]] = {}
        for key, task_id in entries:
            by_key.setdefault(key, []).append(task_id)
        released = by_key.pop(layout.released_key(), [])
        carried = sum(self.carry_outcomes(layout.head_of(key), ids) for key, ids in by_key.items())
        return carried + (self.carry_released(released) if released else 0)

    def carry_released(self, entries: Sequence[str] | dict[bytes, bytes]) -> int:
        """Enqueue the steps waiting in the workflows' outbox (``entries``: their ids, or
        their entries) in their homes, each once (lua/flow_release.lua), one pipeline per
        node, and take them out of it: with ``QUEUE_WAIT_REPLICAS``, once the replicas
        have them (those of a node whose replicas were late stay). How many it carried."""
        key = layout.released_key()
        if not isinstance(entries, dict):
            entries = _read(self.client, key, entries)
        ids = list(entries)
        calls = [flow_release_call(task_id=i.decode(), entry=entries[i]) for i in ids]
        replicas, timeout = conf.QUEUE_WAIT_REPLICAS or 0, conf.QUEUE_WAIT_TIMEOUT
        carried: list[bytes] = []
        errors: list[Exception] = []
        for client, indexes in self._by_client([layout.head_of(call[1][0]) for call in calls]):
            mine = [calls[i] for i in indexes]
            if replicas:
                replies, acknowledged = scripts.run_many_and_wait(client, mine, replicas, timeout)
            else:
                replies, acknowledged = scripts.run_many(client, mine), 0
            late = acknowledged < replicas
            if late:
                logger.warning(
                    "Workflow steps released: %d, but %d of %d replicas acknowledged "
                    "them within %g s; they stay in the workflows' outbox for now",
                    *(len(mine), acknowledged, replicas, timeout),
                )
            for i, reply in zip(indexes, replies, strict=True):
                if isinstance(reply, Exception):
                    errors.append(reply)
                elif not late:
                    carried.append(ids[i])
        if carried:
            raw(self.client, "HDEL", key, *carried)
        if errors:  # (after the others are out of the outbox)
            raise errors[0]
        return len(carried)

    def workflow_summaries(self, workflow_ids: Sequence[str]) -> list[Summary | None]:
        """Each workflow at a glance (``None`` for one not kept), in one round trip."""
        records = self.workflow_fields(workflow_ids, SUMMARY_FIELDS)
        return [
            Summary.of(workflow_id, record) if "status" in record else None
            for workflow_id, record in zip(workflow_ids, records, strict=True)
        ]

    def workflow_steps(self, workflow_id: str) -> list[Step] | None:
        """Every step of a workflow, in order (``None`` when it is not kept)."""
        found = self._each_step(workflow_id, "id", "name", "q", "st", "r")
        return None if found is None else [step_of(found[1], n) for n in range(1, found[0] + 1)]

    def workflow_members(self, workflow_id: str) -> list[tuple[str, str]] | None:
        """Each step's task id and queue (``None`` when the workflow is not kept)."""
        found = self._each_step(workflow_id, "id", "q")
        if found is None:
            return None
        count, record = found
        return [
            (record[f"id:{n}"].decode(), record[f"q:{n}"].decode()) for n in range(1, count + 1)
        ]

    def _each_step(self, workflow_id: str, *names: str) -> tuple[int, dict[str, bytes]] | None:
        """How many steps a workflow has, and ``names`` of each of them."""
        [summary] = self.workflow_summaries([workflow_id])
        numbers = range(1, summary.steps + 1) if summary else range(0)
        record = self._workflow_read(workflow_id, [f"{f}:{n}" for n in numbers for f in names])
        return None if summary is None or record is None else (summary.steps, record)

    def workflow_outcome(self, workflow_id: str) -> tuple[str, str | None, Any] | None:
        """A workflow's status, the step that failed it (its task id), and its result once
        it succeeded (``None`` when it is not kept)."""
        record = self._workflow_read(workflow_id, ["failed", "result"])
        if record is None:
            return None
        status, failed = record["status"].decode(), record.get("failed")
        if status != "SUCCESSFUL":
            return status, failed.decode() if failed else None, None
        template = record["result"].decode()
        results = self._workflow_read(workflow_id, [f"r:{n}" for n in REFERENCE.findall(template)])
        value = json.loads(fill(template, lambda n: (results or {})[f"r:{n}"].decode()))
        return status, None, value

    def _workflow_read(self, workflow_id: str, fields: list[str]) -> dict[str, bytes] | None:
        """``fields`` of a workflow (those it has) and its status, in one round trip;
        ``None`` when it is not kept."""
        wanted = ["status", *fields]
        pages = [wanted[first : first + PAGE] for first in range(0, len(wanted), PAGE)]
        record = self.workflow_pages(workflow_id, pages)
        return record if "status" in record else None

    def workflow_pages(self, workflow_id: str, pages: Sequence[Sequence[str]]) -> dict[str, bytes]:
        """These fields of a workflow (those it has), one HMGET per page, in one round trip."""
        found = self._hash_fields([(layout.flow_key(workflow_id), page) for page in pages])
        return {name: value for record in found for name, value in record.items()}

    def workflow_result(self, workflow_id: str, node: int) -> bytes | None:
        """The stored result (JSON) of a workflow's step or barrier (``None``: none kept)."""
        value: bytes | None = raw(self.client, "HGET", layout.flow_key(workflow_id), f"r:{node}")
        return value

    def workflow_ids(self, limit: int) -> tuple[list[str], list[str]]:
        """The ids of the oldest ``limit`` live workflows and of the latest ``limit``
        finished ones still kept."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "ZRANGE", layout.flows_live_key(), 0, limit - 1)
        raw(pipe, "ZREVRANGE", layout.flows_done_key(), 0, limit - 1)
        live, done = pipe.execute()
        return [replies.text(i) for i in live], [replies.text(i) for i in done]

    def running_workflow_count(self) -> int:
        return int(self.client.zcard(layout.flows_live_key()))

    def workflow_fields(
        self, workflow_ids: Sequence[str], fields: Sequence[str]
    ) -> list[dict[str, bytes]]:
        """These ``fields`` of each workflow (those it has), in one round trip."""
        return self._hash_fields([(layout.flow_key(i), fields) for i in workflow_ids])

    def _hash_fields(self, asked: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, bytes]]:
        """For each HASH and fields asked, those it has (an HMGET each), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for key, fields in asked:
            raw(pipe, "HMGET", key, *fields)
        found = pipe.execute() if asked else []
        return [
            {name: value for name, value in zip(fields, values, strict=True) if value is not None}
            for (_, fields), values in zip(asked, found, strict=True)
        ]
