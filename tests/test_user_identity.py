"""One rule for identifying a user, the primary key, and the migration of 0.1's data."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis
from django.contrib.auth.models import AnonymousUser, User
from django.core.management import CommandError, call_command, load_command_class
from django.test import Client, override_settings
from django.urls import reverse

from redis_components import GroupChat, InvalidInput, Mailbox, RecentContacts
from redis_components.checks import check_settings
from redis_components.keys import user_id

pytestmark = pytest.mark.django_db

chats = GroupChat(creates_per_minute=0, accounts=True)  # 0.1 took any name: accounts do


@pytest.fixture
def users(django_user_model: type[User]) -> dict[str, User]:
    return {
        name: django_user_model.objects.create_user(username=name)
        for name in ("alice", "bob", "carol")
    }


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post(client: Client, name: str, body: Any = None, **kwargs: Any) -> Any:
    data = "" if body is None else json.dumps(body)
    url = reverse(f"redis_components:{name}", kwargs=kwargs)
    return client.post(url, data, content_type="application/json")


def get(client: Client, name: str, **kwargs: Any) -> Any:
    return client.get(reverse(f"redis_components:{name}", kwargs=kwargs))


def snapshot(r: redis.Redis) -> dict[bytes, bytes]:
    return {key: r.dump(key) for key in r.keys("*")}


def migrate(*arguments: str) -> str:
    out = io.StringIO()
    call_command("rc_migrate_users", *arguments, stdout=out)
    return out.getvalue()


# The rule


def test_a_user_is_their_primary_key(users: dict[str, User]) -> None:
    alice = users["alice"]
    assert user_id(alice) == str(alice.pk)
    assert user_id(alice.pk) == str(alice.pk)
    assert user_id(str(alice.pk)) == str(alice.pk)
    assert user_id("any id at all") == "any id at all"  # a str is taken as the pk


@pytest.mark.parametrize(
    "bad",
    [None, True, False, 1.5, b"7", "", "tab\x07", User(username="unsaved"), AnonymousUser()],
)
def test_anything_else_is_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(InvalidInput) as raised:
        user_id(bad, "recipients")
    assert raised.value.field == "recipients"


def test_every_service_takes_users_by_the_same_rule(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    chat_id = chats.create(alice, [bob.pk], "hello")
    assert chats.chats_of(str(bob.pk)) == [chat_id] == chats.chats_of(bob)
    assert chats.members(chat_id) == sorted([str(alice.pk), str(bob.pk)])
    Mailbox().send(bob, {"text": "hi"})
    assert Mailbox().fetch(bob.pk) == [{"text": "hi"}]
    RecentContacts().add(alice, "bob")
    assert RecentContacts().all(str(alice.pk)) == ["bob"]
    for call, field in (
        (lambda: chats.create(User(username="new"), [bob], "hi"), "sender"),
        (lambda: chats.create(alice, [None], "hi"), "recipients"),
        (lambda: chats.send(chat_id, AnonymousUser(), "hi"), "sender"),
        (lambda: chats.fetch_pending(True), "user"),
        (lambda: Mailbox().send(None, {}), "recipient"),
        (lambda: RecentContacts().add(AnonymousUser(), "x"), "user"),
    ):
        with pytest.raises(InvalidInput) as raised:
            call()
        assert raised.value.field == field


def test_a_renamed_user_keeps_contacts_chats_and_mailbox(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    RecentContacts().add(alice, "bob")
    created = post(client_of(alice), "chats", {"recipients": ["bob"], "message": "hello"})
    chat_id = created.json()["id"]
    Mailbox().send(alice, {"text": "your lamp sold"})
    alice.username = "alicia"
    alice.save()
    alicia = User.objects.get(pk=alice.pk)
    assert RecentContacts().all(alicia) == ["bob"]
    assert chats.chats_of(alicia) == [chat_id]
    assert Mailbox().fetch(alicia) == [{"text": "your lamp sold"}]
    detail = get(client_of(bob), "chat", chat_id=chat_id).json()
    assert detail["members"] == ["alicia", "bob"]  # the new name, at once
    pending = post(client_of(bob), "chat-pending").json()["chats"]
    assert [m["sender"] for m in pending[0]["messages"]] == ["alicia"]


# The views' JSON


def test_the_views_still_speak_usernames(users: dict[str, User]) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    created = post(client_of(alice), "chats", {"recipients": ["bob"], "message": "hello"})
    assert created.status_code == 201
    chat_id = created.json()["id"]
    assert created.json()["members"] == ["alice", "bob"]
    post(client_of(bob), "chat-messages", {"message": "hi"}, chat_id=chat_id)
    history = get(client_of(bob), "chat-messages", chat_id=chat_id).json()["messages"]
    assert [(m["sender"], m["message"]) for m in history] == [("alice", "hello"), ("bob", "hi")]
    pending = post(client_of(alice), "chat-pending").json()["chats"]
    assert [m["sender"] for m in pending[0]["messages"]] == ["bob"]  # her own she has seen
    public = chats.create(alice, [], "welcome", public=True)
    assert post(client_of(carol), "chat-join", chat_id=public).json()["members"] == [
        "alice",
        "carol",
    ]
    unknown = post(client_of(alice), "chats", {"recipients": ["nobody"], "message": "hi"})
    assert (unknown.status_code, unknown.json()["field"]) == (400, "recipients")


def test_a_deleted_user_shows_as_unknown(users: dict[str, User]) -> None:
    alice, bob = users["alice"], users["bob"]
    chat_id = chats.create(alice, [bob], "hello")
    gone = bob.pk
    bob.delete()
    detail = get(client_of(alice), "chat", chat_id=chat_id).json()
    assert detail["members"] == [f"(unknown user {gone})", "alice"]


def test_the_username_setting_is_deprecated_and_works_as_in_0_1(users: dict[str, User]) -> None:
    with override_settings(REDIS_COMPONENTS={"MESSAGING_USER_KEY": "username"}):
        [warning] = check_settings()
        assert warning.id == "redis_components.W002"
        assert "0.3" in warning.msg
        assert "rc_migrate_users" in (warning.hint or "")
        with pytest.warns(DeprecationWarning, match="0.3"):
            created = post(
                client_of(users["alice"]), "chats", {"recipients": ["bob"], "message": "hi"}
            )
        assert created.json()["members"] == ["alice", "bob"]
        assert chats.members(created.json()["id"]) == ["alice", "bob"]  # keyed by username
        with pytest.raises(CommandError, match="MESSAGING_USER_KEY"):
            migrate()
    with override_settings(REDIS_COMPONENTS={"MESSAGING_USER_KEY": "email"}):
        assert [error.id for error in check_settings()] == ["redis_components.E017"]


# The migration of 0.1's data


def write_0_1_data(users: dict[str, User]) -> dict[str, str]:
    """What 0.1 wrote: the library's own API called with usernames (as its views did)."""
    chat_id = chats.create("alice", ["bob"], "hello")
    chats.send(chat_id, "bob", "hi alice")
    chats.fetch_pending("bob")  # bob has read both
    public = chats.create("alice", [], "welcome", public=True)
    chats.send(public, "alice", "before carol")
    chats.join(public, "carol")  # carol's history starts here
    chats.send(public, "carol", "hello all")
    left = chats.create("bob", ["carol"], "bye")
    chats.leave(left, "bob")  # bob's message stays, sent by a former member
    Mailbox().send("alice", {"text": "first"})
    Mailbox().send("alice", {"text": "second"})
    return {"chat": chat_id, "public": public, "left": left}


