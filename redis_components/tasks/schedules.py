"""Periodic tasks: schedules whose every tick is enqueued exactly once, declared by
``@periodic`` or in the ``TASK_SCHEDULES`` setting (examples: the Operations page).

Every ``rc_worker`` may run the scheduler (no separate beat process): claiming a tick
moves the schedule's next tick on and enqueues its task in one script, so each tick is
enqueued once however many schedulers run. Who claims, on which clock, and what a
missed tick does: the Operations page (Schedules), and ``Schedule.next_after``.
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.utils.module_loading import import_string

from .. import keys, tracing
from ..conf import conf
from ..exceptions import ConfigurationError, InvalidInput, TaskSerializationError
from .definition import RedisTask, bind_arguments, task_registry
from .framework import Task
from .limits import fill as fill_limits
from .messages import TaskMessage, to_json
from .registry import Registry
from .results import TaskRecord, read_records
from .store import TaskStore, TickClaim, new_task_id

logger = logging.getLogger("redis_components.scheduler")

Missed = Literal["run_once", "skip"]
T = TypeVar("T", bound=RedisTask[..., Any])
MAX_TICKS_AHEAD = 366 * 24 * 3600 * 1000  # a cron expression that never matches, in ms
# The keys of a schedule in the TASK_SCHEDULES setting.
SPEC_KEYS = ("task", "cron", "every", "tz", "args", "kwargs", "missed")


@dataclass(frozen=True)
class Schedule:
    """When a task runs by itself: a cron expression or an interval, in a time zone."""

    name: str
    task: str  # our task's name, or a Django task's module path
    queue: str
    priority: int
    backend: str | None  # the Django Tasks backend alias, for a Django task
    cron: str | None = None
    every_ms: int | None = None
    tz: str = "UTC"
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    missed: Missed = "run_once"
    limits: list[list[Any]] | None = None  # the task's, filled from args and kwargs
    partition_by: str | None = None  # what picks its partition (RedisTask.partition_by)

    def next_after(self, ms: int) -> int:
        """The first tick strictly after ``ms`` (epoch ms)."""
        if self.every_ms is not None:
            return (ms // self.every_ms + 1) * self.every_ms
        assert self.cron is not None
        start = datetime.datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(self.tz))
        try:
            after = next(CronSim(self.cron, start))
        except StopIteration:  # pragma: no cover - cronsim iterates forever
            return ms + MAX_TICKS_AHEAD
        return max(ms + 1, math.ceil(after.timestamp() * 1000))

    def describe(self) -> str:
        if self.every_ms is not None:
            return f"every {self.every_ms / 1000:g} s"
        return f"cron {self.cron!r} ({self.tz})"

    def message(self, tick: int) -> tuple[TaskMessage, str]:
        """The task of ``tick``, whose id is the tick's: enqueueing it again is refused."""
        message = TaskMessage(
            id=new_task_id(self.queue, f"{self.name} {tick}", self.partition_by),
            task=self.task,
            queue=self.queue,
            args=list(self.args),
            kwargs=dict(self.kwargs),
            priority=self.priority,
            backend=self.backend,
            scheduled_for=tick,
            limits=self.limits,
        )
        return message, message.encode()


schedule_registry: Registry[Schedule] = Registry()


def periodic(
    *,
    cron: str | None = None,
    every: datetime.timedelta | float | None = None,
    tz: str = "UTC",
    missed: Missed = "run_once",
    name: str | None = None,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
) -> Callable[[T], T]:
    """Run a task by itself: on a ``cron`` expression or ``every`` interval (seconds or a
    timedelta), in time zone ``tz``. Put it above ``@redis_task`` (or Django's ``@task``).
    ``name`` (default: the task's) identifies the schedule in Redis; ``args``/``kwargs``
    are passed to each run. Bad values raise :class:`InvalidInput` at import time."""

    def register(task: T) -> T:
        if not isinstance(task, RedisTask):
            raise InvalidInput(
                "periodic",
                "must decorate a task of ours: a @task, or Django's @task with a "
                "RedisTaskBackend: put @periodic above @redis_task",
            )
        target = _target_of(task, task.registered_name)
        schedule = build(
            name or target["task_name"],
            **target,
            cron=cron,
            every=every,
            tz=tz,
            missed=missed,
            args=args,
            kwargs=kwargs,
        )
        schedule_registry.add(schedule.name, schedule)
        return task

    return register


