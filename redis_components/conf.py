"""Settings: one ``REDIS_COMPONENTS`` dict, read when first used.

Every default lives in :data:`DEFAULTS`. ``conf.<NAME>`` looks the value up in
``settings.REDIS_COMPONENTS``, which is read once and again after Django's
``setting_changed`` signal, so ``override_settings`` just works and nothing is read at
import time. The system checks in ``checks.py``
validate the values; the services validate their own arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

SETTING_NAME = "REDIS_COMPONENTS"

DEFAULTS: dict[str, Any] = {
    # The CACHES entry (a django-redis cache) whose raw Redis client is used.
    "CACHE_ALIAS": "default",
    # The first part of every key: "<KEY_PREFIX>:<component>:{<name>}[:<part>]".
    "KEY_PREFIX": "rc",
    # Locks: the lease in seconds, and how long acquire() waits for a busy lock.
    "LOCK_TIMEOUT": 30.0,
    "LOCK_BLOCKING_TIMEOUT": 10.0,
    # Semaphores: how long a permit lasts without a refresh, and how long a blocking
    # acquire waits for a free permit.
    "SEMAPHORE_TIMEOUT": 10.0,
    "SEMAPHORE_BLOCKING_TIMEOUT": 10.0,
    # Group chat (messaging.py): the most messages one chat keeps; older ones are
    # dropped even if a member has not read them yet.
    "CHAT_MAX_MESSAGES": 1000,
    # The longest chat message accepted, in characters.
    "CHAT_MAX_MESSAGE_LENGTH": 4000,
    # Seconds after which a chat message is dropped, read or not; None keeps messages
    # until every member has seen them (or CHAT_MAX_MESSAGES pushes them out).
    "CHAT_MAX_AGE": None,
    # True: keep chat messages every member has read, as the chat's history (only
    # CHAT_MAX_MESSAGES and CHAT_MAX_AGE drop them); False: delete them once all have read.
    "CHAT_KEEP_READ": False,
    # The most chats one user may create per minute (None or 0: no limit).
    "CHAT_CREATES_PER_MINUTE": 30,
    # Mailboxes (messaging.py): the most messages one user's mailbox keeps; sending
    # to a full mailbox drops its oldest message.
    "MAILBOX_MAX_MESSAGES": 1000,
    # How the chat views identify the signed-in user: "pk" (their primary key, as every
    # service does), or "username" (0.1's way; deprecated, removed in 0.3: run
    # `manage.py rc_migrate_users`).
    "MESSAGING_USER_KEY": "pk",
    # Autocomplete: how many recent contacts each user keeps.
    "CONTACTS_MAX": 100,
    # Autocomplete: the most suggestions one query returns (a larger `limit` is capped).
    "AUTOCOMPLETE_MAX_RESULTS": 10,
    # Autocomplete: who may search a guild, a callable `(request, guild) -> bool` or its
    # dotted path. The default lets signed-in users whose username is a member.
    "AUTOCOMPLETE_GUILD_ACCESS": "redis_components.autocomplete.members_only",
    # Task queues: when set, an enqueue returns only once this many replicas have the
    # task (Redis WAIT), so a failover cannot lose it; waiting at most QUEUE_WAIT_TIMEOUT
    # seconds, after which the enqueue raises TaskNotDurable.
    "QUEUE_WAIT_REPLICAS": None,
    "QUEUE_WAIT_TIMEOUT": 1.0,
    # Task queues on a Redis Cluster: {queue name: number of partitions (1 to 64)}; each
    # partition of a queue has a home of its own, so that one queue spreads over the
    # shards (see docs/cluster.md). Ignored on one server.
    "QUEUE_PARTITIONS": {},
    # Task queues (the tasks package).
    # A worker renews a lease of 1.5 x this twice per interval; the tasks of a worker
    # whose lease ran out are back on their queues within 2 x this.
    "TASK_HEARTBEAT_INTERVAL": 3.0,
    # A failed task is retried after about TASK_RETRY_BACKOFF * 2**retry seconds
    # (jittered), at most TASK_RETRY_BACKOFF_MAX.
    "TASK_RETRY_BACKOFF": 2.0,
    "TASK_RETRY_BACKOFF_MAX": 600.0,
    # A task that a worker does not know (no such task in its code: during a rolling
    # deploy, a task that only the new code has) goes back on its queue, no retry charged,
    # until this many seconds after its enqueue, so that a worker with the new code takes
    # it; only then is it dead-lettered (TaskNotRegistered).
    "TASK_UNREGISTERED_GRACE": 300.0,
    # A task found in the in-progress list of this many dead workers is dead-lettered.
    "TASK_MAX_CRASHES": 3,
    # After a stop signal, rc_worker lets running tasks finish for this many seconds,
    # then puts back the ones still running (no crash counted) and exits; None: no limit.
    # Below Kubernetes' default of 30 s, so the tasks are back before the pod is killed.
    "TASK_SHUTDOWN_GRACE": 25.0,
    # The most tasks a worker process holds ahead while its tasks are short (under 20
    # ms): taken, not started, their takes' replies read as they are needed, so that a
    # round trip to Redis overlaps the tasks before. It grows from 1 while the worker
    # waits on replies (Redis across a network); 0 takes none ahead. Read with conf.get().
    "TASK_TAKE_AHEAD": 8,
    # Each queue's dead-letter list keeps at most this many (the newest) entries.
    "TASK_DEAD_LETTER_MAX": 10_000,
    # {queue name: maximum number of waiting tasks (ready, delayed, on limits)}; others are
    # unbounded.
    "TASK_QUEUE_LIMITS": {},
    # Limits that replace those of the tasks a worker takes, from its next start (queued
    # tasks too): {limit key, or a prefix ending in "*": {"concurrency": n} or
    # {"rate": n, "per": seconds, "burst": n}}; see docs/limits.md.
    "TASK_LIMITS": {},
    # Schedules of tasks declared elsewhere: {name: {"task": name or Django task path,
    # "cron": "*/5 * * * *" or "every": seconds, "tz", "args", "kwargs", "missed"}}.
    "TASK_SCHEDULES": {},
    # Serve Prometheus metrics at the metrics view, and keep in Redis the running totals
    # and duration histograms of tasks it reports (the per-minute counts that the
    # admin pages chart are always kept). With METRICS_TOKEN set, a scrape must send
    # "Authorization: Bearer <token>".
    "METRICS": False,
    "METRICS_TOKEN": None,
    # OpenTelemetry spans of tasks (tracing.py; the otel extra): False (off: nothing of
    # OpenTelemetry is imported), True or "link" (each attempt's span linked to its
    # task's creation), "parent" (its child) or "root" (neither). Read with conf.get().
    "TRACING": False,
    # Where the admin's task page links a task's trace: a URL with "{trace_id}" in it
    # (your tracing backend's page of a trace), or None. Read with conf.get().
    "TRACING_LINK": None,
    # OpenTelemetry's messaging metrics of tasks (tracing/meters.py; the otel extra),
    # through its metrics API: False (off: nothing of OpenTelemetry is imported) or True.
    # Read with conf.get().
    "OTEL_METRICS": False,
    # The most links an attempt's span gets to the steps it waited for (a workflow's
    # fan-in: a callback after a group); the first ones, by the workflow's order.
    "TRACING_MAX_LINKS": 128,
    # Seconds a task's result is kept after its last change (a delayed task's until
    # then, and this long after); results expire by themselves.
    "TASK_RESULT_TTL": 86400.0,
    # The largest metadata a task may carry or save (Django's proposed task metadata:
    # a JSON object), in bytes of JSON; more is refused with InvalidInput.
    "TASK_METADATA_MAX_BYTES": 65_536,
    # A task's progress (context.set_progress()) is saved at most this often, in seconds:
    # what is said meanwhile is saved by a later call or with the run's end; 0 saves
    # every call. Read with conf.get().
    "TASK_PROGRESS_INTERVAL": 0.5,
    # File distribution (files.py): the most bytes of files a channel holds in Redis at
    # once; a sender waits for readers to free room, and refuses larger files.
    "FILES_LIMIT_BYTES": 2**30,
    # The size of the blocks files are copied and read in, in bytes.
    "FILES_BLOCK_SIZE": 2**17,
    # Seconds without a sign of life after which the sender reports a reader as stalled.
    "FILES_STALLED_AFTER": 60.0,
}

# The most partitions a queue may have (a worker looks in each when it looks for work).
MAX_PARTITIONS = 64

# Numeric settings whose default is None ("no limit"): None or a positive number of
# this type. The system checks validate them beside the numeric ones.
OPTIONAL_NUMBERS: dict[str, type[int] | type[float]] = {
    "CHAT_MAX_AGE": float,
    "QUEUE_WAIT_REPLICAS": int,
    "TASK_SHUTDOWN_GRACE": float,
}


# Numeric settings that may be 0 (checked as a number >= 0, not a positive one).
ZERO_ALLOWED = frozenset({"TASK_PROGRESS_INTERVAL", "TASK_TAKE_AHEAD"})


# The project's dict, once read: settings are read on every lock and semaphore call, and
# Django's lazy settings object takes a few microseconds each time.
_user_settings: dict[str, Any] | None = None


def user_settings() -> dict[str, Any]:
    """The project's ``REDIS_COMPONENTS`` dict (empty if unset or not a dict)."""
    global _user_settings
    if _user_settings is None:
        value = getattr(settings, SETTING_NAME, {})
        _user_settings = value if isinstance(value, dict) else {}
    return _user_settings


