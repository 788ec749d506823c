"""URLs of the components' JSON endpoints: ``path("rc/", include("redis_components.urls"))``."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "redis_components"

urlpatterns = [
    # --- autocomplete ---
    path(
        "autocomplete/contacts/",
        views.ContactsAutocompleteView.as_view(),
        name="autocomplete-contacts",
    ),
    path(
        "autocomplete/guilds/<path:guild>/",
        views.GuildAutocompleteView.as_view(),
        name="autocomplete-guild",
    ),
    # --- end autocomplete ---
]
