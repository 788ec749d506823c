from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("demo_project.marketplace.urls")),
    path("rc/", include("redis_components.urls")),
    path("admin/", admin.site.urls),
]
