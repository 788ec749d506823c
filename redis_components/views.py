"""JSON endpoints of the components: ``path("rc/", include("redis_components.urls"))``.

Every answer is JSON, errors included (but ``queues/`` without ``?format=json``, which
redirects to the task queues' pages in Django's admin): bad input is a 400 naming the
parameter, an anonymous caller a 401, a forbidden one a 403, an unknown chat a 404, and
a Redis that does not answer a 503: bad input is never a 500. POST bodies need Django's
CSRF token (the ``X-CSRFToken`` header); the chat views take JSON objects, the contacts
view a form. Every view acts as the signed-in user only. An ``error`` text is in the
user's language (gettext); keys and status codes are not translated. A 400's text is
the validator's English problem, for developers: a client shows its users its own
message for the ``field`` it names.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import redis
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, RequestDataTooBig, ValidationError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import NoReverseMatch, reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext
from django.views import View
from django.views.csrf import csrf_failure as django_csrf_failure
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect

from . import keys
from .autocomplete import Guild, RecentContacts
from .conf import SETTING_NAME, conf
from .deprecation import deprecated
from .exceptions import ChatLimitReached, ChatNotFound, InvalidInput, NotAMember
from .guard import UNAVAILABLE, UNAVAILABLE_MESSAGE
from .messaging import GroupChat

logger = logging.getLogger(__name__)


def json_error(status: int, message: str, field: str | None = None) -> JsonResponse:
    """``{"error": message[, "field": field]}`` with the given status."""
    body = {"error": message} if field is None else {"error": message, "field": field}
    return JsonResponse(body, status=status)


@method_decorator(csrf_protect, name="dispatch")
class JsonView(View):
    """A view whose errors are JSON (see the module's docstring).

    ``login_required``: anonymous callers get a 401. ``parameters`` maps the service's
    argument names to the request parameters that carry them, so a 400 names what the
    caller sent.
    """

    login_required = True
    parameters: dict[str, str] = {}

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if self.login_required and not request.user.is_authenticated:
            return json_error(401, gettext("Sign in first."))
        try:
            return super().dispatch(request, *args, **kwargs)
        except InvalidInput as error:
            field = self.parameters.get(error.field, error.field)
            return json_error(400, f"{field}: {error.problem}", field)
        except (NotAMember, ChatNotFound):
            # The same answer whether the chat exists or not: non-members learn nothing.
            return json_error(404, gettext("No such chat among yours."))
        except ChatLimitReached as error:
            response = json_error(
                429,
                gettext("You started too many chats in the last minute; try again shortly."),
            )
            response["Retry-After"] = str(error.retry_after)
            return response
        except RequestDataTooBig:
            return json_error(413, gettext("The request body is too large."))
        except UNAVAILABLE:
            logger.exception("Redis is unreachable")
            return json_error(503, str(UNAVAILABLE_MESSAGE))

    def http_method_not_allowed(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        response = json_error(
            405, gettext("Method %(method)s is not allowed here.") % {"method": request.method}
        )
        allowed = [method.upper() for method in self.http_method_names if hasattr(self, method)]
        response["Allow"] = ", ".join(allowed)
        return response


# Redis takes signed 64-bit integers: a number past them must not reach it (it would
# answer an error that reads as Redis being down).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def whole_number(
    value: str, name: str, minimum: int = INT64_MIN, maximum: int | None = INT64_MAX
) -> int:
    """``value`` as an integer from ``minimum`` to ``maximum`` (None: no bound); else
    :class:`InvalidInput` naming ``name``."""
    try:
        number = int(value)
    except ValueError:  # also past Python's limit on the digits of an int
        raise InvalidInput(name, f"must be an integer, not {keys.shorten(value)}") from None
    if maximum is None and number < minimum:
        raise InvalidInput(name, f"must be at least {minimum}")
    if maximum is not None and not minimum <= number <= maximum:
        raise InvalidInput(name, f"must be from {minimum} to {maximum}")
    return number


def int_parameter(request: HttpRequest, name: str) -> int | None:
    """The integer query parameter ``name`` (see :func:`whole_number`), None when absent."""
    value = request.GET.get(name)
    return None if value is None else whole_number(value, name)


def wants_json(request: HttpRequest) -> bool:
    """Whether the client sent or asked for JSON (the app's views answer it JSON)."""
    return "json" in request.headers.get("Accept", "") or request.content_type == (
        "application/json"
    )


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: a JSON 403 for a client that sent or asked for JSON,
    Django's own page otherwise."""
    if wants_json(request):
        return json_error(403, gettext("CSRF check failed: %(reason)s") % {"reason": reason})
    return django_csrf_failure(request, reason)


def not_found(request: HttpRequest, path: str) -> HttpResponse:
    """The app's URLs end here: an unknown route is a JSON 404."""
    return json_error(404, gettext("No such endpoint."))


# -- autocomplete (autocomplete.py) ---------------------------------------------------


class ContactsAutocompleteView(JsonView):
    """The signed-in user's recent contacts.

    ``GET ?q=<prefix>[&limit=<n>]`` answers ``{"results": [...]}``, most recent first.
    ``POST contact=<name>`` (form-encoded, CSRF-protected) puts a contact at the front.
    """

    parameters = {"prefix": "q"}

    def get(self, request: HttpRequest) -> HttpResponse:
        results = RecentContacts().suggest(
            request.user, request.GET.get("q", ""), int_parameter(request, "limit")
        )
        return JsonResponse({"results": results})

    def post(self, request: HttpRequest) -> HttpResponse:
        contact = request.POST.get("contact")
        if contact is None:
            raise InvalidInput("contact", "is required")
        RecentContacts().add(request.user, contact)
        return JsonResponse({"added": contact}, status=201)


class GuildAutocompleteView(JsonView):
    """Members of a guild: ``GET ?q=<prefix>[&limit=<n>]`` answers ``{"results": [...]}``.

    Who may search is AUTOCOMPLETE_GUILD_ACCESS (by default the guild's own members);
    anyone else gets a 403, and the log a warning that names the setting.
    """

    login_required = False  # the access rule decides, anonymous callers included
    parameters = {"prefix": "q"}

    def get(self, request: HttpRequest, guild: str) -> HttpResponse:
        found = Guild(guild)
        if not conf.AUTOCOMPLETE_GUILD_ACCESS(request, found.name):
            user = getattr(request, "user", None)
            logger.warning(
                "%s may not search guild %r: %s['AUTOCOMPLETE_GUILD_ACCESS'] said no (by "
                "default, only the guild's members may search it)",
                user.get_username() if user and user.is_authenticated else "An anonymous user",
                found.name,
                SETTING_NAME,
            )
            return json_error(403, gettext("You may not search this guild."))
        results = found.suggest(request.GET.get("q", ""), int_parameter(request, "limit"))
        return JsonResponse({"results": results})


# -- group chat (messaging.py) -----------------------------------------------------------

# The longest a pending-messages request waits, in seconds: below common proxy timeouts.
CHAT_MAX_WAIT = 30.0
# The most users one request may put in a new chat.
CHAT_MAX_RECIPIENTS = 100


class ChatApiView(JsonView):
    """The chat views' base: JSON bodies, and who the requesting user is.

    The services know users by their pk; the JSON names them by username, as 0.1 did:
    bodies name recipients by username, and answers show members and senders by
    username (see :meth:`answer`).
    """

    chats = GroupChat()

    @property
    def by_username(self) -> bool:
        """Whether users are known by username, 0.1's way (``MESSAGING_USER_KEY``)."""
        if conf.MESSAGING_USER_KEY != "username":
            return False
        deprecated(
            "MESSAGING_USER_KEY = 'username'",
            "run 'manage.py rc_migrate_users', then remove the setting (the default is 'pk')",
            stacklevel=2,
        )
        return True

    @property
    def user(self) -> str:
        """The requesting user as the services know them: their pk."""
        if self.by_username:
            return self.request.user.get_username()
        return keys.user_id(self.request.user)

    def users_named(self, names: list[str]) -> list[str]:
        """The users called ``names`` (usernames) as the services know them; an unknown
        name is :class:`InvalidInput`."""
        found = _users_named(names)
        return names if self.by_username else [found[name] for name in names]

    def answer(self, data: dict[str, Any], status: int = 200) -> JsonResponse:
        """``data`` as JSON, its users shown by username: the ``members`` list, and the
        ``sender`` of each message in ``messages`` or in each of the ``chats``. One query
        for the whole answer; a user who no longer exists (deleted, or whose 0.1 data was
        not migrated) shows as ``(unknown user <id>)``. Members are sorted by name."""
        if self.by_username:
            return JsonResponse(data, status=status)
        lists = [data.get("messages", [])]
        lists += [chat.get("messages", []) for chat in data.get("chats", [])]
        ids = set(data.get("members", []))
        ids.update(message["sender"] for messages in lists for message in messages)
        names = _usernames(ids)
        shown = dict(data)
        if "members" in shown:
            shown["members"] = sorted(names[member] for member in shown["members"])
        if "messages" in shown:
            shown["messages"] = _named_senders(shown["messages"], names)
        if "chats" in shown:
            shown["chats"] = [
                chat | {"messages": _named_senders(chat["messages"], names)}
                if "messages" in chat
                else chat
                for chat in shown["chats"]
            ]
        return JsonResponse(shown, status=status)

    def body(self) -> dict[str, Any]:
        """The request's JSON object; an empty body is an empty object."""
        if not self.request.body:
            return {}
        try:
            data = json.loads(self.request.body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
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
        """``?wait=<seconds>&shown=<mark>`` (wait at most :data:`CHAT_MAX_WAIT`): a long
        poll, answered once the counts differ from those whose ``mark`` the client shows
        (a mark from an earlier answer), or when the time is up."""
        counts = self.chats.unread_counts(
            self.user, wait=_wait_parameter(request), shown=request.GET.get("shown")
        )
        chats = [{"id": key, "unread": n} for key, n in counts.per_chat.items()]
        return JsonResponse({"chats": chats, "mark": counts.mark})

    def post(self, request: HttpRequest) -> HttpResponse:
        """Body: ``{"recipients": [user names], "message": "...", "public": false}``."""
        data = self.body()
        recipients = data.get("recipients", [])
        if not isinstance(recipients, list):
            raise InvalidInput("recipients", "must be a list of user names")
        if len(recipients) > CHAT_MAX_RECIPIENTS:
            raise InvalidInput("recipients", f"must name at most {CHAT_MAX_RECIPIENTS} users")
        users = self.users_named([keys.validate_name(name, "recipients") for name in recipients])
        public = data.get("public", False)
        if not isinstance(public, bool):
            raise InvalidInput("public", "must be true or false")
        if not public and not set(users) - {self.user}:
            raise InvalidInput(
                "recipients", "name at least one other user (or make the chat public)"
            )
        chat_id = self.chats.create(self.user, users, data.get("message", ""), public=public)
        return self.answer({"id": chat_id, "members": self.chats.members(chat_id)}, status=201)


class ChatDetailView(ChatApiView):
    """GET: a chat's members and whether anyone may join it (members only)."""

    def get(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        key = str(chat_id)
        members = self.member_of(key)
        return self.answer({"id": key, "members": members, "public": self.chats.is_public(key)})


class ChatMessagesView(ChatApiView):
    """GET: history (``?before=<id>&limit=<n>``). POST ``{"message": "..."}``: send."""

    def get(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        limit = int_parameter(request, "limit")
        after = int_parameter(request, "after")
        if after is not None:  # following the chat: what came after, waiting if nothing yet
            messages = self.chats.messages_after(
                str(chat_id),
                self.user,
                after,
                wait=_wait_parameter(request),
                limit=100 if limit is None else limit,
            )
            return self.answer({"messages": [message.as_dict() for message in messages]})
        before = int_parameter(request, "before")
        messages = self.chats.history(
            str(chat_id), self.user, before, 50 if limit is None else limit
        )
        return self.answer({"messages": [message.as_dict() for message in messages]})

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        message_id = self.chats.send(str(chat_id), self.user, self.body().get("message", ""))
        return JsonResponse({"id": message_id}, status=201)


class ChatReadView(ChatApiView):
    """POST: mark everything in the chat read (members only); answers how many were unread."""

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        return JsonResponse({"read": self.chats.mark_read(str(chat_id), self.user)})


def _wait_parameter(request: HttpRequest) -> float:
    """The ``wait`` query parameter: seconds, from 0 (the default) to CHAT_MAX_WAIT."""
    value = request.GET.get("wait", "0")
    try:
        wait = float(value)
    except ValueError:
        raise InvalidInput(
            "wait", f"must be a number of seconds, not {keys.shorten(value)}"
        ) from None
    if not 0 <= wait <= CHAT_MAX_WAIT:
        raise InvalidInput("wait", f"must be a number of seconds from 0 to {CHAT_MAX_WAIT:g}")
    return wait


class ChatPendingView(ChatApiView):
    """POST ``{"wait": seconds}``: my unread messages per chat, which are then marked seen.

    A POST because it changes what counts as read. With ``wait`` (at most
    :data:`CHAT_MAX_WAIT`), when nothing is pending it answers as soon as a message
    arrives, or empty when the time is up: a long poll, holding one server thread.
    """

    def post(self, request: HttpRequest) -> HttpResponse:
        wait = keys.seconds(self.body().get("wait", 0), "wait")
        if wait > CHAT_MAX_WAIT:
            raise InvalidInput("wait", f"must be a number of seconds from 0 to {CHAT_MAX_WAIT:g}")
        pending = self.chats.fetch_pending(self.user, wait=wait)
        chats = [
            {
                "id": chat.chat_id,
                "messages": [message.as_dict() for message in chat.messages],
                "missed": chat.missed,
            }
            for chat in pending
        ]
        return self.answer({"chats": chats})


class ChatJoinView(ChatApiView):
    """POST: join a public chat (an invite-only chat answers 403 to non-members)."""

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        key = str(chat_id)
        if not self.chats.is_public(key) and self.user not in self.chats.members(key):
            raise NotAMember(f"chat {key} is invite-only")  # answered as if it did not exist
        self.chats.join(key, self.user)
        return self.answer({"id": key, "members": self.chats.members(key)})


class ChatLeaveView(ChatApiView):
    """POST: leave a chat; the last member to leave deletes it."""

    def post(self, request: HttpRequest, chat_id: int) -> HttpResponse:
        self.chats.leave(str(chat_id), self.user)
        return JsonResponse({"id": str(chat_id)})


def _users_named(names: list[str]) -> dict[str, str]:
    """``{username: pk}`` for ``names``; names that are not users of the site are refused
    (:class:`InvalidInput`): a chat is among its users."""
    user_model = get_user_model()
    field = user_model.USERNAME_FIELD
    found = user_model._default_manager.filter(**{f"{field}__in": names})
    pks = {str(name): str(pk) for name, pk in found.values_list(field, "pk")}
    unknown = sorted(set(names) - set(pks))
    if unknown:
        raise InvalidInput("recipients", f"no such user: {', '.join(unknown)}")
    return pks


def _usernames(ids: set[str]) -> dict[str, str]:
    """``{pk: username}`` for the users ``ids`` (one query); an id that is no user's shows
    as ``(unknown user <id>)``."""
    user_model = get_user_model()
    pk_field = user_model._meta.pk
    wanted: dict[Any, str] = {}
    for ident in ids:
        with contextlib.suppress(ValidationError):  # not a pk of this model: 0.1 data, say
            wanted[pk_field.to_python(ident) if pk_field else ident] = ident
    found = user_model._default_manager.filter(pk__in=wanted)
    rows = found.values_list("pk", user_model.USERNAME_FIELD)
    names = {wanted[pk]: str(name) for pk, name in rows}
    return {ident: names.get(ident, f"(unknown user {ident})") for ident in ids}


def _named_senders(messages: list[Any], names: dict[str, str]) -> list[Any]:
    return [{**message, "sender": names[message["sender"]]} for message in messages]


# -- task queues (the tasks package): their numbers for monitoring scripts ----------------


def queue_viewers_only(
    view: Callable[[HttpRequest], HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """Anonymous users go to log in; the others get a 403 (JSON for ``?format=json``)
    unless they may see the task queues by the admin pages' rule
    (:func:`~redis_components.models.can_view_task_queues`).

    Staff sign in through the admin when it is installed, else at ``LOGIN_URL``.
    """

    def wrapped(request: HttpRequest) -> HttpResponse:
        from .models import can_view_task_queues, refusal  # (models need the apps loaded)

        if not request.user.is_authenticated:
            admin = apps.is_installed("django.contrib.admin")
            return redirect_to_login(request.get_full_path(), "admin:login" if admin else None)
        if not can_view_task_queues(request.user):
            if request.GET.get("format") == "json":
                return json_error(403, refusal())
            raise PermissionDenied(refusal())
        return view(request)

    wrapped.__name__ = view.__name__
    wrapped.__doc__ = view.__doc__
    return wrapped


def queue_status_data() -> dict[str, Any]:
    """Counts per queue, registered workers and the newest dead letters (long ones read in
    part, as on the admin's list pages), as plain data."""
    from .tasks.status import dead_letter_page, queue_stats, workers

    try:
        stats = queue_stats()
        letters = [letter for s in stats if s.dead for letter in dead_letter_page(s.name, 0, 5)[1]]
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
@queue_viewers_only
def queue_status(request: HttpRequest) -> HttpResponse:
    """``?format=json``: the task queues' numbers, for monitoring scripts (a 503 when
    Redis cannot be reached). Without it, a redirect to the task queues' pages in Django's
    admin, where they are shown and acted on; a JSON 404 when the admin is not there."""
    if request.GET.get("format") == "json":
        data = queue_status_data()
        return JsonResponse(data, status=503 if "error" in data else 200)
    if apps.is_installed("django.contrib.admin"):
        try:
            return HttpResponseRedirect(reverse("admin:redis_components_taskqueues_changelist"))
        except NoReverseMatch:  # installed, but its URLs are not included
            pass
    return json_error(
        404,
        gettext(
            "The task queues' pages live in Django's admin, which this site does not serve; "
            "?format=json gives their numbers."
        ),
    )
