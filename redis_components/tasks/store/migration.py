"""The migration facet of the task store: the one-time move, on a Redis Cluster, of the
tasks that 0.1.0 left in the registry's home into their queues' homes (docs/cluster.md,
Upgrading from 0.1).

A worker runs it for its queues when it starts; any number of processes may run it at
once: each task is written in its new home once (lua/queue_migrate.lua), then taken out
of the registry's. A moved task's old result is kept as a forward (``moved_to``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

from ..messages import MalformedTask, TaskMessage
from . import layout
from .calls import migrate_call
from .records import Move
from .replies import fields_of
from .router import Router, raw

logger = logging.getLogger("redis_components.tasks")

BATCH = 100  # the entries read, written and taken out in three round trips


def _keys(queue: str, head: str) -> list[str]:
    """Where the home ``head`` keeps tasks of ``queue``: ready, delayed, dead."""
    return [kind(queue, head) for kind in (layout.ready_key, layout.delayed_key, layout.dead_key)]


class Migration(Router):
    """The tasks of an earlier layout, moved into their queues' homes."""

    def migrate_layout(self, queues: Sequence[str]) -> int:
        """Move what the registry's home holds of ``queues`` (ready, delayed and dead)
        into their homes; how many tasks it moved (0 on one server)."""
        old = layout.shared_home()
        if old is None or not queues:
            return 0
        if not raw(self.at(old), "EXISTS", *[k for queue in queues for k in _keys(queue, old)]):
            return 0
        moved = sum(self._move_all(queue, key) for queue in queues for key in _keys(queue, old))
        if moved:
            logger.warning(
                "Moved %d tasks of %s that an earlier release left in %s into their "
                "queues' homes (once: see the docs, Redis Cluster, Upgrading from 0.1)",
                moved,
                ", ".join(queues),
                old,
            )
        return moved

    def _move_all(self, queue: str, key: str) -> int:
        """Move every entry of ``key`` (of the registry's home), a batch at a time; how
        many it moved. An entry that is not a task's stays, and is logged."""
        moved, left, listed = 0, 0, key == _keys(queue, layout.head_of(key))[2]
        client = self.at(layout.head_of(key))
        while True:
            if listed:  # newest first: each goes before those moved already
                found = raw(client, "LRANGE", key, -BATCH - left, -1 - left)[::-1]
                entries: list[tuple[bytes, float | None]] = [(entry, None) for entry in found]
            else:
                last = left + BATCH - 1
                found = raw(client, "ZRANGE", key, left, last, "WITHSCORES", withscores=True)
                entries = [(entry, float(score)) for entry, score in found]
            if not entries:
                return moved
            done = self._move(queue, key, entries)
            moved += done
            left += len(entries) - done

    def _move(self, queue: str, key: str, entries: list[tuple[bytes, float | None]]) -> int:
        """Move these entries of ``key`` (a task written in its new home, then taken out of
        the old one, whose result is made a forward to it); how many moved."""
        client = self.at(layout.head_of(key))
        messages: list[tuple[bytes, float | None, TaskMessage]] = []
        for entry, score in entries:
            try:
                payload = entry if score is not None else json.loads(entry)["task"]
                message = TaskMessage.decode(payload)
                if len(message.id) != 32:  # (no id of that layout: it would come back here)
                    raise MalformedTask(f"its id {message.id[:40]!r} is not of 32 digits")
                messages.append((entry, score, message))
            except (ValueError, KeyError, TypeError, MalformedTask) as error:
                logger.error("Left in %s: not a task's entry (%s): %r", key, error, entry[:200])
        pipe = client.pipeline(transaction=False)
        for _, _, message in messages:
            old_result = layout.result_key(message.id)
            raw(pipe, "HGETALL", old_result)
            raw(pipe, "PTTL", old_result)
        read = pipe.execute()
        results = [fields_of(reply) for reply in read[::2]]
        pipe = client.pipeline(transaction=False)
        for fields in results:
            name = fields.get("unique", b"") or layout.result_key("")
            raw(pipe, "GET", name)
            raw(pipe, "PTTL", name)
        uniques = pipe.execute()
        moves = [
            self._plan(queue, key, *found, results[i], read[2 * i + 1], *uniques[2 * i : 2 * i + 2])
            for i, found in enumerate(messages)
        ]
        replies = self._run_each([migrate_call(move=move) for move in moves])
        pipe = client.pipeline(transaction=True)
        for move, reply in zip(moves, replies, strict=True):
            to = move.task_id if not isinstance(reply, list) else reply[1].decode()
            if move.score is None:
                pipe.lrem(key, 1, move.old_entry)
            else:
                pipe.zrem(key, move.old_entry)
            if move.fields:  # its result is kept: a forward from its old id
                pipe.hset(layout.result_key(move.old_id), "moved_to", to)
            if move.keep_ms > 0:
                pipe.pexpire(layout.result_key(move.old_id), move.keep_ms)
        pipe.execute()
        return len(moves)

    @staticmethod
    def _plan(
        queue: str,
        key: str,
        entry: bytes,
        score: float | None,
        message: TaskMessage,
        fields: dict[str, bytes],
        keep_ms: int,
        unique_holder: bytes | None,
        unique_ms: int,
    ) -> Move:
        """How the task of ``entry`` moves: its id, payload and result in its new home."""
        name = fields.get("unique", b"").decode("utf-8", "replace")
        unique = bool(name) and unique_holder == message.id.encode() and unique_ms > 0
        digest = name.rpartition("unique:")[2]
        # Its digits after the tag of a partition picked as for a new task: by them or,
        # for a unique task, by its digest.
        tag = layout.new_task_id(queue, partition_by=(digest if unique else "") or message.id)[:4]
        new = dataclasses.replace(message, id=tag + message.id)
        payload = new.encode()
        written = {k: v.decode("utf-8", "replace") for k, v in fields.items()}
        for field in ("message", "payload"):
            if field in written:
                written[field] = payload
        head = layout.task_home(new.id)
        if unique:
            written["unique"] = layout.unique_key(digest, head)
        if score is None:
            letter = json.loads(entry)
            letter["task"] = payload
            placed, into = json.dumps(letter, ensure_ascii=False), layout.dead_key(queue, head)
        else:
            kind = (
                layout.ready_key
                if key == layout.ready_key(queue, layout.head_of(key))
                else layout.delayed_key
            )
            placed, into = payload, kind(queue, head)
        return Move(
            old_id=message.id,
            old_entry=entry,
            task_id=new.id,
            entry=placed,
            into=into,
            wakes=layout.ready_key(queue, head),
            score=score,
            fields=written,
            keep_ms=keep_ms,
            unique_key=written["unique"] if unique else "",
            unique_ms=unique_ms if unique else 0,
        )
