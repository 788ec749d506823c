from __future__ import annotations

import logging

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client, override_settings
from django.urls import reverse

from redis_components import Guild, RecentContacts
from redis_components.conf import conf
from redis_components.exceptions import ConfigurationError
from tests.settings import NOT_STARTED, caches

pytestmark = pytest.mark.django_db

CONTACTS = reverse("redis_components:autocomplete-contacts")


def guild_url(guild: str) -> str:
    return reverse("redis_components:autocomplete-guild", kwargs={"guild": guild})


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create(username="alice")
    client.force_login(user)
    return user


def test_contacts_need_a_signed_in_user(client: Client) -> None:
    response = client.get(CONTACTS, {"q": "z"})
    assert response.status_code == 401
    assert response.json() == {"error": "Sign in first."}
    assert client.post(CONTACTS, {"contact": "Zoë"}).status_code == 401


def test_contacts_answer_only_the_users_own(client: Client, alice: User, redis_mode: str) -> None:
    bob = User.objects.create(username="bob")
    RecentContacts().add(alice, "Zoë Saldaña")
    RecentContacts().add(alice, "Zack")
    RecentContacts().add(bob, "Zoltan")
    response = client.get(CONTACTS, {"q": "zo"})
    assert response.status_code == 200
    assert response.json() == {"results": ["Zoë Saldaña"]}
    assert client.get(CONTACTS, {"q": "Z", "limit": "1"}).json() == {"results": ["Zack"]}
    assert client.get(CONTACTS).json() == {"results": ["Zack", "Zoë Saldaña"]}


def test_post_adds_a_contact_with_a_csrf_token(alice: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(CONTACTS, {"contact": "Zoë"}).status_code == 403
    assert RecentContacts().all(alice) == []
    token = "x" * 32  # any secret does, as long as the cookie and the header agree
    client.cookies["csrftoken"] = token
    response = client.post(CONTACTS, {"contact": "Zoë"}, headers={"X-CSRFToken": token})
    assert response.status_code == 201
    assert response.json() == {"added": "Zoë"}
    assert RecentContacts().all(alice) == ["Zoë"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "contact"),
        ({"contact": "x" * 201}, "contact"),
        ({"contact": "a\x07"}, "contact"),
        ({"contact": "   "}, "contact"),
        ({"contact": "\u3000\t"}, "contact"),
        ({"contact": "Zo\ufffd"}, "contact"),
    ],
)
def test_post_bad_contact_is_a_400(client: Client, alice: User, data: dict, field: str) -> None:
    response = client.post(CONTACTS, data)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["error"].startswith(f"{field}: ")
    assert RecentContacts().all(alice) == []


@pytest.mark.parametrize(
    ("query", "field", "problem"),
    [
        ({"q": "x" * 101}, "q", "at most 100 characters"),
        ({"q": "a\x00b"}, "q", "control character"),
        ({"q": "a", "limit": "ten"}, "limit", "must be an integer"),
        ({"q": "a", "limit": "0"}, "limit", "positive integer"),
    ],
)
def test_bad_query_is_a_400_naming_the_parameter(
    client: Client, alice: User, query: dict, field: str, problem: str
) -> None:
    Guild("knights").join("alice")
    for url in (CONTACTS, guild_url("knights")):
        response = client.get(url, query)
        assert response.status_code == 400
        body = response.json()
        assert body["field"] == field
        assert problem in body["error"]


def test_guild_members_may_search_their_guild(client: Client, alice: User, redis_mode: str) -> None:
    Guild("knights").join_many(["alice", "Ærwyn", "Aeris", "Bors"])
    response = client.get(guild_url("knights"), {"q": "ae"})
    assert response.status_code == 200
    assert response.json() == {"results": ["Aeris", "Ærwyn"]}


def test_others_are_forbidden_by_default(client: Client) -> None:
    Guild("knights").join_many(["alice", "Ærwyn"])
    response = client.get(guild_url("knights"), {"q": "ae"})
    assert response.status_code == 403
    assert response.json() == {"error": "You may not search this guild."}
    client.force_login(User.objects.create(username="mallory"))
    assert client.get(guild_url("knights"), {"q": "ae"}).status_code == 403


def test_a_refused_search_is_logged_naming_the_setting(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The widget shows nothing; the server's log says why, and what decides it."""

    def refusal() -> logging.LogRecord:
        caplog.clear()
        assert client.get(guild_url("knights"), {"q": "ae"}).status_code == 403
        [record] = [record for record in caplog.records if record.name == "redis_components.views"]
        assert record.levelname == "WARNING"
        return record

    client.force_login(User.objects.create(username="mallory"))
    assert refusal().getMessage() == (
        "mallory may not search guild 'knights': REDIS_COMPONENTS['AUTOCOMPLETE_GUILD_ACCESS'] "
        "said no (by default, only the guild's members may search it)"
    )
    client.logout()
    assert refusal().getMessage().startswith("An anonymous user may not search guild 'knights'")


def anyone_may_search_the_open_guild(request: HttpRequest, guild: str) -> bool:
    return guild == "open guild"


@pytest.mark.parametrize(
    "rule", [anyone_may_search_the_open_guild, f"{__name__}.anyone_may_search_the_open_guild"]
)
def test_the_access_rule_is_a_setting(client: Client, rule: object) -> None:
    Guild("open guild").join("Ærwyn")
    Guild("knights").join("Bors")
    with override_settings(REDIS_COMPONENTS={"AUTOCOMPLETE_GUILD_ACCESS": rule}):
        assert client.get(guild_url("open guild"), {"q": "Æ"}).json() == {"results": ["Ærwyn"]}
        assert client.get(guild_url("knights"), {"q": "b"}).status_code == 403


@pytest.mark.parametrize("rule", ["no.such.module.rule", 42])
def test_a_broken_access_rule_is_a_configuration_error(rule: object) -> None:
    with (
        override_settings(REDIS_COMPONENTS={"AUTOCOMPLETE_GUILD_ACCESS": rule}),
        pytest.raises(ConfigurationError, match="AUTOCOMPLETE_GUILD_ACCESS"),
    ):
        _ = conf.AUTOCOMPLETE_GUILD_ACCESS


def test_guild_names_with_spaces_slashes_and_unicode_route(client: Client) -> None:
    name = "Chevaliers / de la Table ronde {ÆØ}"
    with override_settings(
        REDIS_COMPONENTS={"AUTOCOMPLETE_GUILD_ACCESS": lambda request, guild: True}
    ):
        Guild(name).join("Perceval")
        assert client.get(guild_url(name), {"q": "per"}).json() == {"results": ["Perceval"]}
        response = client.get(guild_url("x" * 1001), {"q": "a"})
    assert response.status_code == 400
    assert response.json()["field"] == "guild"


def test_other_methods_get_a_json_405(client: Client, alice: User) -> None:
    response = client.put(CONTACTS)
    assert response.status_code == 405
    assert response["Allow"] == "GET, POST, HEAD, OPTIONS"
    assert "PUT" in response.json()["error"]
    response = client.post(guild_url("knights"))
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD, OPTIONS"


def test_redis_down_is_a_503_not_a_500(client: Client, alice: User) -> None:
    down = {**settings.CACHES, "down": caches(NOT_STARTED)["default"]}
    with override_settings(CACHES=down, REDIS_COMPONENTS={"CACHE_ALIAS": "down"}):
        response = client.get(CONTACTS, {"q": "z"})
    assert response.status_code == 503
    assert "Redis" in response.json()["error"]