def build(
    name: object,
    *,
    task_name: str,
    queue: str,
    priority: int,
    backend: str | None,
    task: Task[..., Any] | None = None,
    cron: object = None,
    every: object = None,
    tz: object = "UTC",
    missed: object = "run_once",
    args: object = (),
    kwargs: object = None,
) -> Schedule:
    """A validated :class:`Schedule`, or :class:`InvalidInput` naming what is wrong
    (:class:`InvalidTaskArguments` where ``task``'s function cannot take the arguments)."""
    name = keys.validate_name(name, "name", 200)
    if (cron is None) == (every is None):
        raise InvalidInput("cron", f"schedule {name!r} needs either cron= or every=, not both")
    every_ms = None
    if every is not None:
        seconds = every.total_seconds() if isinstance(every, datetime.timedelta) else every
        every_ms = round(keys.seconds(seconds, "every", positive=True) * 1000)
        if every_ms < 1000:
            raise InvalidInput("every", f"must be at least one second, not {every!r}")
    if not isinstance(tz, str):
        raise InvalidInput("tz", f"must be a time zone name, not {tz!r}")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput("tz", f"is not a known time zone: {tz!r}") from None
    if cron is not None:
        if not isinstance(cron, str):
            raise InvalidInput("cron", f"must be a cron expression, not {cron!r}")
        try:
            CronSim(cron, datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc))
        except (CronSimError, ValueError) as error:
            raise InvalidInput("cron", f"{cron!r} is not a cron expression: {error}") from None
    if missed not in ("run_once", "skip"):
        raise InvalidInput("missed", f"must be 'run_once' or 'skip', not {missed!r}")
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise InvalidInput("args", f"must be a list, not {type(args).__name__}")
    if kwargs is not None and (
        not isinstance(kwargs, dict) or not all(isinstance(key, str) for key in kwargs)
    ):
        raise InvalidInput("kwargs", f"must be a dict with string keys, not {kwargs!r:.100}")
    call_args, call_kwargs = list(args), dict(kwargs or {})
    for field_name, value in (("args", call_args), ("kwargs", call_kwargs)):
        try:  # refused now, not at the first tick
            to_json(value, "this value")
        except TaskSerializationError as error:
            raise InvalidInput(field_name, str(error)) from None
    limits, partition_by = None, None
    if task is not None:  # refused now, not dead-lettered at the first tick
        bind_arguments(task, call_args, call_kwargs)
        if isinstance(task, RedisTask):
            limits = fill_limits(
                task.limits, task_name, task.func, call_args, call_kwargs, task.takes_context
            )
            partition_by = task.partition_by(limits, call_args, call_kwargs)
    return Schedule(
        name=name,
        task=task_name,
        queue=queue,
        priority=priority,
        backend=backend,
        cron=cron,
        every_ms=every_ms,
        tz=tz,
        args=call_args,
        kwargs=call_kwargs,
        missed=missed,
        limits=limits,
        partition_by=partition_by,
    )


def schedules() -> list[Schedule]:
    """Every schedule: ``@periodic`` ones and those of the ``TASK_SCHEDULES`` setting
    (:class:`ConfigurationError` for one that names no task or has a bad value)."""
    found = schedule_registry.all()
    setting = conf.get("TASK_SCHEDULES")
    if not isinstance(setting, dict):
        raise ConfigurationError(
            f"TASK_SCHEDULES must be a dict of schedule names to dicts, not "
            f"{type(setting).__name__}"
        )
    for name, spec in setting.items():
        if not isinstance(spec, dict):
            raise ConfigurationError(
                f"TASK_SCHEDULES[{name!r}] must be a dict, not {type(spec).__name__}"
            )
        unknown = [key for key in spec if key not in SPEC_KEYS]
        if unknown:
            raise ConfigurationError(
                f"TASK_SCHEDULES[{name!r}] has unknown keys {unknown!r:.100} (valid: "
                f"{', '.join(SPEC_KEYS)})"
            )
        options = {key: value for key, value in spec.items() if key != "task"}
        try:
            found[name] = build(name, **_target(name, spec.get("task")), **options)
        except InvalidInput as error:
            raise ConfigurationError(f"TASK_SCHEDULES[{name!r}]: {error}") from None
    return sorted(found.values(), key=lambda schedule: schedule.name)


def _target(name: str, target: object) -> dict[str, Any]:
    """What runs a schedule of the setting: one of our tasks, or a Django task."""
    if not isinstance(target, str):
        raise ConfigurationError(f"TASK_SCHEDULES[{name!r}] needs 'task': a task's name")
    ours = task_registry.find(target)
    if ours is not None:
        return _target_of(ours, ours.registered_name)
    try:
        django_task = import_string(target)
    except (ImportError, TypeError, ValueError):  # TypeError: a relative path ("..x")
        django_task = None
    backend = getattr(django_task, "backend", None)
    if not isinstance(backend, str) or not hasattr(django_task, "module_path"):
        raise ConfigurationError(
            f"TASK_SCHEDULES[{name!r}]: {target!r} is neither a registered @redis_task nor a "
            "Django task"
        )
    return _target_of(django_task, None)


