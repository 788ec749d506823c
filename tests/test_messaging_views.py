from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

from redis_components import GroupChat
from tests.settings import NOT_STARTED

pytestmark = pytest.mark.django_db

chats = GroupChat()


@pytest.fixture
def users(django_user_model: type[User]) -> dict[str, User]:
    return {
        name: django_user_model.objects.create_user(username=name)
        for name in ("alice", "bob", "carol", "mallory")
    }


def ids(users: dict[str, User], *names: str) -> list[str]:
    """The pks of the users ``names``, as the services show them (sorted as strings)."""
    return sorted(str(users[name].pk) for name in names)


def as_user(name: str, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(User.objects.get(username=name))
    return client


def post(client: Client, name: str, body: Any = None, **kwargs: Any) -> Any:
    data = "" if body is None else json.dumps(body)
    url = reverse(f"redis_components:{name}", kwargs=kwargs)
    return client.post(url, data, content_type="application/json")


def get(client: Client, name: str, query: dict[str, str] | None = None, **kwargs: Any) -> Any:
    return client.get(reverse(f"redis_components:{name}", kwargs=kwargs), query or {})


def test_a_chat_through_the_views(users: dict[str, User]) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    created = post(alice, "chats", {"recipients": ["bob"], "message": "hello"})
    assert created.status_code == 201
    chat_id = created.json()["id"]
    assert created.json()["members"] == ["alice", "bob"]

    sent = post(bob, "chat-messages", {"message": "hi alice"}, chat_id=chat_id)
    assert (sent.status_code, sent.json()) == (201, {"id": 2})
    assert get(alice, "chats").json()["chats"] == [{"id": chat_id, "unread": 1}]

    pending = post(alice, "chat-pending").json()["chats"]
    assert [(c["id"], c["missed"]) for c in pending] == [(chat_id, 0)]
    assert [(m["sender"], m["message"]) for m in pending[0]["messages"]] == [
        ("bob", "hi alice"),  # not her own hello
    ]
    assert post(alice, "chat-pending", {"wait": 0}).json() == {"chats": []}
    assert get(alice, "chats").json()["chats"] == [{"id": chat_id, "unread": 0}]

    history = get(bob, "chat-messages", {"limit": "1"}, chat_id=chat_id).json()
    assert [m["message"] for m in history["messages"]] == ["hi alice"]
    detail = get(bob, "chat", chat_id=chat_id).json()
    assert detail == {"id": chat_id, "members": ["alice", "bob"], "public": False}

    assert post(bob, "chat-leave", chat_id=chat_id).json() == {"id": chat_id}
    assert post(bob, "chat-leave", chat_id=chat_id).status_code == 404  # not one of bob's
    assert chats.members(chat_id) == ids(users, "alice")


def test_ones_own_messages_are_not_unread_to_oneself(users: dict[str, User]) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    chat_id = post(alice, "chats", {"recipients": ["bob"], "message": "hello"}).json()["id"]
    assert get(alice, "chats").json()["chats"] == [{"id": chat_id, "unread": 0}]
    assert get(bob, "chats").json()["chats"] == [{"id": chat_id, "unread": 1}]
    post(bob, "chat-read", chat_id=chat_id)
    post(bob, "chat-messages", {"message": "hi"}, chat_id=chat_id)
    post(alice, "chat-messages", {"message": "and again"}, chat_id=chat_id)
    assert get(alice, "chats").json()["chats"] == [{"id": chat_id, "unread": 1}]
    assert get(bob, "chats").json()["chats"] == [{"id": chat_id, "unread": 1}]
    assert post(alice, "chat-pending").json()["chats"][0]["messages"][0]["message"] == "hi"
    assert post(bob, "chat-read", chat_id=chat_id).json() == {"read": 1}


def test_the_views_give_the_chats_users_by_primary_key(users: dict[str, User]) -> None:
    created = post(as_user("alice"), "chats", {"recipients": ["bob"], "message": "hello"})
    assert created.status_code == 201
    assert chats.members(created.json()["id"]) == ids(users, "alice", "bob")
    # A recipient is named by username: a pk there is a username no user has, a 400.
    for recipient in (str(users["bob"].pk), "nobody"):
        refused = post(as_user("alice"), "chats", {"recipients": [recipient], "message": "hi"})
        assert (refused.status_code, refused.json()["field"]) == (400, "recipients")
        assert recipient in refused.json()["error"]


def test_a_user_acts_as_themself_only(users: dict[str, User]) -> None:
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    post(as_user("bob"), "chat-messages", {"message": "hi", "sender": "alice"}, chat_id=chat_id)
    [pending] = chats.fetch_pending(users["alice"])
    assert [m.sender for m in pending.messages] == ids(users, "bob")  # not as alice


def test_a_non_member_learns_nothing_not_even_that_the_chat_exists(
    users: dict[str, User],
) -> None:
    chat_id = chats.create(users["alice"], [users["bob"]], "secret")
    mallory = as_user("mallory")
    for other in (chat_id, 42):  # a chat mallory is not in, and one that does not exist
        for response in (
            get(mallory, "chat-messages", chat_id=other),
            get(mallory, "chat", chat_id=other),
            post(mallory, "chat-messages", {"message": "let me in"}, chat_id=other),
            post(mallory, "chat-join", chat_id=other),
            post(mallory, "chat-leave", chat_id=other),
        ):
            assert (response.status_code, response.json()) == (
                404,
                {"error": "No such chat among yours."},
            )
    assert post(mallory, "chat-pending").json() == {"chats": []}
    assert chats.members(chat_id) == ids(users, "alice", "bob")


def test_anyone_may_join_a_public_chat(users: dict[str, User]) -> None:
    chat_id = chats.create(users["alice"], [], "welcome", public=True)
    chats.send(chat_id, users["alice"], "before carol")
    joined = post(as_user("carol"), "chat-join", chat_id=chat_id)
    assert joined.json() == {"id": chat_id, "members": ["alice", "carol"]}
    chats.send(chat_id, users["alice"], "after carol")
    history = get(as_user("carol"), "chat-messages", chat_id=chat_id).json()["messages"]
    assert [m["message"] for m in history] == ["after carol"]  # nothing from before the join
    [pending] = chats.fetch_pending(users["carol"])
    assert [m.message for m in pending.messages] == ["after carol"]


def test_a_member_may_join_their_invite_only_chat_again(users: dict[str, User]) -> None:
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    assert post(as_user("bob"), "chat-join", chat_id=chat_id).status_code == 200


def test_unknown_chats_are_404(users: dict[str, User]) -> None:
    alice = as_user("alice")
    for response in (
        get(alice, "chat", chat_id=42),
        get(alice, "chat-messages", chat_id=42),
        post(alice, "chat-messages", {"message": "hi"}, chat_id=42),
        post(alice, "chat-join", chat_id=42),
        post(alice, "chat-leave", chat_id=42),
    ):
        assert (response.status_code, response.json()) == (
            404,
            {"error": "No such chat among yours."},
        )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"recipients": ["bob", "nobody"], "message": "hi"}, "recipients"),
        ({"recipients": [], "message": "hi"}, "recipients"),
        ({"recipients": ["alice"], "message": "hi"}, "recipients"),
        ({"message": "hi"}, "recipients"),
        ({"recipients": "bob", "message": "hi"}, "recipients"),
        ({"recipients": [7], "message": "hi"}, "recipients"),
        ({"recipients": [f"u{n}" for n in range(101)], "message": "hi"}, "recipients"),
        ({"recipients": ["bob"]}, "message"),
        ({"recipients": ["bob"], "message": "   "}, "message"),
        ({"recipients": ["bob"], "message": "hi", "public": "yes"}, "public"),
        (["bob"], "body"),
    ],
)
def test_bad_chats_are_400(body: Any, field: str, users: dict[str, User]) -> None:
    response = post(as_user("alice"), "chats", body)
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert chats.chats_of(users["alice"]) == []


