"""The inspection facet of the task store: the readers behind results, ``rc_queues``,
the operations pages and metrics (never a write), and the server's risky settings."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, Literal

import redis
from redis import Redis

from ...connection import text
from ..messages import MalformedTask, TaskMessage, validate_queue
from . import replies
from .calls import entry_heads_call
from .layout import (
    dead_key,
    delayed_key,
    leases_key,
    limit_held_key,
    limit_turns_key,
    limit_wait_key,
    limits_key,
    limits_waiting_key,
    queue_homes,
    ready_key,
    result_key,
    running_key,
    running_tasks_key,
    stats_key,
    task_home,
    totals_key,
    workers_key,
)
from .records import (
    Attempt,
    DeadLetter,
    Glimpse,
    LimitUse,
    QueueCounts,
    RunningEntry,
    TaskRecord,
    WaitingTask,
    WorkerInfo,
)
from .replies import fields_of
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


class Inspection(Router):
    """The readers: results, workers, queues' counts, dead letters, metrics."""

    def task_records(self, task_ids: Sequence[str]) -> list[TaskRecord | None]:
        """Each task's record (``None`` where none is kept, or it is not one of ours), from
        its result hash and the running hash, in one round trip per home (a moved
        task's under its id now: see :meth:`~.router.Router.current_id`)."""
        task_ids = [self.current_id(task_id) for task_id in task_ids]
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for task_id in task_ids:
            head = task_home(task_id)
            commands += [
                (head, ("HGETALL", result_key(task_id))),
                (head, ("HGET", running_tasks_key(head), task_id)),
            ]
        found = self._each_home(commands)
        return [
            replies.task_record(task_id, found[2 * i], found[2 * i + 1])
            for i, task_id in enumerate(task_ids)
        ]

    def queued_message(self, task_id: str) -> TaskMessage | None:
        """The message a task was queued with, while its result is kept (``None`` if it
        is not, or is not one of ours)."""
        task_id = self.current_id(task_id)
        found = raw(self.at(task_home(task_id)), "HGET", result_key(task_id), "message")
        try:
            return TaskMessage.decode(found) if found else None
        except MalformedTask:
            return None

    def workers(self) -> list[WorkerInfo]:
        """Every registered worker, live or not yet recovered, by id, with the seconds
        until its lease runs out (by the server's clock), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", workers_key())
        raw(pipe, "ZRANGE", leases_key(), 0, -1, "WITHSCORES", withscores=True)
        pipe.time()
        described, leases, (seconds, micros) = pipe.execute()
        now_ms = replies.server_ms(seconds, micros)
        left = {replies.text(member): (float(ms) - now_ms) / 1000 for member, ms in leases}
        found = [
            replies.worker_info(worker_id, info, left.get(worker_id, -math.inf))
            for worker_id, info in fields_of(described).items()
        ]
        return sorted(found, key=lambda worker: worker.id)

    def worker_queues(self, worker_id: str) -> list[str]:
        """The queues a worker registered to serve ([] if it is gone, or they cannot be
        read)."""
        described = replies.worker_description(raw(self.client, "HGET", workers_key(), worker_id))
        queues = replies.worker_queues(described or {}) or []
        valid = []
        for queue in queues:
            try:
                valid.append(validate_queue(queue))
            except ValueError:
                return []
        return valid

    def queue_counts(self, serving: dict[str, list[str]]) -> dict[str, QueueCounts]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it), in one
        round trip per home: its homes' counts added up."""
        return {
            name: functools.reduce(operator.add, (counts for _, counts in homes))
            for name, homes in self.home_counts(serving).items()
        }

    def home_counts(
        self, serving: dict[str, list[str]]
    ) -> dict[str, list[tuple[str, QueueCounts]]]:
        """The counts of each queue of ``serving`` (queue -> the workers serving it) in
        each of its homes (see layout.queue_homes: its partitions first), in one round
        trip per home."""
        commands: list[tuple[str, tuple[Any, ...]]] = []
        heads = {name: queue_homes(name) for name in serving}  # (read once: see layout)
        for name, worker_ids in serving.items():
            for head in heads[name]:
                commands += [
                    (head, ("ZCARD", ready_key(name, head))),
                    (head, ("ZCARD", delayed_key(name, head))),
                    (head, ("LLEN", dead_key(name, head))),
                    (head, ("HGET", limits_waiting_key(head), name)),
                    *(
                        (head, ("ZCARD", running_key(worker_id, name, head)))
                        for worker_id in worker_ids
                    ),
                ]
        counts = iter(self._each_home(commands))
        found: dict[str, list[tuple[str, QueueCounts]]] = {}
        for name, worker_ids in serving.items():
            found[name] = []
            for head in heads[name]:
                ready, delayed, dead, on_limits = (next(counts) for _ in range(4))
                held = sum(next(counts) for _ in worker_ids)
                home = QueueCounts(
                    ready=ready,
                    delayed=delayed,
                    dead=dead,
                    in_progress=held,
                    on_limits=int(on_limits or 0),
                )
                found[name].append((head, home))
        return found

    def dead_letters(self, queue: str, first: int, last: int) -> list[DeadLetter]:
        """The dead letters of ``queue`` from ``first`` to ``last`` (LRANGE's indexes: the
        newest is last), read whole."""
        found = [
            entry
            for head, start, end in self._dead_spans(queue, first, last)[1]
            for entry in raw(self.at(head), "LRANGE", dead_key(queue, head), start, end)
        ]
        return [replies.read_dead_letter(queue, entry) for entry in found]

    def _dead_spans(
        self, queue: str, first: int, last: int
    ) -> tuple[int | None, list[tuple[str, int, int]]]:
        """Where the dead letters of ``queue`` from ``first`` to ``last`` (LRANGE's
        indexes) are (see :meth:`_spans`): the lists of its homes read as one, the older
        home's first."""
        heads = queue_homes(queue)[::-1]
        return self._spans(heads, lambda head: ("LLEN", dead_key(queue, head)), first, last)

    def _spans(
        self, heads: Sequence[str], count: Callable[[str], tuple[str, str]], first: int, last: int
    ) -> tuple[int | None, list[tuple[str, int, int]]]:
        """Where the entries from ``first`` to ``last`` (indexes, negative from the end)
        of a key in each of these homes, read as one in their order, are: a home's head
        and the indexes there, for each home that holds some (``count``: the command
        that counts a home's). The total of them is given, or ``None`` for one home: its
        indexes are its key's."""
        if len(heads) == 1:
            return None, [(heads[0], first, last)]
        counted = self._each_home([(head, count(head)) for head in heads])
        lengths = [int(length) for length in counted]
        total = sum(lengths)
        low = max(0, first + total if first < 0 else first)
        high = min(total - 1, last + total if last < 0 else last)
        spans, offset = [], 0
        for head, length in zip(heads, lengths, strict=True):
            start, end = max(low, offset), min(high, offset + length - 1)
            if start <= end:
                spans.append((head, start - offset, end - offset))
            offset += length
        return total, spans

    def dead_letter_glimpses(
        self, queue: str, first: int, last: int
    ) -> tuple[int, list[DeadLetter]]:
        """How many dead letters ``queue`` holds, and those from ``first`` to ``last``
        (LRANGE's indexes), each read in part when it is long (see
        :func:`replies.glimpsed_dead_letter`), in one round trip per home (and one for
        their lengths, when there are several)."""
        total, spans = self._dead_spans(queue, first, last)
        found: list[Glimpse] = []
        for head, start, end in spans:
            listed, glimpsed = self._glimpses(
                dead_key(queue, head),
                start,
                end,
                start_bytes=GLIMPSE_BYTES,
                end_bytes=DEAD_LETTER_END_BYTES,
            )
            found += glimpsed
            total = listed if total is None else total  # (one home: its list's length)
        return total or 0, [
            replies.glimpsed_dead_letter(queue, glimpse.start, glimpse.end, glimpse.size)
            for glimpse in found
        ]

    def waiting(
        self, queue: str, state: Literal["ready", "delayed"], offset: int, count: int
    ) -> tuple[int, list[WaitingTask]]:
        """How many tasks wait in the ``state`` set of ``queue``, and ``count`` of them from
        ``offset`` in the order they will run, each read in part when it is long, in one
        round trip per home (and one for their sizes, when there are several: the queue's
        own home's, partition by partition, then those of another count of partitions)."""
        key_of = ready_key if state == "ready" else delayed_key
        total, spans = self._spans(
            queue_homes(queue),
            lambda head: ("ZCARD", key_of(queue, head)),
            offset,
            offset + count - 1,
        )
        waiting = []
        for head, start, end in spans:
            held, glimpsed = self._glimpses(
                key_of(queue, head), start, end, start_bytes=GLIMPSE_BYTES
            )
            total = held if total is None else total  # (one home: its set's size)
            page = []
            for glimpse in glimpsed:
                score = float(glimpse.score)
                due_ms = int(score) if state == "delayed" and math.isfinite(score) else None
                page.append(replies.waiting_task(glimpse.start, glimpse.size, due_ms))
            waiting += self._set_aside(queue, head, page, glimpsed) if state == "delayed" else page
        return total or 0, waiting

    def _set_aside(
        self, queue: str, head: str, waiting: list[WaitingTask], glimpsed: list[Glimpse]
    ) -> list[WaitingTask]:
        """``waiting`` (delayed tasks of ``queue`` in ``head``), each set aside on a rate
        saying which: it is in that rate's turns, at its due time (lib/limit_turns.lua
        keeps the two together), in one round trip for those a rate limits."""
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
            pipe.zrangebyscore(limit_turns_key(head, key), due, due)
        found = list(waiting)
        for (i, key), turns in zip(asked, pipe.execute(), strict=True):
            entry = f'{queue}\n{{"id":"{waiting[i].task_id}",'.encode()
            if not found[i].waits_on and any(turn.startswith(entry) for turn in turns):
                found[i] = dataclasses.replace(found[i], waits_on=key, waits_for="rate")
        return found

    def on_limits(self, queue: str, offset: int, count: int) -> tuple[int, list[WaitingTask]]:
        """How many tasks of ``queue`` wait for a concurrency limit's permit, and ``count``
        of them from ``offset``: home by home, key by key (in the order of their names),
        then in the order the key hands its permits on. Two round trips per home, and one
        per page of a key's waiting tasks read (of every queue: the key's, not the
        queue's)."""
        prefix = f"{queue}\n".encode()
        total, found, skip = 0, list[WaitingTask](), offset
        for head in queue_homes(queue):
            client = self.at(head)
            waiting, names = (
                client.pipeline(transaction=False)
                .hget(limits_waiting_key(head), queue)
                .hkeys(limits_key(head))
                .execute()
            )
            total += int(waiting or 0)
            names = sorted(text(name) for name in names)
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.zcard(limit_wait_key(head, name))
            for name, size in zip(names, pipe.execute(), strict=True):
                for first in range(0, size if len(found) < count else 0, ON_LIMITS_PAGE):
                    _, glimpsed = self._glimpses(
                        limit_wait_key(head, name),
                        first,
                        first + ON_LIMITS_PAGE - 1,
                        start_bytes=len(prefix) + GLIMPSE_BYTES,
                    )
                    for glimpse in glimpsed:
                        if not glimpse.start.startswith(prefix) or len(found) == count:
                            continue
                        if skip:
                            skip -= 1
                            continue
                        task = replies.waiting_task(
                            glimpse.start[len(prefix) :], glimpse.size - len(prefix), None
                        )
                        found.append(
                            dataclasses.replace(task, waits_on=name, waits_for="concurrency")
                        )
                    if len(found) == count:
                        break
        return total, found

    def held_back(self, task_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Of the tasks ``task_ids`` that wait to run, those a limit holds back: task id ->
        ("concurrency", the key whose permit it waits for) or ("rate", the key of the
        rate it was set aside on). Two round trips per home: the payloads each waits as
        (in its result, as a cancel finds it), then the limits' sets it may be in."""
        found_payloads = self._each_home(
            [(task_home(i), ("HMGET", result_key(i), "payload", "message")) for i in task_ids]
        )
        asked: list[tuple[str, str, str]] = []
        commands: list[tuple[str, tuple[Any, ...]]] = []
        for task_id, (requeued, enqueued) in zip(task_ids, found_payloads, strict=True):
            payload = requeued or enqueued  # (as lib/result.lua writes them)
            try:
                message = TaskMessage.decode(payload or b"")
            except MalformedTask:
                continue
            entry = f"{message.queue}\n".encode() + payload
            for limit in message.limits or []:
                kind, key = ("concurrency", "rate")[limit[0] == "r"], limit[1]
                key_of = limit_wait_key if kind == "concurrency" else limit_turns_key
                for head in queue_homes(message.queue):
                    asked.append((task_id, kind, key))
                    commands.append((head, ("ZSCORE", key_of(head, key), entry)))
        found: dict[str, tuple[str, str]] = {}
        for (task_id, kind, key), score in zip(asked, self._each_home(commands), strict=True):
            if score is not None:
                found.setdefault(task_id, (kind, key))
        return found

    def dead_letter_at(self, queue: str, index: int) -> bytes | None:
        """The dead-letter entry at ``index`` (0: the newest), or ``None``."""
        for head, at, _ in self._dead_spans(queue, -index - 1, -index - 1)[1]:
            found: bytes | None = raw(self.at(head), "LINDEX", dead_key(queue, head), at)
            return found
        return None

    def _glimpses(
        self, key: str, first: int, last: int, *, start_bytes: int, end_bytes: int = 0
    ) -> tuple[int, list[Glimpse]]:
        """How many entries ``key`` (a ZSET or LIST) holds, and a glimpse of those from
        ``first`` to ``last`` (negative: from the end): their first ``start_bytes`` and last
        ``end_bytes`` bytes, never a page of whole entries (one round trip)."""
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
            [(head, ("HGETALL", running_tasks_key(head))) for head in self._homes()]
        )
        attempts = {k: v for found in running for k, v in fields_of(found).items()}
        messages = self._each_home(
            [(task_home(i), ("HGET", result_key(i), "message")) for i in attempts]
        )
        return [
            RunningEntry(task_id, attempt, replies.task_name(message))
            for (task_id, held), message in zip(attempts.items(), messages, strict=True)
            for attempt in Attempt.all_of(held)
        ]

    def minute_counts(
        self, queues: Sequence[str], hours: int
    ) -> tuple[int, dict[str, dict[int, dict[str, int]]]]:
        """The server's minute (since the epoch) and, per queue, what its workers finished
        in each minute of the last ``hours`` hours (by minute, then kind: "processed",
        "failed", "retried"), in a round trip per home after one for the clock."""
        seconds, _ = self.client.time()
        now_minute = int(seconds) // 60
        hour = now_minute // 60
        first = now_minute - hours * 60 + 1
        heads = {name: queue_homes(name) for name in queues}  # (read once: see layout)
        found_hours = iter(
            self._each_home(
                [
                    (head, ("HGETALL", stats_key(name, h, head)))
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
                    merged.update(fields_of(next(found_hours)))
                for minute, kinds in replies.minute_counts(merged, first).items():
                    for kind, count in kinds.items():
                        at = summed.setdefault(minute, {})
                        at[kind] = at.get(kind, 0) + count
        return now_minute, found

    def totals(self) -> dict[str, float]:
        """The metrics' running totals ("<queue>:<outcome>:<bucket>" and "<queue>:us"),
        those that are numbers."""
        found: dict[str, float] = {}
        for head in self._homes():
            for name, value in fields_of(raw(self.at(head), "HGETALL", totals_key(head))).items():
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
            total += int(client.hlen(limits_key(head)))
            found: dict[bytes, bytes] = {}
            cursor = 0
            while len(uses) + len(found) < count:
                cursor, page = raw(client, "HSCAN", limits_key(head), cursor, "COUNT", count)
                found.update(page)
                if int(cursor) == 0:
                    break
            found = dict(list(found.items())[: count - len(uses)])
            pipe = client.pipeline(transaction=False)
            for key in found:
                name = text(key)
                pipe.scard(limit_held_key(head, name))
                pipe.zcard(limit_wait_key(head, name))
            counts = pipe.execute()
            uses += [
                LimitUse(text(key), int(limit), int(counts[2 * i]), int(counts[2 * i + 1]))
                for i, (key, limit) in enumerate(found.items())
            ]
        return total, sorted(uses, key=lambda use: use.key)
