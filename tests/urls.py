from __future__ import annotations

import importlib.util

import django
from django.contrib import admin
from django.urls import include, path

from tests import pages

TASKS_FRAMEWORK = django.VERSION >= (6, 0) or importlib.util.find_spec("django_tasks") is not None

urlpatterns = [
    path("admin/", admin.site.urls),
    path("rc/", include("redis_components.urls")),
    path("autocomplete-page/", pages.autocomplete_page, name="autocomplete-page"),
    path("", include("demo_project.marketplace.urls")),
]
if TASKS_FRAMEWORK:
    from tests.testapp import views

    urlpatterns[-1:-1] = [
        path("framework-tasks/multiply/", views.multiply),
        path("framework-tasks/<str:result_id>/", views.result),
    ]