def test_bad_requests_are_400(users: dict[str, User]) -> None:
    alice = as_user("alice")
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    url = reverse("redis_components:chat-messages", kwargs={"chat_id": chat_id})
    not_json = alice.post(url, "message=hi", content_type="application/x-www-form-urlencoded")
    assert (not_json.status_code, not_json.json()["field"]) == (400, "body")
    for response, field in (
        (post(alice, "chat-messages", {"message": "x" * 4001}, chat_id=chat_id), "message"),
        (post(alice, "chat-messages", {"message": 5}, chat_id=chat_id), "message"),
        (get(alice, "chat-messages", {"before": "x"}, chat_id=chat_id), "before"),
        (get(alice, "chat-messages", {"limit": "0"}, chat_id=chat_id), "limit"),
        (post(alice, "chat-messages", {"message": "hi"}, chat_id=0), "chat_id"),
        (post(alice, "chat-pending", {"wait": 31}), "wait"),
        (post(alice, "chat-pending", {"wait": "5"}), "wait"),
        (post(alice, "chat-pending", {"wait": True}), "wait"),
    ):
        assert (response.status_code, response.json()["field"]) == (400, field)
    assert [m.message for m in chats.history(chat_id, users["alice"])] == ["hello"]


def test_anonymous_requests_are_401(users: dict[str, User]) -> None:
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    anonymous = Client()
    for response in (
        get(anonymous, "chats"),
        get(anonymous, "chat-messages", chat_id=chat_id),
        post(anonymous, "chat-messages", {"message": "hi"}, chat_id=chat_id),
        post(anonymous, "chat-pending"),
    ):
        assert (response.status_code, response.json()) == (401, {"error": "Sign in first."})