def _reread(*, setting: str, **kwargs: Any) -> None:
    global _user_settings
    if setting == SETTING_NAME:
        _user_settings = None


setting_changed.connect(_reread)


class Settings:
    """Typed, read-at-access-time view of ``REDIS_COMPONENTS`` over :data:`DEFAULTS`."""

    def get(self, name: str) -> Any:
        return user_settings().get(name, DEFAULTS[name])

    @property
    def CACHE_ALIAS(self) -> str:
        return str(self.get("CACHE_ALIAS"))

    @property
    def KEY_PREFIX(self) -> str:
        return str(self.get("KEY_PREFIX"))

    @property
    def LOCK_TIMEOUT(self) -> float:
        return float(self.get("LOCK_TIMEOUT"))

    @property
    def LOCK_BLOCKING_TIMEOUT(self) -> float:
        return float(self.get("LOCK_BLOCKING_TIMEOUT"))

    @property
    def SEMAPHORE_TIMEOUT(self) -> float:
        return float(self.get("SEMAPHORE_TIMEOUT"))

    @property
    def SEMAPHORE_BLOCKING_TIMEOUT(self) -> float:
        return float(self.get("SEMAPHORE_BLOCKING_TIMEOUT"))

    @property
    def CHAT_MAX_MESSAGES(self) -> int:
        return int(self.get("CHAT_MAX_MESSAGES"))

    @property
    def CHAT_MAX_MESSAGE_LENGTH(self) -> int:
        return int(self.get("CHAT_MAX_MESSAGE_LENGTH"))

    @property
    def CHAT_MAX_AGE(self) -> float | None:
        value = self.get("CHAT_MAX_AGE")
        return None if value is None else float(value)

    @property
    def CHAT_KEEP_READ(self) -> bool:
        return bool(self.get("CHAT_KEEP_READ"))

    @property
    def CHAT_CREATES_PER_MINUTE(self) -> int:
        return int(self.get("CHAT_CREATES_PER_MINUTE") or 0)

    @property
    def MAILBOX_MAX_MESSAGES(self) -> int:
        return int(self.get("MAILBOX_MAX_MESSAGES"))

    @property
    def MESSAGING_USER_KEY(self) -> str:
        return str(self.get("MESSAGING_USER_KEY"))

    @property
    def CONTACTS_MAX(self) -> int:
        return int(self.get("CONTACTS_MAX"))

    @property
    def AUTOCOMPLETE_MAX_RESULTS(self) -> int:
        return int(self.get("AUTOCOMPLETE_MAX_RESULTS"))

    @property
    def AUTOCOMPLETE_GUILD_ACCESS(self) -> Callable[..., bool]:
        value = self.get("AUTOCOMPLETE_GUILD_ACCESS")
        try:
            found = import_string(value) if isinstance(value, str) else value
        except ImportError:
            found = None
        if not callable(found):
            raise ConfigurationError(
                f"{SETTING_NAME}['AUTOCOMPLETE_GUILD_ACCESS'] must be a callable "
                f"(request, guild) -> bool or its dotted path, not {value!r}."
            )
        return found  # type: ignore[no-any-return]

    @property
    def QUEUE_WAIT_REPLICAS(self) -> int | None:
        value = self.get("QUEUE_WAIT_REPLICAS")
        return None if value is None else int(value)

    @property
    def QUEUE_PARTITIONS(self) -> dict[str, int]:
        value = self.get("QUEUE_PARTITIONS")
        return value if isinstance(value, dict) else {}

    @property
    def QUEUE_WAIT_TIMEOUT(self) -> float:
        return float(self.get("QUEUE_WAIT_TIMEOUT"))

    @property
    def TASK_HEARTBEAT_INTERVAL(self) -> float:
        return float(self.get("TASK_HEARTBEAT_INTERVAL"))

    @property
    def TASK_RETRY_BACKOFF(self) -> float:
        return float(self.get("TASK_RETRY_BACKOFF"))

    @property
    def TASK_RETRY_BACKOFF_MAX(self) -> float:
        return float(self.get("TASK_RETRY_BACKOFF_MAX"))

    @property
    def TASK_SHUTDOWN_GRACE(self) -> float | None:
        value = self.get("TASK_SHUTDOWN_GRACE")
        return None if value is None else float(value)

    @property
    def TASK_UNREGISTERED_GRACE(self) -> float:
        return float(self.get("TASK_UNREGISTERED_GRACE"))

    @property
    def TASK_MAX_CRASHES(self) -> int:
        return int(self.get("TASK_MAX_CRASHES"))

    @property
    def TASK_DEAD_LETTER_MAX(self) -> int:
        return int(self.get("TASK_DEAD_LETTER_MAX"))

    @property
    def TASK_QUEUE_LIMITS(self) -> dict[str, int]:
        value = self.get("TASK_QUEUE_LIMITS")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def TASK_LIMITS(self) -> Any:
        return self.get("TASK_LIMITS")

    @property
    def TASK_SCHEDULES(self) -> dict[str, Any]:
        value = self.get("TASK_SCHEDULES")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def METRICS(self) -> bool:
        return bool(self.get("METRICS"))

    @property
    def METRICS_TOKEN(self) -> str | None:
        value = self.get("METRICS_TOKEN")
        return None if value is None else str(value)

    @property
    def TASK_RESULT_TTL(self) -> float:
        return float(self.get("TASK_RESULT_TTL"))

    @property
    def FILES_LIMIT_BYTES(self) -> int:
        return int(self.get("FILES_LIMIT_BYTES"))

    @property
    def FILES_BLOCK_SIZE(self) -> int:
        return int(self.get("FILES_BLOCK_SIZE"))

    @property
    def FILES_STALLED_AFTER(self) -> float:
        return float(self.get("FILES_STALLED_AFTER"))


conf = Settings()
