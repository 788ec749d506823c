"""System checks for the ``REDIS_COMPONENTS`` setting and the cache it uses.

They read settings only and never open a connection, so ``manage.py check`` works
with Redis down. Ids are stable; docs/checks.md lists them.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning

from .conf import DEFAULTS, MAX_PARTITIONS, OPTIONAL_NUMBERS, SETTING_NAME, ZERO_ALLOWED
from .keys import is_integer

DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
CLUSTER_CLIENT = "redis_components.connection.ClusterClient"
SENTINEL_FACTORY = "django_redis.pool.SentinelConnectionFactory"
KEY_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.\-:]{1,64}")


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    value = getattr(settings, SETTING_NAME, {})
    if not isinstance(value, dict):
        return [
            Error(
                f"{SETTING_NAME} must be a dict, not {type(value).__name__}.",
                hint=f"For example: {SETTING_NAME} = {{'CACHE_ALIAS': 'default'}}",
                id="redis_components.E001",
            )
        ]
    errors: list[CheckMessage] = []
    for name in value:
        if name not in DEFAULTS:
            close = difflib.get_close_matches(str(name), DEFAULTS, n=1)
            guess = f"Did you mean {close[0]!r}? " if close else ""
            errors.append(
                Warning(
                    f"{SETTING_NAME} has an unknown key {name!r}; it is ignored.",
                    hint=f"{guess}Valid keys: {', '.join(sorted(DEFAULTS))}.",
                    id="redis_components.W001",
                )
            )
    merged = {**DEFAULTS, **value}
    errors += _check_cache(merged["CACHE_ALIAS"])
    errors += _check_numbers(value)
    errors += _check_queue_limits(merged["TASK_QUEUE_LIMITS"])
    errors += _check_partitions(merged["QUEUE_PARTITIONS"])
    errors += _check_task_limits(merged["TASK_LIMITS"])
    errors += _check_schedules()
    errors += _check_metrics(merged["METRICS"], merged["METRICS_TOKEN"])
    errors += _check_tracing(merged["TRACING"])
    errors += _check_otel_metrics(merged["OTEL_METRICS"])
    link = merged["TRACING_LINK"]
    if link is not None and not (isinstance(link, str) and "{trace_id}" in link):
        errors.append(
            Error(
                f"{SETTING_NAME}['TRACING_LINK'] is {link!r}; it must be None or a URL with "
                "{trace_id} in it.",
                hint="For example: 'https://jaeger.example.com/trace/{trace_id}'",
                id="redis_components.E023",
            )
        )
    errors += _check_user_key(merged["MESSAGING_USER_KEY"])
    prefix = merged["KEY_PREFIX"]
    if not isinstance(prefix, str) or not KEY_PREFIX_PATTERN.fullmatch(prefix):
        errors.append(
            Error(
                f"{SETTING_NAME}['KEY_PREFIX'] is {prefix!r}; it must be 1-64 characters "
                "of letters, digits, '_', '-', '.' or ':'.",
                hint="Braces would break the Redis Cluster hash tags that follow the prefix.",
                id="redis_components.E006",
            )
        )
    return errors


def _check_cache(alias: object) -> list[CheckMessage]:
    caches = getattr(settings, "CACHES", {})
    if not isinstance(alias, str) or alias not in caches:
        return [
            Error(
                f"{SETTING_NAME}['CACHE_ALIAS'] is {alias!r}, but CACHES has no such entry.",
                hint=f"Name one of: {', '.join(map(repr, caches)) or '(CACHES is empty)'}.",
                id="redis_components.E003",
            )
        ]
    backend = caches[alias].get("BACKEND")
    if backend != DJANGO_REDIS_BACKEND:
        return [
            Error(
                f"CACHES[{alias!r}] uses {backend!r}; redis_components needs a django-redis cache.",
                hint=f"Set its BACKEND to {DJANGO_REDIS_BACKEND!r} (pip install django-redis).",
                id="redis_components.E004",
            )
        ]
    options = caches[alias].get("OPTIONS", {})
    client_class = options.get("CLIENT_CLASS", "")
    if client_class.endswith("ShardClient"):
        return [
            Error(
                f"CACHES[{alias!r}] uses django-redis's ShardClient, which spreads keys over "
                "servers by name; scripts that touch several keys of one component would fail.",
                hint="Use the DefaultClient (one server) or a Redis Cluster.",
                id="redis_components.E007",
            )
        ]
    if client_class == CLUSTER_CLIENT:
        return _check_cluster(alias, caches[alias].get("LOCATION"))
    if client_class.endswith("SentinelClient"):
        return _check_sentinel(alias, options)
    return []


def _check_cluster(alias: str, location: object) -> list[CheckMessage]:
    first = location[0] if isinstance(location, (list, tuple)) and location else location
    parts = urlsplit(first) if isinstance(first, str) else None
    if parts is None or parts.scheme not in ("redis", "rediss") or not parts.hostname:
        problem = "a redis:// or rediss:// URL of one of its nodes"
    elif parts.path not in ("", "/", "/0"):
        problem = "database 0 (a cluster has no other)"
    else:
        return []
    return [
        Error(
            f"CACHES[{alias!r}] uses the cluster client, so its LOCATION must name {problem}; "
            f"it is {location!r}.",
            hint="For example 'redis://10.0.0.1:7000/0'; the other nodes are discovered.",
            id="redis_components.E009",
        )
    ]


def _check_sentinel(alias: str, options: dict[str, Any]) -> list[CheckMessage]:
    factory = options.get(
        "CONNECTION_FACTORY", getattr(settings, "DJANGO_REDIS_CONNECTION_FACTORY", "")
    )
    sentinels = options.get("SENTINELS")
    pairs = (
        isinstance(sentinels, (list, tuple))
        and bool(sentinels)
        and all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[1], int)
            for pair in sentinels
        )
    )
    if factory == SENTINEL_FACTORY and pairs:
        return []
    return [
        Error(
            f"CACHES[{alias!r}] uses django-redis's SentinelClient but is not set up for it: "
            f"OPTIONS needs CONNECTION_FACTORY {SENTINEL_FACTORY!r} and SENTINELS, a list of "
            "(host, port) pairs.",
            hint="LOCATION names the master: 'redis://<master name>/0'.",
            id="redis_components.E010",
        )
    ]


def _check_numbers(value: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name, default in DEFAULTS.items():
        if name not in value:
            continue
        # type(True) is bool, so boolean settings are skipped here.
        kind = OPTIONAL_NUMBERS.get(name, type(default))
        if kind not in (int, float):
            continue
        given = value[name]
        if given is None and name in OPTIONAL_NUMBERS:
            continue
        wanted_int = kind is int
        is_number = is_integer(given) or isinstance(given, float)
        zero = given == 0 and name not in ZERO_ALLOWED
        if not is_number or given < 0 or zero or (wanted_int and not isinstance(given, int)):
            wanted = "a positive integer" if wanted_int else "a positive number"
            if name in ZERO_ALLOWED:
                wanted = "an integer >= 0" if wanted_int else "a number >= 0"
            if name in OPTIONAL_NUMBERS:
                wanted += " or None"
            errors.append(
                Error(
                    f"{SETTING_NAME}[{name!r}] must be {wanted}, not {given!r}.",
                    hint=f"The default is {default!r}.",
                    id="redis_components.E005",
                )
            )
    return errors


def _check_schedules() -> list[CheckMessage]:
    """Every schedule (``@periodic`` and ``TASK_SCHEDULES``) names a task and is valid."""
    from .exceptions import ConfigurationError
    from .tasks.schedules import schedules

    try:
        schedules()
    except ConfigurationError as error:
        return [
            Error(
                str(error),
                hint="Each entry: {'task': a @redis_task name or a Django task's path, and "
                "'cron': '*/5 * * * *' or 'every': seconds; optional 'tz', 'args', "
                "'kwargs', 'missed' ('run_once' or 'skip')}.",
                id="redis_components.E013",
            )
        ]
    return []


def _check_tracing(value: object) -> list[CheckMessage]:
    """TRACING is off, on or a mode, and needs OpenTelemetry's API when not off."""
    if value is not False and value is not True and value not in ("link", "parent", "root"):
        return [
            Error(
                f"{SETTING_NAME}['TRACING'] is {value!r}; it must be False, True, 'link', "
                "'parent' or 'root'.",
                id="redis_components.E021",
            )
        ]
    if value is not False and importlib.util.find_spec("opentelemetry") is None:
        return [
            Error(
                f"{SETTING_NAME}['TRACING'] is on, but OpenTelemetry is not installed: no "
                "task could be enqueued or run.",
                hint="pip install 'django-redis-components[otel]', or turn TRACING off.",
                id="redis_components.E022",
            )
        ]
    return []


