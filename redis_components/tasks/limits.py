"""Rate and concurrency limits of tasks, enforced where a worker takes a task.

A task's limits travel in its payload, filled from its call's arguments when it is
enqueued (``"limits":[["c","customer:42",3],["r","stripe",20,1000,5]]``, right after its
priority: see messages.py), and the scripts that take, record, recover and cancel tasks
keep them (``lua/lib/limits.lua``). How each holds, across workers and crashes: the
Limits page. Nothing here talks to Redis.
"""

from __future__ import annotations

import difflib
import inspect
import json
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import keys
from ..exceptions import InvalidInput

# The longest key a filled template may make.
MAX_KEY = 200


@dataclass(frozen=True)
class Limit:
    """What ``concurrency_limit`` and ``rate_limit`` return: put them in ``limits=[...]``."""

    limit: int
    key: str | None

    def encode(self, key: str) -> list[Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class ConcurrencyLimit(Limit):
    """At most ``limit`` tasks with the same key run at once."""

    def encode(self, key: str) -> list[Any]:
        return ["c", key, self.limit]

    def __str__(self) -> str:
        return f"at most {self.limit} at once"


@dataclass(frozen=True)
class RateLimit(Limit):
    """At most ``limit`` starts per ``per`` seconds, ``burst`` more at once after a pause."""

    per: float = 1.0
    burst: int = 0

    def encode(self, key: str) -> list[Any]:
        return ["r", key, self.limit, round(self.per * 1000), self.burst]

    def __str__(self) -> str:
        burst = f", burst {self.burst}" if self.burst else ""
        return f"at most {self.limit} per {self.per:g} s{burst}"


def concurrency_limit(limit: int, *, key: str | None = None) -> ConcurrencyLimit:
    """At most ``limit`` tasks with this ``key`` run at once, across every worker.

    ``key`` is a template filled from the task's arguments (``"customer:{customer_id}"``);
    without one, the limit is the task's own. Tasks naming the same key share the limit.
    """
    return ConcurrencyLimit(keys.integer(limit, "limit"), _template(key))


def rate_limit(
    limit: int, *, per: float = 1.0, burst: int | None = None, key: str | None = None
) -> RateLimit:
    """At most ``limit`` tasks with this ``key`` start per ``per`` seconds, across every
    worker; after a quiet spell, ``burst`` more may start at once (default 0). No window of
    ``per`` seconds ever sees more than ``limit + burst`` starts."""
    per = keys.seconds(per, "per", positive=True)
    if per < 0.001:
        raise InvalidInput("per", f"must be at least a millisecond, not {per!r}")
    return RateLimit(
        keys.integer(limit, "limit"),
        _template(key),
        per,
        0 if burst is None else keys.integer(burst, "burst", minimum=0),
    )


def _template(key: object, field: str = "key") -> str | None:
    if key is None:
        return None
    template = keys.validate_name(key, field, MAX_KEY)
    try:
        fields = [part for part in string.Formatter().parse(template) if part[1] is not None]
    except ValueError as error:
        raise InvalidInput(field, f"is not a valid template: {error}") from None
    for _, name, spec, conversion in fields:
        assert name is not None
        if not name.isidentifier():
            raise InvalidInput(field, f"{{{name}}} must name an argument of the task")
        # A spec or a conversion would fail (or change the key) only at enqueue: the
        # argument's str() is the key's part, nothing else.
        if spec:
            raise InvalidInput(field, f"{{{name}:{spec}}} may not have a format spec")
        if conversion:
            raise InvalidInput(field, f"{{{name}!{conversion}}} may not have a conversion")
    return template


def validate_limits(limits: object, func: Callable[..., Any], task: str) -> tuple[Limit, ...]:
    """``limits`` as a tuple, or :class:`InvalidInput` naming what is wrong: not a list of
    limits, or a key naming a field that ``func`` has no parameter for."""
    if limits is None:
        return ()
    if isinstance(limits, Limit) or not isinstance(limits, Iterable):
        raise InvalidInput("limits", "must be a list of concurrency_limit() and rate_limit()")
    found = tuple(limits)
    for limit in found:
        if not isinstance(limit, Limit):
            raise InvalidInput(
                "limits", f"must hold concurrency_limit() and rate_limit(), not {limit!r}"
            )
        if limit.key is not None:
            _check_fields(limit.key, func, task, "limits")
    return found


def validate_partition_key(key: object, func: Callable[..., Any], task: str) -> str | None:
    """A task's ``partition_key`` (a template like a limit's key), or :class:`InvalidInput`."""
    template = _template(key, "partition_key")
    if template is not None:
        _check_fields(template, func, task, "partition_key")
    return template


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def _check_fields(template: str, func: Callable[..., Any], task: str, field: str) -> None:
    """:class:`InvalidInput` when ``template`` names a field that ``func`` has no parameter for."""
    try:
        parameters = set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return
    for name in _fields(template):
        if name not in parameters:
            raise InvalidInput(
                field,
                f"the key {template!r} names {{{name}}}, which is no argument of task {task!r}",
            )


def fill(
    limits: Sequence[Limit],
    task: str,
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    leading: int = 0,
) -> list[list[Any]] | None:
    """The payload's ``limits`` for a call, ``None`` without limits. ``leading``:
    how many arguments come before ``args`` that are not known yet (a context, a workflow
    step's input); a key may not name them."""
    if not limits:
        return None
    values = _values([limit.key for limit in limits], func, args, kwargs, leading)
    return [
        limit.encode(f"task:{task}" if limit.key is None else _filled(limit.key, values, "limits"))
        for limit in limits
    ]


def fill_key(
    template: str,
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    leading: int = 0,
) -> str:
    """A task's ``partition_key`` for a call (see :func:`fill`)."""
    return _filled(template, _values([template], func, args, kwargs, leading), "partition_key")


def _values(
    templates: Sequence[str | None],
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    leading: int,
) -> dict[str, Any]:
    """The call's arguments by name, if any of ``templates`` names one."""
    if not any(template and _fields(template) for template in templates):
        return {}
    bound = inspect.signature(func).bind_partial(*(_UNKNOWN,) * leading, *args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _filled(template: str, values: dict[str, Any], field: str) -> str:
    if any(values.get(name) is _UNKNOWN for name in _fields(template)):
        raise InvalidInput(
            field,
            f"the key {template!r} names an argument that is not known when the task is "
            "enqueued (its context, or a workflow step's input)",
        )
    return keys.validate_name(template.format_map(values), field, MAX_KEY)


def unmatched_settings(settings: Mapping[str, Limit], tasks: Mapping[str, Any]) -> list[str]:
    """A warning for each ``TASK_LIMITS`` entry (``settings``, from :func:`from_settings`)
    that changes nothing: no limit of ``tasks`` (by name) matches it by key or prefix and by
    kind. It names the closest key declared, where one is close."""
    declared = [
        (type(limit), f"task:{name}" if limit.key is None else limit.key)
        for name, task in tasks.items()
        for limit in getattr(task, "limits", ())
    ]
    found = []
    for entry, override in settings.items():
        kinds = {kind for kind, key in declared if _may_match(entry, key)}
        if type(override) in kinds:
            continue
        if kinds:
            theirs = " and ".join(sorted(_KINDS[kind] for kind in kinds))
            found.append(
                f"TASK_LIMITS[{entry!r}] is a {_KINDS[type(override)]} limit, but the tasks' "
                f"limits of its keys are {theirs} limits"
            )
            continue
        # What TASK_LIMITS would name: a key, or a template's prefix ("customer:*").
        names = {f"{key.split('{', 1)[0]}*" if _fields(key) else key for _, key in declared}
        close = difflib.get_close_matches(entry, sorted(names), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        found.append(f"TASK_LIMITS[{entry!r}] matches no known task's limit{hint}")
    return found


def split_by_queue(tasks: Mapping[str, Any]) -> list[str]:
    """What to warn of on a Redis Cluster, where each queue counts its limits in its own
    home: a line for each limit key (a template's arguments aside) that ``tasks`` of
    more than one queue name, so that each queue lets its own ``limit`` run or start."""
    queues: dict[str, set[str]] = {}
    for name, task in tasks.items():
        for limit in getattr(task, "limits", ()):
            key = f"task:{name}" if limit.key is None else re.sub(r"{[^{}]*}", "{}", limit.key)
            queues.setdefault(key, set()).add(task.queue_name)
    return [
        f"The limit key {key!r} is named by tasks of the queues {', '.join(sorted(names))}: "
        f"on a Redis Cluster each queue counts it apart, so up to {len(names)} times its "
        "limit run or start at once (see the Limits page)"
        for key, names in sorted(queues.items())
        if len(names) > 1
    ]


_KINDS = {ConcurrencyLimit: "concurrency", RateLimit: "rate"}


def _may_match(entry: str, template: str) -> bool:
    """Whether the ``TASK_LIMITS`` key (or prefix, ending in ``*``) ``entry`` may match
    a key made from ``template``."""
    fixed = template.split("{", 1)[0] if _fields(template) else None
    if entry.endswith("*"):
        prefix = entry[:-1]
        if fixed is None:
            return template.startswith(prefix)
        return fixed.startswith(prefix) or prefix.startswith(fixed)
    return entry == template if fixed is None else entry.startswith(fixed)


def to_json(limits: Sequence[Sequence[Any]]) -> str:
    """A payload's ``limits`` as JSON with no bracket inside a string (escaped as
    ``\\u005b``): the scripts find the list's end by balancing brackets."""

    def item(value: Any) -> str:
        if isinstance(value, str):
            text = json.dumps(value, ensure_ascii=False)
            return text.replace("[", "\\u005b").replace("]", "\\u005d")
        return json.dumps(value)

    return "[" + ",".join("[" + ",".join(map(item, limit)) + "]" for limit in limits) + "]"


def from_settings(value: object) -> dict[str, Limit]:
    """The ``TASK_LIMITS`` setting (``{"stripe": {"rate": 40, "per": 1.0, "burst": 5},
    "customer:*": {"concurrency": 5}}``) as limits by key, or :class:`InvalidInput`
    naming the setting and what is wrong with it."""
    if not isinstance(value, dict):
        raise InvalidInput("TASK_LIMITS", f"must be a dict of limit keys, not {value!r}")
    found: dict[str, Limit] = {}
    for key, spec in value.items():
        try:
            name = keys.validate_name(key, "TASK_LIMITS", MAX_KEY)
        except InvalidInput as error:  # of the key, not of the setting
            raise InvalidInput("TASK_LIMITS", f"the key {key!r}: {error.problem}") from None
        if "*" in name[:-1]:
            raise InvalidInput("TASK_LIMITS", f"{name!r}: '*' may only end a key (a prefix)")
        kind = "concurrency" if isinstance(spec, dict) and "concurrency" in spec else "rate"
        try:
            if isinstance(spec, dict) and set(spec) == {"concurrency"}:
                found[name] = concurrency_limit(spec["concurrency"])
                continue
            if isinstance(spec, dict) and "rate" in spec and set(spec) <= {"rate", "per", "burst"}:
                per, burst = spec.get("per", 1.0), spec.get("burst")
                found[name] = rate_limit(spec["rate"], per=per, burst=burst)
                continue
        except InvalidInput as error:  # named as the setting names it
            field = kind if error.field == "limit" else error.field
            raise InvalidInput("TASK_LIMITS", f"{name!r}: {field}: {error.problem}") from None
        raise InvalidInput(
            "TASK_LIMITS",
            f"{name!r} must map to {{'concurrency': n}} or {{'rate': n, 'per': seconds, "
            f"'burst': n}}, not {spec!r}",
        )
    return found


def settings_json(value: object) -> str:
    """The ``TASK_LIMITS`` setting as a worker's takes read it ("" for none): the limits
    as in a payload, the exact keys first, then the prefixes (keys ending in ``*``), the
    longest first, so that the first that matches a key is the one that applies."""
    found = from_settings(value)
    if not found:
        return ""
    ordered = sorted(found, key=lambda key: (key.endswith("*"), -len(key)))
    return to_json([found[key].encode(key) for key in ordered])


# What stands for an argument not known at enqueue (see fill's ``leading``).
_UNKNOWN = object()