def _target_of(task: Task[..., Any], registered: str | None) -> dict[str, Any]:
    """What a schedule of ``task`` enqueues (``registered``: our ``@redis_task``'s name)."""
    return {
        "task_name": registered or task.module_path,
        "queue": task.queue_name,
        "priority": task.priority,
        "backend": None if registered else task.backend,
        "task": task,
    }


class Scheduler:
    """Claims the due ticks of ``schedules``; run by the worker holding the lease."""

    def __init__(self, schedules: Sequence[Schedule]) -> None:
        self.schedules = list(schedules)

    def run_due(self) -> float:
        """Claim every due tick (one round trip reads the next ticks and the server's
        clock, one script claims them); return the seconds until the next one is due."""
        known, now = TaskStore().schedule_ticks()
        upcoming = []
        due = []
        for schedule in self.schedules:
            tick = known.get(schedule.name)
            if tick is None:  # a new schedule starts with its next tick
                first = schedule.next_after(now)
                TaskStore().start_schedule(schedule.name, first)
                upcoming.append(first)
            elif tick > now:
                upcoming.append(tick)
            else:
                due.append(Claim.of(schedule, tick, now))
        if due:
            self._claim(due)
            upcoming += [claim.following for claim in due]
        return max(0.0, (min(upcoming) - now) / 1000) if upcoming else math.inf

    def _claim(self, due: list[Claim]) -> None:
        try:
            claimed = TaskStore().claim_ticks([claim.stored() for claim in due])
        except Exception as error:
            for claim in due:
                if claim.creating is not None:
                    claim.creating.ended(error)
            raise
        for claim, done in zip(due, claimed, strict=True):
            if claim.creating is not None:
                claim.creating.ended(sent=done)
            if done and claim.run:
                logger.info(
                    "Schedule %s: enqueued %s[%s] for %s",
                    claim.schedule.name,
                    claim.schedule.task,
                    claim.message.id,
                    _when(claim.tick),
                )


@dataclass(frozen=True)
class Claim:
    """A due tick of a schedule, as the claim script takes it."""

    schedule: Schedule
    tick: int
    following: int  # the tick after it
    run: bool  # False: skip it (ticks were missed and the schedule says "skip")
    message: TaskMessage
    payload: str
    creating: tracing.Sending | None = field(default=None, compare=False, repr=False)

    def stored(self) -> TickClaim:
        """The claim as the store takes it (the schedule by its name)."""
        return TickClaim(
            schedule=self.schedule.name,
            tick=self.tick,
            following=self.following,
            run=self.run,
            message=self.message,
            payload=self.payload,
        )

    @classmethod
    def of(cls, schedule: Schedule, tick: int, now: int) -> Claim:
        following = schedule.next_after(tick)
        run = True
        if following <= now:  # ticks were missed while no scheduler ran
            following = schedule.next_after(now)
            run = schedule.missed == "run_once"
            logger.warning(
                "Schedule %s missed its ticks since %s; %s",
                schedule.name,
                _when(tick),
                "running it once now" if run else "skipping to the next tick",
            )
        message, payload = schedule.message(tick)
        creating = None
        if run:  # (with tracing on, its message carries the context of its tick's span)
            message, creating = tracing.ticked(message, schedule.name, tick)
            payload = payload if creating is None else message.encode()
        return cls(schedule, tick, following, run, message, payload, creating)


def _when(ms: int) -> str:
    when = keys.utc_from_ms(ms)
    return str(ms) if when is None else when.isoformat()


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as Redis holds it: its next tick, its last run and that run's result."""

    schedule: Schedule
    next_run: datetime.datetime | None
    last_run: datetime.datetime | None
    last_result: TaskRecord | None


def schedule_states() -> list[ScheduleState]:
    """Every schedule with its next and last run (three round trips at most)."""
    known = schedules()
    next_ticks, lasts = TaskStore().schedule_records()
    ids = [lasts[s.name][1] for s in known if s.name in lasts]
    results = dict(zip(ids, read_records(ids), strict=True)) if ids else {}
    return [
        ScheduleState(
            schedule,
            keys.utc_from_ms(next_ticks.get(schedule.name)),
            keys.utc_from_ms(lasts[schedule.name][0]) if schedule.name in lasts else None,
            results.get(lasts[schedule.name][1]) if schedule.name in lasts else None,
        )
        for schedule in known
    ]
