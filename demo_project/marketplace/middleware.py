"""When Redis goes away, the demo's pages say so (503) instead of "Server Error (500)".

Nothing needs restarting: redis-py opens a new connection at the next request, so the
pages work again as soon as Redis is back. The outage is logged once, not per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from redis.exceptions import RedisClusterException

logger = logging.getLogger(__name__)

RETRY_AFTER = 5  # seconds
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, RedisClusterException)


class RedisUnavailableMiddleware:
    """A short 503 page when a page could not reach Redis."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.logged_at = -float("inf")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, UNAVAILABLE):
            return None
        if time.monotonic() - self.logged_at > 60:  # once a minute while it lasts
            logger.error("Redis is unavailable (%s); pages answer 503 until it is back", exception)
            self.logged_at = time.monotonic()
        response = render(request, "marketplace/unavailable.html", status=503)
        response["Retry-After"] = str(RETRY_AFTER)
        return response