def test_posts_need_the_csrf_token(users: dict[str, User]) -> None:
    alice = as_user("alice", csrf=True)
    body = {"recipients": ["bob"], "message": "hello"}
    assert post(alice, "chats", body).status_code == 403
    assert chats.chats_of(users["alice"]) == []
    token = "0123456789abcdefghijABCDEFGHIJxy"  # a CSRF secret: 32 letters and digits
    alice.cookies["csrftoken"] = token
    url = reverse("redis_components:chats")
    response = alice.post(url, json.dumps(body), "application/json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201


def test_wrong_methods_are_405_json(users: dict[str, User]) -> None:
    alice = as_user("alice")
    response = get(alice, "chat-pending")
    assert response.status_code == 405
    assert response["Allow"] == "POST, OPTIONS"
    assert "error" in response.json()
    assert alice.delete(reverse("redis_components:chats")).status_code == 405


def test_an_unreachable_redis_is_503(users: dict[str, User]) -> None:
    cache = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": NOT_STARTED}
    with override_settings(CACHES={"default": cache}):
        response = get(as_user("alice"), "chats")
    assert response.status_code == 503
    assert "error" in response.json()


def test_a_huge_wait_is_a_400_not_a_500(users: dict[str, User]) -> None:
    body = '{"wait": 1' + "0" * 400 + "}"
    response = as_user("alice").post(
        reverse("redis_components:chat-pending"), body, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["field"] == "wait"


def test_bodies_that_cannot_be_read_are_4xx_json(users: dict[str, User]) -> None:
    alice = as_user("alice")
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    deep_list, deep_object = "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000
    urls = {  # each with a body whose own field is nested deeply
        reverse("redis_components:chats"): f'{{"recipients": {deep_list}, "message": "hi"}}',
        reverse("redis_components:chat-messages", kwargs={"chat_id": chat_id}): (
            f'{{"message": {deep_object}}}'
        ),
        reverse("redis_components:chat-pending"): f'{{"wait": {deep_list}}}',
    }
    for url, own in urls.items():
        for body in (deep_list, b"\xff\xfe{}", own):
            response = alice.post(url, body, content_type="application/json")
            assert response.status_code == 400, (url, str(body)[:20])
            assert response.json()["error"]
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000):
        response = alice.post(url, json.dumps({"message": "x" * 2000}), "application/json")
    assert response.status_code == 413
    assert "too large" in response.json()["error"]
    assert chats.chats_of(users["alice"]) == [chat_id]
    assert [m.message for m in chats.history(chat_id, users["alice"])] == ["hello"]


def test_a_huge_bad_parameter_is_not_repeated_in_full(users: dict[str, User]) -> None:
    chat_id = chats.create(users["alice"], [], "hello")
    response = get(as_user("alice"), "chat-messages", {"limit": "9" * 100_000}, chat_id=chat_id)
    assert response.status_code == 400
    assert len(response.content) < 300


def test_unknown_routes_and_csrf_failures_answer_json(users: dict[str, User]) -> None:
    alice = as_user("alice", csrf=True)
    response = alice.get("/rc/no/such/thing/")
    assert (response.status_code, response.json()) == (404, {"error": "No such endpoint."})
    refused = post(alice, "chats", {"recipients": [], "message": "hi"})
    assert refused.status_code == 403
    assert refused.json()["error"].startswith("CSRF check failed")
    page = alice.post(reverse("redis_components:chats"), {"message": "hi"})  # a form: HTML
    assert page.status_code == 403
    assert page["Content-Type"].startswith("text/html")


def test_too_many_new_chats_are_429_with_retry_after(users: dict[str, User]) -> None:
    alice = as_user("alice")
    with override_settings(REDIS_COMPONENTS={"CHAT_CREATES_PER_MINUTE": 1}):
        assert post(alice, "chats", {"recipients": ["bob"], "message": "hi"}).status_code == 201
        refused = post(alice, "chats", {"recipients": ["bob"], "message": "again"})
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert refused.json()["error"].startswith("You started too many chats")
    assert len(chats.chats_of(users["bob"])) == 1


def test_following_a_chat_and_its_counts_through_the_views(users: dict[str, User]) -> None:
    alice, bob = as_user("alice"), as_user("bob")
    chat_id = chats.create(users["alice"], [users["bob"]], "hello")
    chats.send(chat_id, users["alice"], "again")
    after = get(bob, "chat-messages", {"after": "1", "wait": "1"}, chat_id=chat_id).json()
    assert [m["message"] for m in after["messages"]] == ["again"]
    listed = get(bob, "chats", {"wait": "0.1"}).json()
    assert listed["chats"] == [{"id": chat_id, "unread": 2}]
    assert post(bob, "chat-read", chat_id=chat_id).json() == {"read": 2}
    # Counts that differ from those shown answer at once, with a new mark.
    started = time.monotonic()
    again = get(bob, "chats", {"wait": "5", "shown": listed["mark"]}).json()
    assert again["chats"] == [{"id": chat_id, "unread": 0}]
    assert again["mark"] != listed["mark"]
    assert time.monotonic() - started < 2
    assert post(as_user("mallory"), "chat-read", chat_id=chat_id).status_code == 404
    for query in ({"wait": "31"}, {"wait": "nan"}, {"wait": "x" * 10_000}):
        response = get(alice, "chats", query)
        assert (response.status_code, response.json()["field"]) == (400, "wait")
        assert len(response.content) < 300
    bad = get(alice, "chat-messages", {"after": "-1"}, chat_id=chat_id)
    assert (bad.status_code, bad.json()["field"]) == (400, "after")
