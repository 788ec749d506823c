"""The inspection facet of the task store: the readers behind results, ``rc_queues``,
the operations pages and metrics (never a write), and the server's risky settings."""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import operator
from collections.abc import Sequence
from typing import Any, Literal

import redis
from redis import Redis

from ...connection import text
from ..messages import TaskMessage, validate_queue
from . import layout, replies
from .calls import entry_heads_call, health_call
from .records import (
    Attempt,
    DeadLetter,
    Glimpse,
    LimitUse,
    Progress,
    QueueCounts,
    RunningEntry,
    TaskRecord,
    WaitingTask,
    WorkerInfo,
)
from .router import Router, raw


def server_warnings(client: Redis) -> list[str]:
    """What in the server's configuration may lose queued tasks, one sentence each."""
    try:
        config = client.config_get("maxmemory-policy")
        config.update(client.config_get("save"))
        config.update(client.config_get("appendonly"))
    except redis.exceptions.ResponseError:  # CONFIG is disabled (managed services)
        return []
    values = {text(name): text(value) for name, value in config.items()}
    found = []
    policy = values.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        found.append(
            f"Redis may evict keys (maxmemory-policy is {policy!r}): queued tasks can "
            "disappear when memory runs short. Set maxmemory-policy to 'noeviction'."
        )
    if not values.get("save") and values.get("appendonly") == "no":
        found.append(
            "Redis keeps nothing on disk (no 'save' rules, appendonly no): a restart "
            "loses every queued task. Enable appendonly or RDB snapshots."
        )
    return found


# A list page reads at most this much of the start of an entry (a payload, a dead
# letter): enough for a task's names, never megabytes of arguments.
GLIMPSE_BYTES = 4096
# ... and of a dead letter's end: its traceback (at most MAX_TRACEBACK characters, mostly
# ASCII), which follows its reason and error.
DEAD_LETTER_END_BYTES = 32_768
# How many entries of a concurrency key's waiting tasks one round trip reads.
ON_LIMITS_PAGE = 500
# Where entries are in a key of one home: its head, the key, the first and last index.
Span = tuple[str, str, int, int]


