from __future__ import annotations

from django.urls import include, path

from tests import pages

urlpatterns = [
    path("rc/", include("redis_components.urls")),
    path("autocomplete-page/", pages.autocomplete_page, name="autocomplete-page"),
    path("", include("demo_project.marketplace.urls")),
]
