"""The Redis client every component uses: the raw client of a django-redis cache.

Which cache is named by ``REDIS_COMPONENTS["CACHE_ALIAS"]``. The client may return
``bytes`` or ``str`` depending on the cache's ``decode_responses`` option; every
component reads through :func:`text` so both work.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from redis import Redis

from .conf import conf
from .exceptions import ConfigurationError


def get_client() -> Redis:
    """Return the raw redis-py client of the configured django-redis cache."""
    alias = conf.CACHE_ALIAS
    if alias not in settings.CACHES:
        raise ConfigurationError(
            f"REDIS_COMPONENTS['CACHE_ALIAS'] is {alias!r}, but CACHES has no such entry."
        )
    from django_redis import get_redis_connection

    try:
        client: Redis = get_redis_connection(alias, write=True)
    except NotImplementedError:
        raise ConfigurationError(
            f"CACHES[{alias!r}] is not a django-redis cache "
            "(BACKEND must be 'django_redis.cache.RedisCache')."
        ) from None
    return client


def text(value: Any) -> str:
    """A Redis reply as ``str``, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
