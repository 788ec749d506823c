"""The task message: what travels through Redis, its JSON encoding, and task ids.

Nothing here talks to Redis. A task travels as JSON (never pickle)::

    {"id":"<32 hex>","priority":0[,"limits":[...]],"task":"<name>","queue":"<queue>","args":[...],
     "kwargs":{...}[,"flow":[...]][,"metadata":{...}][,"backend":"<alias>"]
     [,"scheduled_for":<ms>][,"enqueued_at":<ms>[,"due_at":<ms>]],"retries":0}

and ``,"crashes":<n>`` is appended before the final brace once a worker died running
it. The order is a contract with the Lua scripts, which read the id and the priority
from the start of a payload, write the enqueue time before ``"retries":0}`` and append
the crash count at its end, with string operations (re-encoding JSON in Lua could alter
numbers). ``backend``: the ``settings.TASKS`` alias of a Django ``@task`` (``task`` is
then its module path). ``scheduled_for``: the tick (epoch ms) of a scheduled run.
``flow``: a workflow step's place (:class:`FlowStep`). ``limits``: the task's limits,
filled from its arguments (limits.py). ``enqueued_at``: the server's time of the
enqueue (epoch ms), absent from payloads of older releases, deferrals and requeued dead
letters. ``due_at``: when a task enqueued with a delay was due (epoch ms, stamped with
its enqueue time, and dropped with it). ``metadata``: what the task was enqueued with
(Django's proposed task metadata), absent when empty, so that other payloads are as
older releases wrote them (whose decoders skip keys they do not know).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .. import keys
from ..conf import conf
from ..exceptions import InvalidInput, TaskSerializationError
from .limits import to_json as limits_json

DEFAULT_QUEUE = "default"
MAX_QUEUE_NAME = 200
MAX_TASK_NAME = 200
# Django's range: higher runs first; equal priorities run in the order enqueued.
MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = -100, 100, 0

# One encoder for every payload (json.dumps with options would build one per call).
_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


class MalformedTask(ValueError):
    """A payload that is not a task this version can read; the message says why."""


@dataclass(frozen=True, kw_only=True)
class FlowStep:
    """Where a task stands in a workflow: the workflow's id, its step's number, the task
    id and queue of each step after it, and ``input``: the node whose result is its first
    argument, read when it runs (0: none, or in its arguments), so that a group after a
    group has the first one's results kept once, not once per member."""

    workflow: str
    step: int
    kids: tuple[tuple[str, str], ...] = ()
    input: int = 0

    def encode(self) -> list[Any]:
        value = [self.workflow, self.step, [list(kid) for kid in self.kids]]
        return [*value, self.input] if self.input else value

    @classmethod
    def decode(cls, value: object) -> FlowStep:
        if not (
            isinstance(value, list)
            and len(value) in (3, 4)
            and isinstance(value[0], str)
            and keys.is_integer(value[1])
            and isinstance(value[2], list)
            and all(
                isinstance(kid, list) and len(kid) == 2 and all(isinstance(v, str) for v in kid)
                for kid in value[2]
            )
            and (len(value) == 3 or (keys.is_integer(value[3]) and value[3] > 0))
        ):
            raise MalformedTask(
                "not a task: its 'flow' must be [workflow, step, [[id, queue]], input?]"
            )
        kids = tuple((kid[0], kid[1]) for kid in value[2])
        return cls(workflow=value[0], step=value[1], kids=kids, input=value[3] if value[3:] else 0)


@dataclass(kw_only=True)
class PlannedStep:
    """A step of a workflow planned by ``definition._Plan``, about to be written."""

    number: int
    message: TaskMessage
    parents: tuple[int, ...]
    template: str | None  # its first argument: JSON with "@<step>" for results
    allow_failure: bool = False
    kids: list[int] = field(default_factory=list)
    input: int = 0  # or the barrier whose result is its first argument (FlowStep.input)


@dataclass(kw_only=True)
class Barrier:
    """Not a step: it stands between many parents and many children that wait for all of
    them (``chain(group(N), group(M))``), so that the workflow holds N + M links, not
    N x M, and one copy of the children's input, which each reads when it runs (see
    lua/lib/flow.lua and FlowStep.input)."""

    number: int  # after every step's
    parents: tuple[int, ...]
    kids: list[int]
    template: str | None


