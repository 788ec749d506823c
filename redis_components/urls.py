"""URLs of the components' JSON endpoints: ``path("rc/", include("redis_components.urls"))``."""

from __future__ import annotations

from django.urls import path

from . import views
from .metrics import metrics_view

app_name = "redis_components"

urlpatterns = [
    # Autocomplete
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
    # Group chat
    path("chats/", views.ChatListView.as_view(), name="chats"),
    path("chats/pending/", views.ChatPendingView.as_view(), name="chat-pending"),
    path("chats/<int:chat_id>/", views.ChatDetailView.as_view(), name="chat"),
    path("chats/<int:chat_id>/messages/", views.ChatMessagesView.as_view(), name="chat-messages"),
    path("chats/<int:chat_id>/read/", views.ChatReadView.as_view(), name="chat-read"),
    path("chats/<int:chat_id>/join/", views.ChatJoinView.as_view(), name="chat-join"),
    path("chats/<int:chat_id>/leave/", views.ChatLeaveView.as_view(), name="chat-leave"),
    # Task queues: their numbers as JSON; the pages themselves are in Django's admin
    path("queues/", views.queue_status, name="queue-status"),
    # Prometheus metrics (when REDIS_COMPONENTS["METRICS"] is on)
    path("metrics/", metrics_view, name="metrics"),
    # Anything else under these URLs: a JSON 404
    path("<path:path>", views.not_found),
]
