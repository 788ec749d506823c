from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from redis_components import get_client

COMPONENTS = [
    ("Autocomplete", "6.1", "A user's recent contacts, and a large guild searched by prefix."),
    ("Distributed locks", "6.2", "Fine-grained locks with fencing tokens and renewing leases."),
    ("Counting semaphores", "6.3", "Fair and basic semaphores that never exceed their limit."),
    ("Task queues", "6.4", "Priorities, delayed tasks, at-least-once delivery, retries."),
    ("Pull messaging", "6.5", "Mailboxes and group chats with unread tracking."),
    ("File distribution", "6.6", "Files streamed through a bounded buffer to many readers."),
]


def _redacted(url: str) -> str:
    """The Redis URL without its password."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def redis_status() -> dict[str, Any]:
    status: dict[str, Any] = {
        "url": _redacted(settings.REDIS_URL),
        "embedded": settings.REDIS_EMBEDDED,
    }
    try:
        info = get_client().info("server")
        memory = get_client().info("memory")
    except redis.RedisError as error:
        status["error"] = str(error)
    else:
        status["version"] = info.get("redis_version")
        status["mode"] = info.get("redis_mode")
        status["memory"] = memory.get("used_memory_human")
    return status


def home(request: HttpRequest) -> HttpResponse:
    return render(
        request, "marketplace/home.html", {"components": COMPONENTS, "redis": redis_status()}
    )