@dataclass(frozen=True, kw_only=True)
class TaskMessage:
    """One task as it travels through Redis: which task to run, with what, and its history."""

    id: str
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = DEFAULT_PRIORITY
    backend: str | None = None  # the Django Tasks backend alias, for Django's @task
    scheduled_for: int | None = None  # a scheduled run's tick (epoch ms)
    enqueued_at: int | None = None  # the server's time of the enqueue (epoch ms)
    due_at: int | None = None  # enqueued with a delay: when it was due (epoch ms)
    retries: int = 0
    crashes: int = 0  # how many workers died running it
    flow: FlowStep | None = None  # its place in a workflow
    limits: list[list[Any]] | None = None  # its limits, filled (see limits.py)
    metadata: dict[str, Any] | None = None  # as enqueued (see metadata_json)

    def encode(self) -> str:
        """The payload; :class:`TaskSerializationError` if the arguments are not JSON."""
        body: dict[str, Any] = {
            "id": self.id,
            "priority": self.priority,
            "task": self.task,
            "queue": self.queue,
            "args": self.args,
            "kwargs": self.kwargs,
        }
        if self.flow is not None:
            body["flow"] = self.flow.encode()
        if self.metadata:
            body["metadata"] = self.metadata
        for name in ("backend", "scheduled_for", "enqueued_at", "due_at"):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        body["retries"] = self.retries  # last: queue_recover.lua appends the crashes after it
        payload = to_json(body, f"the arguments of task {self.task!r}")
        if self.limits:  # right after the priority, where the scripts look for them
            head = f'{{"id":"{self.id}","priority":{self.priority},'
            payload = f'{head}"limits":{limits_json(self.limits)},{payload[len(head) :]}'
        return f'{payload[:-1]},"crashes":{self.crashes}}}' if self.crashes else payload

    @property
    def first_attempt(self) -> bool:
        """Whether this is the task's first attempt for sure: it carries its enqueue time
        (dropped by a deferral or a dead letter's requeue) and no retry or crash."""
        return self.enqueued_at is not None and not self.retries and not self.crashes

    @property
    def due_ms(self) -> int | None:
        """When its first attempt was due (epoch ms): its delay's end, its schedule's
        tick, or its enqueue; ``None`` unless it is a first attempt for sure."""
        if not self.first_attempt:
            return None
        return self.due_at or self.scheduled_for or self.enqueued_at

    def digest(self) -> str:
        """What makes two enqueues equal for a unique task: the task and its arguments,
        compared as JSON with sorted keys (:class:`InvalidInput` for keys that do not sort)."""
        try:
            canonical = json.dumps(
                [self.task, self.args, self.kwargs], sort_keys=True, separators=(",", ":")
            )
        except TypeError as error:  # a dict's keys of mixed types: 1 and "a" do not sort
            raise InvalidInput(
                "args",
                f"a unique task's arguments are compared with their dicts' keys sorted, "
                f"and keys of mixed types do not sort ({error})",
            ) from None
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def decode(cls, payload: str | bytes) -> TaskMessage:
        """Parse a payload; whatever it holds (not UTF-8, not JSON, too deep, the wrong
        shape), this raises only :class:`MalformedTask`, saying what is wrong."""
        try:
            data = json.loads(payload)
        except RecursionError:
            raise MalformedTask("not a task: its JSON is nested too deeply") from None
        except (ValueError, TypeError, MemoryError) as error:  # UnicodeDecodeError is a ValueError
            text = str(error)
            reason = text if len(text) <= 200 else text[:200] + "..."
            raise MalformedTask(f"not a task: not JSON ({reason})") from None
        if not isinstance(data, dict):
            raise MalformedTask(f"not a task: a JSON {type(data).__name__}, not an object")
        for name, kind in _FIELDS:
            if not isinstance(data.get(name), kind):
                raise MalformedTask(f"not a task: its {name!r} must be a {kind.__name__}")
        numbers = {name: data.get(name, 0) for name in _NUMBERS}
        times: dict[str, Any] = {name: data.get(name) for name in _TIMES}
        for name, number in (*numbers.items(), *times.items()):
            if not keys.is_integer(number) and not (number is None and name in times):
                raise MalformedTask(f"not a task: its {name!r} must be an integer")
        if numbers["retries"] < 0 or numbers["crashes"] < 0:
            raise MalformedTask("not a task: negative retry or crash count")
        backend = data.get("backend")
        if backend is not None and not isinstance(backend, str):
            raise MalformedTask("not a task: its 'backend' must be a string")
        if not all(isinstance(name, str) for name in data["kwargs"]):
            raise MalformedTask("not a task: its keyword argument names must be strings")
        metadata = data.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise MalformedTask("not a task: its 'metadata' must be an object")
        limits = data.get("limits")
        if limits is not None and not (
            isinstance(limits, list) and all(_is_limit(limit) for limit in limits)
        ):
            raise MalformedTask(
                "not a task: its 'limits' must be a list of ['c', key, limit] and "
                "['r', key, limit, per ms, burst]"
            )
        return cls(
            **{name: data[name] for name, _ in _FIELDS},
            backend=backend,
            flow=None if data.get("flow") is None else FlowStep.decode(data["flow"]),
            limits=limits or None,
            metadata=metadata or None,
            **numbers,
            **times,
        )


