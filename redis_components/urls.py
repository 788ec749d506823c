"""URLs of redis_components: ``path("rc/", include("redis_components.urls"))``."""

from __future__ import annotations

from django.urls import URLPattern, path

from . import views

app_name = "redis_components"

urlpatterns: list[URLPattern] = [
    # -- Task queues --
    path("queues/", views.queue_status, name="queue-status"),
]