def test_the_migration_moves_0_1_data_to_the_pks(
    users: dict[str, User], r: redis.Redis, redis_mode: str
) -> None:
    alice, bob, carol = users["alice"], users["bob"], users["carol"]
    made = write_0_1_data(users)
    Mailbox().send(alice, {"text": "third"})  # sent after the upgrade, to the pk
    out = migrate()
    assert "Moved the messaging data of 3 user(s)" in out
    assert "2 mailbox message(s)" in out  # the third was sent to the pk

    assert Mailbox().fetch(alice) == [{"text": "first"}, {"text": "second"}, {"text": "third"}]
    assert chats.chats_of(alice) == [made["chat"], made["public"]]
    assert chats.chats_of(bob) == [made["chat"]]
    assert chats.chats_of(carol) == [made["public"], made["left"]]
    listed = client_of(bob).get(reverse("redis_components:chats")).json()["chats"]
    assert listed == [{"id": made["chat"], "unread": 0}]  # his place is kept
    history = get(client_of(carol), "chat-messages", chat_id=made["public"]).json()["messages"]
    assert [m["message"] for m in history] == ["hello all"]  # still from her join on
    pending = post(client_of(alice), "chat-pending").json()["chats"]
    senders = {c["id"]: [m["sender"] for m in c["messages"]] for c in pending}
    assert senders == {made["chat"]: ["bob"], made["public"]: ["carol"]}  # hers she has seen
    left = get(client_of(carol), "chat-messages", chat_id=made["left"]).json()["messages"]
    assert [m["sender"] for m in left] == ["bob"]
    sent = post(client_of(alice), "chat-messages", {"message": "ok"}, chat_id=made["chat"])
    assert sent.status_code == 201
    post(client_of(bob), "chat-leave", chat_id=made["chat"])
    assert chats.chats_of(bob) == []  # his index entry left with him
    for name in ("alice", "bob", "carol"):
        assert r.keys(f"*{{{name}}}*") == []
        for chat_id in made.values():
            assert r.hget(f"rc:chat:{{{chat_id}}}:joins", name) is None


