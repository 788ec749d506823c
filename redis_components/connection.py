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

# alias -> (the CACHES setting it was found in, its client). get_client() is on every
# hot path, and Django's thread-local cache handler costs about as much as a Redis
# command; a new CACHES setting (override_settings makes one) is a new dict, which the
# identity check notices. redis-py clients are thread-safe and reconnect after a fork.
_clients: dict[str, tuple[object, Redis]] = {}


def get_client() -> Redis:
    """Return the raw redis-py client of the configured django-redis cache."""
    alias = conf.CACHE_ALIAS
    caches = settings.CACHES
    known = _clients.get(alias)
    if known is not None and known[0] is caches:
        return known[1]
    if alias not in caches:
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
    _clients[alias] = (caches, client)
    return client


def text(value: Any) -> str:
    """A Redis reply as ``str``, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
