from __future__ import annotations

from django.urls import include, path

urlpatterns = [
    path("rc/", include("redis_components.urls")),
]