def test_the_migration_merges_a_chat_joined_again_after_the_upgrade(
    users: dict[str, User],
) -> None:
    alice, carol = users["alice"], users["carol"]
    public = chats.create("alice", [], "welcome", public=True)
    chats.join(public, "carol")
    post(client_of(carol), "chat-join", chat_id=public)  # the upgraded site: by pk
    chats.send(public, "alice", "read by carol")  # alice is not migrated yet
    post(client_of(carol), "chat-pending")
    migrate()
    assert chats.members(public) == sorted([str(alice.pk), str(carol.pk)])
    # One member, at the further place of the two: nothing is delivered twice.
    assert post(client_of(carol), "chat-pending").json() == {"chats": []}
    chats.send(public, alice, "new")
    assert post(client_of(carol), "chat-read", chat_id=public).json() == {"read": 1}
    post(client_of(carol), "chat-leave", chat_id=public)
    assert chats.chats_of(carol) == []


def test_the_migration_is_idempotent(users: dict[str, User], r: redis.Redis) -> None:
    write_0_1_data(users)
    migrate()
    before = snapshot(r)
    out = migrate()
    assert "Moved the messaging data of 0 user(s)" in out
    assert snapshot(r) == before


def test_a_dry_run_changes_nothing(users: dict[str, User], r: redis.Redis) -> None:
    write_0_1_data(users)
    before = snapshot(r)
    out = migrate("--dry-run")
    assert out.startswith("Would move the messaging data of 3 user(s)")
    assert "2 mailbox message(s)" in out
    assert "Nothing was changed" in out
    assert snapshot(r) == before


def test_an_ambiguous_username_is_skipped_and_said_so(
    users: dict[str, User], r: redis.Redis
) -> None:
    bob = users["bob"]
    # Eve's username is bob's pk: the keys named so may be eve's (0.1) or bob's (0.2).
    eve = User.objects.create_user(username=str(bob.pk))
    Mailbox().send(eve.username, {"text": "for eve, in 0.1"})
    Mailbox().send("bob", {"text": "for bob, in 0.1"})
    Mailbox().send("alice", {"text": "for alice, in 0.1"})
    out = migrate()
    assert f"Skipped {eve.username!r} (pk {eve.pk})" in out
    assert f"Skipped 'bob' (pk {bob.pk})" in out
    assert "skipped 2 ambiguous user(s)" in out
    assert Mailbox().fetch(users["alice"]) == [{"text": "for alice, in 0.1"}]
    assert Mailbox().fetch("bob") == [{"text": "for bob, in 0.1"}]  # left where it was
    assert Mailbox().fetch(bob) == [{"text": "for eve, in 0.1"}]


def test_the_command_explains_itself() -> None:
    parser = load_command_class("redis_components", "rc_migrate_users").create_parser(
        "manage.py", "rc_migrate_users"
    )
    text = " ".join(parser.format_help().split())
    for words in ("0.1", "primary key", "--dry-run", "ambiguous", "again changes nothing"):
        assert words in text
