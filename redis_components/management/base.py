"""The base class of management commands that talk to Redis: the package's, the demo's
and a project's own.

::

    from redis_components.management.base import RedisCommand

    class Command(RedisCommand):
        help = "Count the waiting tasks."

        def handle(self, *args, **options):
            ...

A command that cannot reach Redis says so in one line naming where it looked, and exits
with status 1, instead of printing a traceback.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisClusterException

from redis_components.conf import conf
from redis_components.connection import get_client
from redis_components.exceptions import ConfigurationError

__all__ = ["RedisCommand", "redis_address", "unreachable", "without_password"]

# What redis-py raises when it cannot reach the server (a refused or timed-out
# connection, no master from the sentinels, no node of a cluster).
UNREACHABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    RedisClusterException,
)


class RedisCommand(BaseCommand):
    """A management command that talks to Redis.

    It asks Redis for a PING before anything else, so that a command that cannot reach
    it stops before doing any work (and before a loop that would retry: the file
    commands retry a connection lost while they run). When Redis cannot be reached, at
    the start or later, the command says so in one line that names where it looked (a
    ``CommandError``: exit status 1) instead of a traceback; ``--traceback`` shows it.
    A ``ConfigurationError`` is one line too.
    """

    # False: the command does not need Redis at its start (rc_worker waits for it).
    ping_first = True

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            if self.ping_first:
                get_client().ping()
            return super().execute(*args, **options)
        except (*UNREACHABLE, ConfigurationError) as error:
            if options.get("traceback"):
                raise
            message = str(error) if isinstance(error, ConfigurationError) else unreachable(error)
            raise CommandError(message) from error


def unreachable(error: BaseException) -> str:
    """One line: Redis cannot be reached, where the commands looked for it, and why."""
    reason = " ".join(str(error).split()).rstrip(".") or type(error).__name__
    return f"Redis cannot be reached at {redis_address()}: {reason}"


def redis_address() -> str:
    """Where the components look for Redis: the ``LOCATION`` of the cache that
    ``CACHE_ALIAS`` names (without passwords) and its sentinels, if any."""
    alias = conf.CACHE_ALIAS
    cache: dict[str, Any] = settings.CACHES.get(alias) or {}
    location: str | list[str] = cache.get("LOCATION") or "?"
    urls = location.split(",") if isinstance(location, str) else [str(url) for url in location]
    shown = ", ".join(without_password(url.strip()) for url in urls)
    sentinels = (cache.get("OPTIONS") or {}).get("SENTINELS")
    if sentinels:
        shown += " through the sentinels " + ", ".join(f"{host}:{port}" for host, port in sentinels)
    return f"{shown} (CACHES[{alias!r}])"


def without_password(url: str) -> str:
    """``url`` with any password in it (``user:password@``, ``?password=``) as ``***``."""
    parts = urllib.parse.urlsplit(url)
    netloc, query = parts.netloc, parts.query
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = re.sub(r"(?i)((?:^|&)password=)[^&]*", r"\1***", query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{parts.scheme}://{netloc}{parts.path}{'?' if query else ''}{query}{fragment}"