# A payload's fields that must be there, and their types; its counts (0 if left out);
# its times (epoch ms, or left out).
_FIELDS = (("id", str), ("task", str), ("queue", str), ("args", list), ("kwargs", dict))
_NUMBERS = ("priority", "retries", "crashes")
_TIMES = ("scheduled_for", "enqueued_at", "due_at")


def _is_limit(limit: object) -> bool:
    """Whether ``limit`` is a filled limit as lua/lib/limits.lua reads one."""
    if not (isinstance(limit, list) and len(limit) >= 3 and isinstance(limit[1], str)):
        return False
    numbers = limit[2:]
    if not all(keys.is_integer(number) for number in numbers):
        return False
    if limit[0] == "c":
        return len(numbers) == 1 and numbers[0] >= 1
    return limit[0] == "r" and len(numbers) == 3 and min(numbers[:2]) >= 1 and numbers[2] >= 0


def to_json(value: Any, what: str) -> str:
    """``value`` as compact JSON, or :class:`TaskSerializationError` naming ``what`` it is
    (also for a lone surrogate, which JSON encodes but UTF-8, and so Redis, cannot)."""
    try:
        payload = _json(value)
        if not payload.isascii():  # O(1): most payloads skip the encoding
            payload.encode()
    except (TypeError, ValueError, RecursionError) as error:
        reason: object = error
        if isinstance(error, RecursionError):
            reason = "it is nested too deeply"
        elif isinstance(error, UnicodeEncodeError):
            reason = f"{error.object[error.start : error.end]!r} is a lone surrogate, not UTF-8"
        raise TaskSerializationError(f"{what} cannot be stored as JSON: {reason}") from None
    return payload


# The metadata key of a task's tracing context (tracing.py): not counted in its size.
TRACE_KEY = "trace"


def metadata_json(metadata: object) -> str:
    """A task's metadata as JSON, or :class:`InvalidInput` naming what is wrong: it must
    be a dict (a JSON object) with str keys, whose values JSON can carry, of at most
    ``TASK_METADATA_MAX_BYTES`` as JSON (its tracing context, :data:`TRACE_KEY`, left out)."""
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata", f"must be a dict, not {type(metadata).__name__}")
    for key in metadata:
        if not isinstance(key, str):
            raise InvalidInput("metadata", f"its keys must be strings, not {key!r}")
    try:
        text = to_json(metadata, "it")
    except TaskSerializationError as error:
        for key, value in metadata.items():  # (name the key whose value is the problem)
            try:
                to_json(value, "its value")
            except TaskSerializationError as problem:
                raise InvalidInput(f"metadata[{key!r}]", str(problem)) from None
        raise InvalidInput("metadata", str(error)) from None
    size, most = len(text.encode()), int(conf.get("TASK_METADATA_MAX_BYTES"))
    if size > most and TRACE_KEY in metadata:  # (the tracing context is not the task's)
        size = len(to_json({k: v for k, v in metadata.items() if k != TRACE_KEY}, "it").encode())
    if size > most:
        raise InvalidInput(
            "metadata", f"is {size:,} bytes of JSON, over TASK_METADATA_MAX_BYTES ({most:,})"
        )
    return text


# The longest note a task's progress may carry, in characters.
MAX_PROGRESS_NOTE = 200


def check_progress(done: object, total: object, note: object) -> None:
    """:class:`InvalidInput` naming what is wrong in a task's progress: ``done`` must be
    a finite number >= 0, ``total`` ``None`` or a finite number > 0 (whole numbers at
    most 2**53), ``note`` a str of at most MAX_PROGRESS_NOTE characters."""
    if not finite_number(done) or done < 0:
        raise InvalidInput(
            "done", f"must be a finite number from 0 to 2**53, not {keys.shorten(done)}"
        )
    if total is not None and (not finite_number(total) or total <= 0):
        raise InvalidInput(
            "total", f"must be None or a finite number above 0, not {keys.shorten(total)}"
        )
    if not isinstance(note, str):
        raise InvalidInput("note", f"must be a str, not {type(note).__name__}")
    if len(note) > MAX_PROGRESS_NOTE:
        raise InvalidInput("note", f"is {len(note)} characters, over {MAX_PROGRESS_NOTE}")