def _check_otel_metrics(value: object) -> list[CheckMessage]:
    """OTEL_METRICS is a bool, and needs OpenTelemetry's API when on."""
    if not isinstance(value, bool):
        return [
            Error(
                f"{SETTING_NAME}['OTEL_METRICS'] is {value!r}; it must be True or False.",
                id="redis_components.E024",
            )
        ]
    if value and importlib.util.find_spec("opentelemetry") is None:
        return [
            Error(
                f"{SETTING_NAME}['OTEL_METRICS'] is on, but OpenTelemetry is not installed: "
                "no task could be enqueued or run.",
                hint="pip install 'django-redis-components[otel]', or turn OTEL_METRICS off.",
                id="redis_components.E025",
            )
        ]
    return []


def _check_metrics(on: object, token: object) -> list[CheckMessage]:
    """METRICS is a bool and needs prometheus-client; METRICS_TOKEN is None or a token
    one can send."""
    errors: list[CheckMessage] = []
    if not isinstance(on, bool):
        errors.append(
            Error(
                f"{SETTING_NAME}['METRICS'] is {on!r}; it must be True or False (a string "
                "such as 'no' would turn the metrics on).",
                id="redis_components.E020",
            )
        )
    elif on and importlib.util.find_spec("prometheus_client") is None:
        errors.append(
            Error(
                f"{SETTING_NAME}['METRICS'] is on, but prometheus-client is not installed: "
                "the metrics endpoint cannot answer and lock and semaphore events are not "
                "counted.",
                hint="pip install 'django-redis-components[metrics]', or turn METRICS off.",
                id="redis_components.E014",
            )
        )
    if token is not None and (not isinstance(token, str) or not token.strip()):
        # The token itself is a secret: the message never shows it.
        problem = "empty" if isinstance(token, str) else f"of type {type(token).__name__}"
        errors.append(
            Error(
                f"{SETTING_NAME}['METRICS_TOKEN'] is {problem}; it must be a non-empty "
                "string (or None, for an endpoint open to anyone).",
                hint="For example: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
                id="redis_components.E015",
            )
        )
    return errors


