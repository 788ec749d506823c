"""JSON endpoints of the components; ``urls.py`` names them under ``redis_components:``.

Every view needs a logged-in user and acts as that user only. POST bodies are JSON
objects and need Django's CSRF token (the ``X-CSRFToken`` header). Errors are JSON
``{"error": ..., "field": ...}`` with a 4xx status, or 503 when Redis cannot be reached.
The task queues' status page is the exception: an HTML page for staff (JSON with
``?format=json``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import redis
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import keys
from .exceptions import ChatNotFound, InvalidInput, NotAMember
from .messaging import GroupChat

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Group chat (messaging.py)
# ---------------------------------------------------------------------------

# The longest a pending-messages request waits, in seconds: below common proxy timeouts.
CHAT_MAX_WAIT = 30.0
# The most users one request may put in a new chat.
CHAT_MAX_RECIPIENTS = 100


def _json_error(status: int, error: str, field: str | None = None) -> JsonResponse:
    body = {"error": error} if field is None else {"error": error, "field": field}
    return JsonResponse(body, status=status)


@method_decorator(csrf_protect, name="dispatch")
class ChatApiView(View):
    """The chat views' base: login required, JSON bodies and JSON errors."""

    chats = GroupChat()

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return _json_error(401, "log in first")
        try:
            return super().dispatch(request, *args, **kwargs)
        except InvalidInput as exc:
            return _json_error(400, str(exc), exc.field)
        except NotAMember as exc:
            return _json_error(403, str(exc))
        except ChatNotFound as exc:
            return _json_error(404, str(exc))
        except (RedisConnectionError, RedisTimeoutError):
            logger.exception("Redis is unreachable")
            return _json_error(503, "the chat service is unavailable; try again later")

    def http_method_not_allowed(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        response = _json_error(405, f"{request.method} is not allowed here")
        allowed = [name.upper() for name in self.http_method_names if hasattr(self, name)]
        response["Allow"] = ", ".join(allowed)
        return response

    @property
    def user(self) -> str:
        return self.request.user.get_username()

    def body(self) -> dict[str, Any]:
        """The request's JSON object; an empty body is an empty object."""
        if not self.request.body:
            return {}
        try:
            data = json.loads(self.request.body)
        except ValueError:
            raise InvalidInput("body", "must be a JSON object") from None
        if not isinstance(data, dict):
            raise InvalidInput("body", "must be a JSON object")
        return data

    def member_of(self, chat_id: str) -> list[str]:
        """The chat's members, or :class:`NotAMember` if the requesting user is not one."""
        members = self.chats.members(chat_id)
        if self.user not in members:
            raise NotAMember(f"you are not a member of chat {chat_id}")
        return members


class ChatListView(ChatApiView):
    """GET: my chats with their unread counts. POST: create a chat."""

    def get(self, request: HttpRequest) -> HttpResponse:
        counts = self.chats.unread_counts(self.user)
        return JsonResponse({"chats": [{"id": key, "unread": n} for key, n in counts.items()]})

    def post(self, request: HttpRequest) -> HttpResponse:
        """Body: ``{"recipients": [user names], "message": "...", "public": false}``."""
        data = self.body()
        recipients = data.get("recipients", [])
        if not isinstance(recipients, list):
            raise InvalidInput("recipients", "must be a list of user names")
        if len(recipients) > CHAT_MAX_RECIPIENTS:
            raise InvalidInput("recipients", f"must name at most {CHAT_MAX_RECIPIENTS} users")
        _require_existing_users([keys.validate_name(name, "recipients") for name in recipients])
        public = data.get("public", False)
        if not isinstance(public, bool):
            raise InvalidInput("public", "must be true or false")
        chat_id = self.chats.create(self.user, recipients, data.get("message", ""), public=public)
        return JsonResponse({"id": chat_id, "members": self.chats.members(chat_id)}, status=201)


class ChatDetailView(ChatApiView):
    """GET: a chat's members and whether anyone may join it (members only)."""

    def get(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        key = str(chat_id)
        members = self.member_of(key)
        return JsonResponse({"id": key, "members": members, "public": self.chats.is_public(key)})


class ChatMessagesView(ChatApiView):
    """GET: history (``?before=<id>&limit=<n>``). POST ``{"message": "..."}``: send."""

    def get(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        before = _int_param(request.GET.get("before"), "before")
        limit = _int_param(request.GET.get("limit"), "limit")
        messages = self.chats.history(
            str(chat_id), self.user, before, 50 if limit is None else limit
        )
        return JsonResponse({"messages": messages})

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        message_id = self.chats.send(str(chat_id), self.user, self.body().get("message", ""))
        return JsonResponse({"id": message_id}, status=201)


class ChatPendingView(ChatApiView):
    """POST ``{"wait": seconds}``: my unread messages per chat, which are then marked seen.

    A POST because it changes what counts as read. With ``wait`` (at most
    :data:`CHAT_MAX_WAIT`), when nothing is pending it answers as soon as a message
    arrives, or empty when the time is up: a long poll, holding one server thread.
    """

    def post(self, request: HttpRequest) -> HttpResponse:
        wait = self.body().get("wait", 0)
        if (
            not isinstance(wait, (int, float))
            or isinstance(wait, bool)
            or not math.isfinite(wait)
            or not 0 <= wait <= CHAT_MAX_WAIT
        ):
            raise InvalidInput("wait", f"must be a number of seconds from 0 to {CHAT_MAX_WAIT:g}")
        pending = self.chats.fetch_pending(self.user, wait=wait)
        chats = [
            {"id": chat_id, "messages": messages, "missed": messages.missed}
            for chat_id, messages in pending
        ]
        return JsonResponse({"chats": chats})


class ChatJoinView(ChatApiView):
    """POST: join a public chat (an invite-only chat answers 403 to non-members)."""

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        key = str(chat_id)
        if not self.chats.is_public(key) and self.user not in self.chats.members(key):
            return _json_error(403, f"chat {key} is invite-only")
        self.chats.join(key, self.user)
        return JsonResponse({"id": key, "members": self.chats.members(key)})


class ChatLeaveView(ChatApiView):
    """POST: leave a chat; the last member to leave deletes it."""

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        self.chats.leave(str(chat_id), self.user)
        return JsonResponse({"id": str(chat_id)})


def _int_param(value: str | None, field: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(field, "must be an integer") from None


def _require_existing_users(names: list[str]) -> None:
    """Refuse names that are not users of the site: a chat is among its users."""
    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    found = user_model._default_manager.filter(**{f"{field}__in": names})
    unknown = sorted(set(names) - {str(name) for name in found.values_list(field, flat=True)})
    if unknown:
        raise InvalidInput("recipients", f"no such user: {', '.join(unknown)}")


# ---------------------------------------------------------------------------
# End of group chat
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Task queues (queues.py): the staff-only status page
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# End of task queues
# ---------------------------------------------------------------------------