class Inspection(Router):
    """The readers: results, workers, queues' counts, dead letters, metrics."""

    def task_records(self, task_ids: Sequence[str]) -> list[TaskRecord | None]:
        """Each task's record (``None`` where none is kept, or it is not ours), in one round
        trip per home (a moved task's under its id now: see ``Router.current_id``)."""
        task_ids = [self.current_id(task_id) for task_id in task_ids]
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for task_id in task_ids:
            head = layout.task_home(task_id)
            commands += [
                (head, ("HGETALL", layout.result_key(task_id))),
                (head, ("HGET", layout.running_tasks_key(head), task_id)),
            ]
        found = self._each_home(commands)
        return [
            replies.task_record(task_id, found[2 * i], found[2 * i + 1])
            for i, task_id in enumerate(task_ids)
        ]

    def task_progress(self, task_ids: Sequence[str]) -> list[Progress | None]:
        """Each task's progress (``None`` where it said none, or its result is not kept):
        one HGET each, in one round trip per home."""
        task_ids = [self.current_id(task_id) for task_id in task_ids]
        found = self._each_home(
            [
                (layout.task_home(task_id), ("HGET", layout.result_key(task_id), "progress"))
                for task_id in task_ids
            ]
        )
        return [replies.progress(reply) for reply in found]

    def queued_message(self, task_id: str) -> TaskMessage | None:
        """The message a task was queued with, while its result is kept (``None`` if it
        is not, or is not one of ours)."""
        task_id = self.current_id(task_id)
        key = layout.result_key(task_id)
        return replies.task_message(raw(self.at(layout.task_home(task_id)), "HGET", key, "message"))

    def workers(self) -> list[WorkerInfo]:
        """Every registered worker, live or not yet recovered, by id, with the seconds
        until its lease runs out (by the server's clock), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", layout.workers_key())
        raw(pipe, "ZRANGE", layout.leases_key(), 0, -1, "WITHSCORES", withscores=True)
        pipe.time()
        described, leases, (seconds, micros) = pipe.execute()
        now_ms = replies.server_ms(seconds, micros)
        left = {replies.text(member): (float(ms) - now_ms) / 1000 for member, ms in leases}
        found = [
            replies.worker_info(worker_id, info, left.get(worker_id, -math.inf))
            for worker_id, info in replies.fields_of(described).items()
        ]
        return sorted(found, key=lambda worker: worker.id)

    def worker_queues(self, worker_id: str) -> list[str]:
        """The queues a worker registered to serve ([] if it is gone, or unreadable)."""
        stored = raw(self.client, "HGET", layout.workers_key(), worker_id)
        queues = replies.worker_queues(replies.json_object(stored) or {}) or []
        try:
            return [validate_queue(queue) for queue in queues]
        except ValueError:
            return []

    def queue_counts(self, serving: dict[str, list[str]]) -> dict[str, QueueCounts]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it): its
        homes' counts added up."""
        return {
            name: functools.reduce(operator.add, (counts for _, counts in homes))
            for name, homes in self.home_counts(serving).items()
        }

    def home_counts(
        self, serving: dict[str, list[str]]
    ) -> dict[str, list[tuple[str, QueueCounts]]]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it) in each
        of its homes (layout.queue_homes: its partitions first), one round trip per home."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        heads = {name: layout.queue_homes(name) for name in serving}  # (read once: see layout)
        for name, worker_ids in serving.items():
            for head in heads[name]:
                commands += [
                    (head, ("ZCARD", layout.ready_key(name, head))),
                    (head, ("ZCARD", layout.delayed_key(name, head))),
                    (head, ("LLEN", layout.dead_key(name, head))),
                    (head, ("HGET", layout.limits_waiting_key(head), name)),
                    *(
                        (head, ("ZCARD", layout.running_key(worker_id, name, head)))
                        for worker_id in worker_ids
                    ),
                ]
        counts = iter(self._each_home(commands))
        found: dict[str, list[tuple[str, QueueCounts]]] = {name: [] for name in serving}
        for name, worker_ids in serving.items():
            for head in heads[name]:
                ready, delayed, dead, on_limits = (next(counts) for _ in range(4))
                home = QueueCounts(
                    ready=ready,
                    delayed=delayed,
                    dead=dead,
                    in_progress=sum(next(counts) for _ in worker_ids),
                    on_limits=int(on_limits or 0),
                )
                found[name].append((head, home))
        return found

    def ready_ages(self, queues: Sequence[str]) -> dict[str, list[tuple[str, float | None]]]:
        """How long the oldest ready task of each of ``queues`` has waited, in each of its
        homes (layout.queue_homes): seconds by that home's server clock, ``None`` where no
        task is ready (lua/queue_health.lua says since when a task is ready). One script
        call per home, pipelined per node."""
        heads = {name: layout.queue_homes(name) for name in queues}  # (read once: see layout)
        calls = [health_call(queue=name, head=head) for name in queues for head in heads[name]]
        replies_found = iter(self._run_each(calls))
        found: dict[str, list[tuple[str, float | None]]] = {}
        for name in queues:
            found[name] = []
            for head in heads[name]:
                now_ms, since_ms = (int(value) for value in next(replies_found))
                age = None if since_ms < 0 else max(now_ms - since_ms, 0) / 1000
                found[name].append((head, age))
        return found

    def dead_letters(self, queue: str, first: int, last: int) -> list[DeadLetter]:
        """The dead letters of ``queue`` from ``first`` to ``last`` (LRANGE's indexes: the
        newest is last), read whole."""
        return [
            replies.read_dead_letter(queue, entry)
            for head, key, start, end in self._spans(queue, "dead", first, last)[1]
            for entry in raw(self.at(head), "LRANGE", key, start, end)
        ]

    def _spans(
        self, queue: str, kind: Literal["ready", "delayed", "dead"], first: int, last: int
    ) -> tuple[int | None, list[Span]]:
        """Where the entries from ``first`` to ``last`` (negative: from the end) of the ``kind``
        keys of ``queue``'s homes, read as one, are: each home's head, key and indexes there.
        The total is given, or ``None`` for one home: its indexes are its key's."""
        heads = layout.queue_homes(queue)
        if kind == "dead":
            heads = heads[::-1]  # (the older home's first: the newest is last)
        keys = {"ready": layout.ready_key, "delayed": layout.delayed_key, "dead": layout.dead_key}
        key_of = functools.partial(keys[kind], queue)
        if len(heads) == 1:
            return None, [(heads[0], key_of(heads[0]), first, last)]
        count = "LLEN" if kind == "dead" else "ZCARD"
        counted = self._each_home([(head, (count, key_of(head))) for head in heads])
        lengths = [int(length) for length in counted]
        total = sum(lengths)
        low = max(0, first + total if first < 0 else first)
        high = min(total - 1, last + total if last < 0 else last)
        spans, offset = [], 0
        for head, length in zip(heads, lengths, strict=True):
            start, end = max(low, offset), min(high, offset + length - 1)
            if start <= end:
                spans.append((head, key_of(head), start - offset, end - offset))
            offset += length
        return total, spans

    def _glimpsed(
        self, spans: tuple[int | None, list[Span]], start_bytes: int, end_bytes: int = 0
    ) -> tuple[int, list[tuple[str, list[Glimpse]]]]:
        """The total of ``spans`` and a glimpse (:meth:`_glimpses`) of each span's entries."""
        total, found = spans[0], []
        for head, key, start, end in spans[1]:
            held, glimpsed = self._glimpses(key, start, end, start_bytes, end_bytes)
            total = held if total is None else total  # (one home: its key's size)
            found.append((head, glimpsed))
        return total or 0, found

    def dead_letter_glimpses(
        self, queue: str, first: int, last: int
    ) -> tuple[int, list[DeadLetter]]:
        """How many dead letters ``queue`` holds, and those from ``first`` to ``last``
        (LRANGE's indexes), each read in part when it is long (replies.glimpsed_dead_letter)."""
        spans = self._spans(queue, "dead", first, last)
        total, found = self._glimpsed(spans, GLIMPSE_BYTES, DEAD_LETTER_END_BYTES)
        return total, [
            replies.glimpsed_dead_letter(queue, glimpse.start, glimpse.end, glimpse.size)
            for _, glimpsed in found
            for glimpse in glimpsed
        ]

    def waiting(
        self, queue: str, state: Literal["ready", "delayed"], offset: int, count: int
    ) -> tuple[int, list[WaitingTask]]:
        """How many tasks wait in the ``state`` set of ``queue``, and ``count`` of them from
        ``offset`` in the order they will run, each read in part when it is long (the queue's
        own homes, partition by partition, then those of another count of partitions)."""
        spans = self._spans(queue, state, offset, offset + count - 1)
        total, found = self._glimpsed(spans, GLIMPSE_BYTES)
        waiting = []
        for head, glimpsed in found:
            page = []
            for glimpse in glimpsed:
                score = float(glimpse.score)
                due_ms = int(score) if state == "delayed" and math.isfinite(score) else None
                page.append(replies.waiting_task(glimpse.start, glimpse.size, due_ms))
            waiting += self._set_aside(queue, head, page, glimpsed) if state == "delayed" else page
        return total, waiting

    def _set_aside(
        self, queue: str, head: str, waiting: list[WaitingTask], glimpsed: list[Glimpse]
    ) -> list[WaitingTask]:
        """``waiting`` (delayed tasks of ``queue`` in ``head``), each marked with the rate it
        was set aside on: it is in that rate's turns at its due time (lib/limit_turns.lua)."""
        asked = [
            (i, key)
            for i, glimpse in enumerate(glimpsed)
            for key in replies.rate_keys(glimpse.start)
            if waiting[i].task_id and waiting[i].due_ms is not None
        ]
        if not asked:
            return waiting
        pipe = self.at(head).pipeline(transaction=False)
        for i, key in asked:
            due = waiting[i].due_ms
            pipe.zrangebyscore(layout.limit_turns_key(head, key), due, due)
        found = list(waiting)
        for (i, key), turns in zip(asked, pipe.execute(), strict=True):
            entry = f'{queue}\n{{"id":"{waiting[i].task_id}",'.encode()
            if not found[i].waits_on and any(turn.startswith(entry) for turn in turns):
                found[i] = dataclasses.replace(found[i], waits_on=key, waits_for="rate")
        return found

    def on_limits(self, queue: str, offset: int, count: int) -> tuple[int, list[WaitingTask]]:
        """How many tasks of ``queue`` wait for a concurrency limit's permit, and ``count``
        of them from ``offset``: home by home, key by key (by name), then in the order the
        key hands its permits on. Two round trips per home, and one per page of a key's
        waiting tasks (of every queue) read."""
        prefix = f"{queue}\n".encode()
        start_bytes = len(prefix) + GLIMPSE_BYTES
        total, found, skip = 0, list[WaitingTask](), offset
        for head in layout.queue_homes(queue):
            client = self.at(head)
            waiting, names = (
                client.pipeline(transaction=False)
                .hget(layout.limits_waiting_key(head), queue)
                .hkeys(layout.limits_key(head))
                .execute()
            )
            total += int(waiting or 0)
            names = sorted(text(name) for name in names)
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.zcard(layout.limit_wait_key(head, name))
            for name, size in zip(names, pipe.execute(), strict=True):
                key = layout.limit_wait_key(head, name)
                for first in range(0, size if len(found) < count else 0, ON_LIMITS_PAGE):
                    last = first + ON_LIMITS_PAGE - 1
                    _, glimpsed = self._glimpses(key, first, last, start_bytes)
                    for glimpse in glimpsed:
                        if not glimpse.start.startswith(prefix) or len(found) == count:
                            continue
                        if skip:
                            skip -= 1
                            continue
                        start, length = glimpse.start[len(prefix) :], glimpse.size - len(prefix)
                        task = replies.waiting_task(start, length, None)
                        found.append(
                            dataclasses.replace(task, waits_on=name, waits_for="concurrency")
                        )
                    if len(found) == count:
                        break
        return total, found

    def held_back(self, task_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Of these waiting tasks, those a limit holds back: task id -> ("concurrency", the
        key whose permit it waits for) or ("rate", the key of the rate it was set aside on),
        found by the payload each waits as (in its result, as a cancel finds it)."""
        found_payloads = self._each_home(
            [
                (layout.task_home(i), ("HMGET", layout.result_key(i), "payload", "message"))
                for i in task_ids
            ]
        )
        asked: list[tuple[str, str, str]] = []
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for task_id, (requeued, enqueued) in zip(task_ids, found_payloads, strict=True):
            payload = requeued or enqueued  # (as lib/result.lua writes them)
            message = replies.task_message(payload)
            if message is None:
                continue
            entry = f"{message.queue}\n".encode() + payload
            for limit in message.limits or []:
                kind, key = ("concurrency", "rate")[limit[0] == "r"], limit[1]
                key_of = layout.limit_wait_key if kind == "concurrency" else layout.limit_turns_key
                for head in layout.queue_homes(message.queue):
                    asked.append((task_id, kind, key))
                    commands.append((head, ("ZSCORE", key_of(head, key), entry)))
        found: dict[str, tuple[str, str]] = {}
        for (task_id, kind, key), score in zip(asked, self._each_home(commands), strict=True):
            if score is not None:
                found.setdefault(task_id, (kind, key))
        return found

    def dead_letter_at(self, queue: str, index: int) -> bytes | None:
        """The dead-letter entry at ``index`` (0: the newest), or ``None``."""
        for head, key, at, _ in self._spans(queue, "dead", -index - 1, -index - 1)[1]:
            found: bytes | None = raw(self.at(head), "LINDEX", key, at)
            return found
        return None

    def _glimpses(
        self, key: str, first: int, last: int, start_bytes: int, end_bytes: int = 0
    ) -> tuple[int, list[Glimpse]]:
        """How many entries ``key`` (a ZSET or LIST) holds, and the first ``start_bytes`` and
        last ``end_bytes`` bytes of those from ``first`` to ``last``, never whole entries."""
        call = entry_heads_call(
            key=key, first=first, last=last, start_bytes=start_bytes, end_bytes=end_bytes
        )
        total, *rest = self._run(call, raw=True)
        found = [
            Glimpse(start=rest[i], end=rest[i + 1], size=int(rest[i + 2]), score=rest[i + 3])
            for i in range(0, len(rest), 4)
        ]
        return int(total), found

    def running_records(self) -> list[RunningEntry]:
        """Every attempt running now, in two round trips per home."""
        running = self._each_home(
            [(head, ("HGETALL", layout.running_tasks_key(head))) for head in self._homes()]
        )
        attempts = {k: v for found in running for k, v in replies.fields_of(found).items()}
        messages = self._each_home(
            [(layout.task_home(i), ("HGET", layout.result_key(i), "message")) for i in attempts]
        )
        return [
            RunningEntry(task_id, attempt, replies.task_name(message))
            for (task_id, held), message in zip(attempts.items(), messages, strict=True)
            for attempt in Attempt.all_of(held)
        ]

    def minute_counts(
        self, queues: Sequence[str], hours: int
    ) -> tuple[int, dict[str, dict[int, dict[str, int]]]]:
        """The server's minute (since the epoch) and, per queue, what its workers finished in
        each minute of the last ``hours`` hours (by minute, then kind: "processed", ...)."""
        seconds, _ = self.client.time()
        now_minute = int(seconds) // 60
        hour = now_minute // 60
        first = now_minute - hours * 60 + 1
        heads = {name: layout.queue_homes(name) for name in queues}  # (read once: see layout)
        found_hours = iter(
            self._each_home(
                [
                    (head, ("HGETALL", layout.stats_key(name, h, head)))
                    for name in queues
                    for head in heads[name]
                    for h in range(hour - hours, hour + 1)
                ]
            )
        )
        found: dict[str, dict[int, dict[str, int]]] = {}
        for name in queues:
            summed = found[name] = {}
            for _ in heads[name]:
                merged: dict[str, bytes] = {}
                for _ in range(hours + 1):
                    merged.update(replies.fields_of(next(found_hours)))
                for minute, kinds in replies.minute_counts(merged, first).items():
                    summed.setdefault(minute, collections.Counter()).update(kinds)
        return now_minute, found

    def totals(self) -> dict[str, float]:
        """The metrics' running totals (see metrics.py's ``_totals``), those that are
        numbers."""
        found: dict[str, float] = {}
        for head in self._homes():
            stored = raw(self.at(head), "HGETALL", layout.totals_key(head))
            for name, value in replies.fields_of(stored).items():
                try:
                    found[name] = found.get(name, 0.0) + float(value)
                except ValueError:
                    continue
        return found

    def limits_in_use(self, count: int = 100) -> tuple[int, list[LimitUse]]:
        """How many concurrency limits are in use, and the first ``count`` of them, by key
        (a limit in use in several homes once per home)."""
        total, uses = 0, list[LimitUse]()
        for head in self._homes():
            client = self.at(head)
            total += int(client.hlen(layout.limits_key(head)))
            found: dict[bytes, bytes] = {}
            cursor = 0
            while len(uses) + len(found) < count:
                cursor, page = raw(client, "HSCAN", layout.limits_key(head), cursor, "COUNT", count)
                found.update(page)
                if int(cursor) == 0:
                    break
            found = dict(list(found.items())[: count - len(uses)])
            pipe = client.pipeline(transaction=False)
            for key in found:
                name = text(key)
                pipe.scard(layout.limit_held_key(head, name))
                pipe.zcard(layout.limit_wait_key(head, name))
            counts = pipe.execute()
            uses += [
                LimitUse(text(key), int(limit), int(counts[2 * i]), int(counts[2 * i + 1]))
                for i, (key, limit) in enumerate(found.items())
            ]
        return total, sorted(uses, key=lambda use: use.key)