def _check_user_key(value: object) -> list[CheckMessage]:
    """MESSAGING_USER_KEY is "pk", or the deprecated "username"."""
    if value == "pk":
        return []
    if value == "username":
        return [
            Warning(
                f"{SETTING_NAME}['MESSAGING_USER_KEY'] = 'username' (the chat views of 0.1, "
                "which name users by username) is deprecated and goes in 0.3.",
                hint="Run 'manage.py rc_migrate_users' to move the chat data to the users' "
                "pks, then remove the setting (the default is 'pk').",
                id="redis_components.W002",
            )
        ]
    return [
        Error(
            f"{SETTING_NAME}['MESSAGING_USER_KEY'] is {value!r}; it must be 'pk' or "
            "'username' (deprecated).",
            hint="Leave it out: the default, 'pk', identifies users by their primary key.",
            id="redis_components.E017",
        )
    ]


def _check_task_limits(value: object) -> list[CheckMessage]:
    """TASK_LIMITS maps limit keys (or prefixes) to keyless limits."""
    from .exceptions import InvalidInput
    from .tasks.limits import from_settings

    try:
        from_settings(value)
    except InvalidInput as error:
        return [
            Error(
                f"{SETTING_NAME}['TASK_LIMITS'] is invalid: {error.problem}.",
                hint="For example: {'stripe': {'rate': 40, 'per': 1.0, 'burst': 5}, "
                "'customer:*': {'concurrency': 5}}.",
                id="redis_components.E018",
            )
        ]
    return []


def _check_partitions(partitions: object) -> list[CheckMessage]:
    """QUEUE_PARTITIONS maps queue names to whole numbers from 1 to MAX_PARTITIONS."""
    valid = isinstance(partitions, dict) and all(
        isinstance(name, str) and name and is_integer(count) and 1 <= count <= MAX_PARTITIONS
        for name, count in partitions.items()
    )
    if valid:
        return []
    return [
        Error(
            f"{SETTING_NAME}['QUEUE_PARTITIONS'] is {partitions!r}; it must map queue names "
            f"to whole numbers from 1 to {MAX_PARTITIONS} (each queue's partitions).",
            hint="For example: {'hot': 6}. Leave a queue out for one partition.",
            id="redis_components.E019",
        )
    ]


def _check_queue_limits(limits: object) -> list[CheckMessage]:
    """TASK_QUEUE_LIMITS maps queue names to positive integers."""
    valid = isinstance(limits, dict) and all(
        isinstance(name, str) and name and is_integer(limit) and limit > 0
        for name, limit in limits.items()
    )
    if valid:
        return []
    return [
        Error(
            f"{SETTING_NAME}['TASK_QUEUE_LIMITS'] is {limits!r}; it must map queue names to "
            "positive integers (the most tasks each queue may hold).",
            hint="For example: {'emails': 10000}. Leave a queue out to leave it unbounded.",
            id="redis_components.E008",
        )
    ]
