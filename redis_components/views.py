"""JSON endpoints of the components (included with ``include("redis_components.urls")``).

Every answer is JSON, errors included: bad input is a 400 naming the parameter, an
anonymous or unauthorized caller gets 401 or 403, and a Redis that does not answer a
503, never a 500.
"""

from __future__ import annotations

from typing import Any

import redis
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.views import View

from .autocomplete import Guild, RecentContacts
from .conf import conf
from .exceptions import InvalidInput


def json_error(status: int, message: str, field: str | None = None) -> JsonResponse:
    """``{"error": message[, "field": field]}`` with the given status."""
    body = {"error": message} if field is None else {"error": message, "field": field}
    return JsonResponse(body, status=status)


class JsonView(View):
    """A view whose errors are JSON: InvalidInput is a 400, Redis down is a 503.

    ``parameters`` maps the service's argument names to the request parameters that
    carry them, so a 400 names what the caller sent.
    """

    parameters: dict[str, str] = {}

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        except InvalidInput as error:
            field = self.parameters.get(error.field, error.field)
            return json_error(400, f"{field}: {error.problem}", field)
        except (redis.ConnectionError, redis.TimeoutError):
            return json_error(503, "Redis is unavailable; try again shortly.")

    def http_method_not_allowed(
        self, request: HttpRequest, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        response = json_error(405, f"Method {request.method} is not allowed here.")
        allowed = [method.upper() for method in self.http_method_names if hasattr(self, method)]
        response["Allow"] = ", ".join(allowed)
        return response


def int_parameter(request: HttpRequest, name: str) -> int | None:
    """The integer query parameter ``name``, None when absent; InvalidInput when not a number."""
    value = request.GET.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(name, f"must be an integer, not {value!r}") from None


# --- autocomplete -----------------------------------------------------------------


class ContactsAutocompleteView(JsonView):
    """The signed-in user's recent contacts.

    ``GET ?q=<prefix>[&limit=<n>]`` answers ``{"results": [...]}``, most recent first.
    ``POST contact=<name>`` (form-encoded, CSRF-protected) puts a contact at the front.
    """

    parameters = {"prefix": "q"}

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return json_error(401, "Sign in to use your contacts.")
        return super().dispatch(request, *args, **kwargs)

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
    anyone else gets a 403.
    """

    parameters = {"prefix": "q"}

    def get(self, request: HttpRequest, guild: str) -> HttpResponse:
        found = Guild(guild)
        if not conf.AUTOCOMPLETE_GUILD_ACCESS(request, found.name):
            return json_error(403, "You may not search this guild.")
        results = found.suggest(request.GET.get("q", ""), int_parameter(request, "limit"))
        return JsonResponse({"results": results})


# --- end autocomplete -------------------------------------------------------------