def progress_json(done: float, total: float | None, note: str) -> str:
    """A task's progress as saved, checked (:func:`check_progress`): lua/lib/result.lua's
    result_progress adds when it was said."""
    check_progress(done, total, note)
    return json.dumps({"done": done, "total": total, "note": note}, separators=(",", ":"))


# The largest whole number every JSON reader (a float) holds exactly.
MAX_EXACT = 2**53


def finite_number(value: object) -> TypeGuard[float]:
    """``value`` is an int of at most 2**53 either way, or a finite float (not a bool)."""
    kind = type(value)
    if kind is int:  # (first: progress is said often, mostly as ints)
        return -MAX_EXACT <= value <= MAX_EXACT  # type: ignore[operator]
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and kind is not bool and -MAX_EXACT <= value <= MAX_EXACT


def flow_of(payload: bytes) -> FlowStep | None:
    """The workflow step a payload is (``None`` for a plain task, or one it cannot read).
    Only a payload with the field is decoded (JSON escapes a string argument's quotes)."""
    if b',"flow":' not in payload:
        return None
    try:
        return TaskMessage.decode(payload).flow
    except MalformedTask:
        return None


def task_id_of(payload: bytes) -> str:
    """The task id at the start of a payload, as the scripts read it ("" when none)."""
    prefix = b'{"id":"'
    end = payload.find(b'"', len(prefix))
    found = payload[len(prefix) : end] if payload.startswith(prefix) and end > 0 else b""
    return found.decode() if found and all(c in b"0123456789abcdefABCDEF" for c in found) else ""


def random_id() -> str:
    """32 random hex digits: a workflow's id (a task's is ``store.new_task_id``)."""
    return os.urandom(16).hex()


def validate_queue(queue: object, field: str = "queue") -> str:
    """Return ``queue`` if it is a usable queue name, else raise :class:`InvalidInput`."""
    return keys.validate_name(queue, field, max_length=MAX_QUEUE_NAME)


def validate_priority(priority: object, field: str = "priority") -> int:
    """Return ``priority`` if it is a whole number from -100 to 100, else :class:`InvalidInput`."""
    if not keys.is_integer(priority) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(
            field, f"must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, not {priority!r}"
        )
    return priority


# -- when an enqueued task is due -------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Due:
    """When an enqueued task is due: now (neither given), ``after_ms`` after its enqueue
    by the Redis server's clock, or at ``at_ms`` (epoch ms)."""

    after_ms: int | None = None
    at_ms: int | None = None

    def __post_init__(self) -> None:
        if self.after_ms is not None and self.at_ms is not None:
            raise ValueError("a task is due after a delay or at a time, not both")

    def argument(self) -> str:
        """As the enqueue script takes it: "" now, "+<ms>" later, "@<epoch ms>" then."""
        if self.at_ms is not None:
            return f"@{self.at_ms}"
        return "" if self.after_ms is None else f"+{self.after_ms}"

    def run_after_ms(self, enqueued_at_ms: int) -> int | None:
        """The epoch ms it is due at, given the server's time of the enqueue (None: now)."""
        if self.at_ms is not None:
            return self.at_ms
        return None if self.after_ms is None else enqueued_at_ms + self.after_ms


NOW = Due()
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
MAX_DELAY = datetime.timedelta(seconds=keys.MAX_SECONDS)


def due_at(when: object, field: str = "when") -> Due:
    """When a task is due at ``when`` (an aware datetime at most ten years from now, the
    bound of every duration), or :class:`InvalidInput` naming ``field``."""
    if isinstance(when, datetime.timedelta):
        raise InvalidInput(field, "must be a datetime, not a timedelta: timezone.now() + it")
    if not isinstance(when, datetime.datetime):
        raise InvalidInput(field, f"must be a datetime, not {type(when).__name__}")
    if when.utcoffset() is None:
        raise InvalidInput(field, "must be an aware datetime (with a time zone)")
    # By this machine's clock: the server's is read only by the script that writes, and
    # a bound of ten years does not need it. Beyond it, times may not fit a datetime.
    if when - datetime.datetime.now(datetime.timezone.utc) > MAX_DELAY:
        raise InvalidInput(
            field,
            f"must be at most {keys.MAX_SECONDS:,} seconds (ten years) from now, "
            f"not {when.isoformat()}",
        )
    # Whole milliseconds, rounded up (in integers: floats can round), so that a task
    # never runs before its time.
    micros = (when - EPOCH) // datetime.timedelta(microseconds=1)
    return Due(at_ms=-(-micros // 1000))
