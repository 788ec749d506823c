"""Views of redis_components, included with ``path("...", include("redis_components.urls"))``.

Each component keeps its views in a section of its own below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import redis
from django.apps import apps
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

# -- Task queues: the status page -------------------------------------------------------

QUEUE_PAGE_REFRESH = 5  # seconds


def staff_only(
    view: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Anonymous users go to log in; signed-in users who are not staff get a 403.

    Staff sign in through the admin when it is installed, else at ``LOGIN_URL``.
    """

    def wrapped(request: HttpRequest) -> HttpResponse:
        if not request.user.is_authenticated:
            admin = apps.is_installed("django.contrib.admin")
            return redirect_to_login(request.get_full_path(), "admin:login" if admin else None)
        if not request.user.is_staff:
            raise PermissionDenied("Staff only.")
        return view(request)

    wrapped.__name__ = view.__name__
    wrapped.__doc__ = view.__doc__
    return wrapped


def queue_status_data() -> dict[str, Any]:
    """Counts per queue, registered workers and the newest dead letters, as plain data."""
    from .queues import dead_letters, queue_stats, workers

    try:
        stats = queue_stats()
        letters = [letter for s in stats if s.dead for letter in dead_letters(s.name, 5)]
        return {
            "queues": [asdict(s) for s in stats],
            "workers": [asdict(w) | {"lease_left": max(w.lease_left, -1.0)} for w in workers()],
            "dead_letters": [
                {k: v for k, v in asdict(letter).items() if k != "raw"}
                for letter in sorted(letters, key=lambda letter: -letter.failed_at)[:20]
            ],
        }
    except redis.RedisError as error:
        return {"error": f"Redis cannot be reached: {error}"}


@never_cache
@staff_only
def queue_status(request: HttpRequest) -> HttpResponse:
    """Staff-only page of the task queues; ``?format=json`` for the same numbers as JSON."""
    data = queue_status_data()
    if request.GET.get("format") == "json":
        return JsonResponse(data, status=503 if "error" in data else 200)
    context = {**data, "refresh": QUEUE_PAGE_REFRESH}
    return render(request, "redis_components/queues.html", context)


# -- end of task queues -----------------------------------------------------------------
