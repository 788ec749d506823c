from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.test import override_settings

from conftest import single_server_only
from redis_components import ChatSummary, GroupChat, InvalidInput, Mailbox, Pending, scripts
from redis_components.connection import Steps, get_client, run_steps
from redis_components.embedded import EmbeddedRedis
from redis_components.exceptions import ChatLimitReached, ChatNotFound, MessagingError, NotAMember
from redis_components.messaging import (
    Message,
    MessageList,
    UnreadableMessage,
    UnreadCounts,
    _chat_keys,
)
from tests.processes import run_processes

# Tests create many chats (the limit has its own test), of accounts with readable names:
# users are checked against the user model (see "Users"), and otherwise alike.
chats = GroupChat(creates_per_minute=0, accounts=True)


def snapshot(r: redis.Redis) -> dict[bytes, bytes]:
    """Every key and its serialized value: to show that nothing was written."""
    return {key: r.dump(key) for key in r.scan_iter()}


def ids(pending: list[Pending]) -> dict[str, list[int]]:
    return {chat.chat_id: [message.id for message in chat.messages] for chat in pending}


def chat_keys(r: redis.Redis, chat_id: str) -> list[bytes]:
    return sorted(r.scan_iter(match=f"rc:chat:{{{chat_id}}}*"))


# The book's scenario


def test_the_books_scenario(redis_mode: str, r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob", "carol"], "hello")
    assert chats.members(chat_id) == ["alice", "bob", "carol"]
    assert chats.send(chat_id, "bob", "hi all") == 2

    [pending] = chats.fetch_pending("carol")
    assert pending.chat_id == chat_id
    messages = pending.messages
    assert [(m.id, m.sender, m.message) for m in messages] == [
        (1, "alice", "hello"),
        (2, "bob", "hi all"),
    ]
    assert all(isinstance(m.ts, (int, float)) for m in messages)
    assert chats.fetch_pending("carol") == []  # nothing twice
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 2  # bob has not read hello yet

    assert ids(chats.fetch_pending("alice")) == {chat_id: [2]}  # her own she has seen
    assert ids(chats.fetch_pending("bob")) == {chat_id: [1]}
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 0  # seen by all: deleted

    chats.send(chat_id, "alice", "before dave")
    chats.join(chat_id, "dave")
    chats.send(chat_id, "carol", "welcome dave")
    assert ids(chats.fetch_pending("dave")) == {chat_id: [4]}
    assert ids(chats.fetch_pending("bob")) == {chat_id: [3, 4]}

    for user in ("alice", "bob", "carol"):
        chats.leave(chat_id, user)
        assert chat_keys(r, chat_id)  # dave is still in it
        assert chats.chats_of(user) == []
    chats.leave(chat_id, "dave")
    assert chat_keys(r, chat_id) == []
    for user in ("alice", "bob", "carol", "dave"):
        assert not r.exists(f"rc:chat-index:{{{user}}}")
    with pytest.raises(ChatNotFound):
        chats.members(chat_id)


def test_every_key_of_a_chat_shares_its_hash_tag(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    assert [key.decode() for key in chat_keys(r, chat_id)] == [
        f"rc:chat:{{{chat_id}}}:{part}" for part in ("joins", "members", "messages", "meta")
    ]
    assert sorted(key.decode() for key in r.scan_iter(match="rc:chat-index:{alice}*")) == [
        "rc:chat-index:{alice}",
        "rc:chat-index:{alice}:versions",
    ]


def test_unread_counts_mark_nothing_seen(redis_mode: str) -> None:
    first = chats.create("alice", ["carol"], "one")
    second = chats.create("bob", ["carol"], "two")
    chats.send(second, "bob", "three")
    assert chats.unread_counts("carol").per_chat == {first: 1, second: 2}
    assert chats.unread_counts("carol").per_chat == {first: 1, second: 2}
    assert ids(chats.fetch_pending("carol")) == {first: [1], second: [1, 2]}
    assert chats.unread_counts("carol").per_chat == {first: 0, second: 0}
    assert chats.fetch_pending("carol") == []


def test_chats_are_listed_in_id_order() -> None:
    created = [chats.create("alice", ["bob"], f"chat {n}") for n in range(12)]
    assert chats.chats_of("alice") == created
    assert [pending.chat_id for pending in chats.fetch_pending("bob")] == created
    assert list(chats.unread_counts("alice").per_chat) == created


def test_a_member_gets_the_others_messages_in_order() -> None:
    chat_id = chats.create("alice", ["bob", "carol"], "hello")
    chats.send(chat_id, "bob", "one")
    chats.send(chat_id, "alice", "two")
    [pending] = chats.fetch_pending("carol")
    assert [(m.sender, m.message) for m in pending.messages] == [
        ("alice", "hello"),
        ("bob", "one"),
        ("alice", "two"),
    ]
    [pending] = chats.fetch_pending("bob")  # not his own, which he has seen
    assert [(m.sender, m.message) for m in pending.messages] == [
        ("alice", "hello"),
        ("alice", "two"),
    ]


def test_unicode_and_line_breaks_survive(redis_mode: str) -> None:
    text = 'Grüße {from} "ü" \\ / 🎉\nline two\ttab'
    chat_id = chats.create("zoë {x}", ["李"], text)
    [pending] = chats.fetch_pending("李")
    [message] = pending.messages
    assert message.message == text
    assert message.sender == "zoë {x}"
    assert chats.members(chat_id) == sorted(["zoë {x}", "李"])


def test_pending_holds_the_chat_its_messages_and_what_was_missed() -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    [pending] = chats.fetch_pending("bob")
    assert pending == Pending(chat_id, MessageList((pending.messages[0],)))
    assert isinstance(pending.messages, MessageList)
    assert pending.missed == pending.messages.missed == 0


# Membership


def test_only_members_send_and_read(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    before = snapshot(r)
    with pytest.raises(NotAMember):
        chats.send(chat_id, "mallory", "let me in")
    with pytest.raises(NotAMember):
        chats.history(chat_id, "mallory")
    with pytest.raises(NotAMember):
        chats.leave(chat_id, "mallory")
    assert chats.fetch_pending("mallory") == []
    assert snapshot(r) == before


def test_an_unknown_chat_changes_nothing(r: redis.Redis) -> None:
    chats.create("alice", ["bob"], "hello")
    before = snapshot(r)
    for call in (
        lambda: chats.send("99", "alice", "hi"),
        lambda: chats.history("99", "alice"),
        lambda: chats.leave("99", "alice"),
        lambda: chats.members("99"),
        lambda: chats.is_public("99"),
        lambda: chats.join("99", "alice"),
    ):
        with pytest.raises(ChatNotFound, match="no chat 99"):
            call()
    assert snapshot(r) == before  # not even alice's join counter moved


def test_joining_twice_keeps_the_members_place() -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    chats.send(chat_id, "alice", "two")
    chats.join(chat_id, "bob")
    assert ids(chats.fetch_pending("bob")) == {chat_id: [1, 2]}


def test_a_reset_id_counter_cannot_merge_two_chats(r: redis.Redis) -> None:
    chats.create("alice", ["bob"], "first")
    r.delete("rc:chat:{next-id}")
    with pytest.raises(MessagingError, match="exists already"):
        chats.create("carol", ["dave"], "second")
    assert chats.members("1") == ["alice", "bob"]
    assert not r.exists("rc:chat-index:{carol}")
    assert not r.exists("rc:chat-index:{dave}")


def test_a_public_flag_is_kept() -> None:
    assert chats.is_public(chats.create("alice", [], "open", public=True))
    assert not chats.is_public(chats.create("alice", [], "closed"))


def test_forget_deletes_the_join_counter_of_a_user_in_no_chat(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    assert chats.forget("bob") is False  # still in a chat: the counter stays
    assert r.exists("rc:chat-index:{bob}:versions")
    chats.leave(chat_id, "bob")
    assert chats.forget("bob") is True
    assert not r.keys("rc:chat-index:{bob}*")
    assert chats.forget("nobody") is True
    with pytest.raises(InvalidInput):
        chats.forget("")


def test_leaving_cleans_what_everyone_else_has_seen(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob", "carol"], "hello")
    chats.fetch_pending("alice")
    chats.fetch_pending("bob")
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 1
    chats.leave(chat_id, "carol")  # the only one who had not read it
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 0


# The user's index and the chat live in different slots: crashes and races


def test_a_leave_interrupted_before_the_index_is_cleaned_heals(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    chats._run(chat_id, "leave", "bob")(get_client())  # the chat step only, as if crashed
    assert r.hexists("rc:chat-index:{bob}", chat_id)
    assert chats.chats_of("bob") == []
    assert not r.hexists("rc:chat-index:{bob}", chat_id)  # the stale entry is gone


def test_a_join_on_its_way_keeps_its_index_entry(r: redis.Redis) -> None:
    client = get_client()
    chat_id = chats.create("alice", [], "hello")
    [version] = run_steps(chats._add_to_indexes(chat_id, ["dave"]), client)  # the index step only
    assert chats.chats_of("dave") == []
    assert chats.fetch_pending("dave") == []
    assert r.hexists("rc:chat-index:{dave}", chat_id)  # not mistaken for a stale entry
    chats._run(chat_id, "join", "dave", version)(client)  # the chat step arrives
    assert chats.chats_of("dave") == [chat_id]


def test_a_join_that_lost_the_race_to_a_leave_cannot_slip_in(r: redis.Redis) -> None:
    client = get_client()
    chat_id = chats.create("alice", [], "hello")
    [older] = run_steps(chats._add_to_indexes(chat_id, ["bob"]), client)
    chats.join(chat_id, "bob")  # a newer join, applied first
    chats.leave(chat_id, "bob")
    assert not r.hexists("rc:chat-index:{bob}", chat_id)
    chats._run(chat_id, "join", "bob", older)(client)  # the older join's chat step, late
    assert chats.members(chat_id) == ["alice"]
    assert chats.chats_of("bob") == []


# Round trips


class CountingConnection(redis.Connection):
    """Counts the requests written: one per command, one per pipeline."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


@contextmanager
def round_trips(redis_server: EmbeddedRedis, user: str) -> Iterator[Callable[[], int]]:
    """The requests the app writes from here on (one per command or pipeline), once its
    connection is open and its scripts loaded."""
    # Its own URL: django-redis keeps one connection pool per URL.
    url = f"{redis_server.url}?client_name=rc-counting"
    options = {"CONNECTION_POOL_KWARGS": {"connection_class": CountingConnection}}
    cache = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url, "OPTIONS": options}
    with override_settings(CACHES={"default": cache}):
        chats.unread_counts(user)  # connects and loads the scripts
        before = CountingConnection.sent
        yield lambda: CountingConnection.sent - before


@single_server_only
@pytest.mark.parametrize("chat_count", [1, 10, 40])
def test_fetch_pending_takes_two_round_trips_for_any_number_of_chats(
    chat_count: int, redis_server: EmbeddedRedis
) -> None:
    for n in range(chat_count):
        chats.create("alice", ["carol"], f"chat {n}")
    with round_trips(redis_server, "carol") as sent:
        pending = chats.fetch_pending("carol")
        assert sent() == 2
    assert len(pending) == chat_count


@single_server_only
def test_the_chat_list_takes_two_round_trips_for_any_number_of_chats(
    redis_server: EmbeddedRedis,
) -> None:
    created = [chats.create("alice", ["carol", f"guest{n}"], f"chat {n}") for n in range(40)]
    chats.send(created[3], "alice", "again")
    with round_trips(redis_server, "carol") as sent:
        listed = chats.chat_list("carol")
        assert sent() == 2
    assert [chat.chat_id for chat in listed] == created
    assert listed[0] == ChatSummary(created[0], ["alice", "carol", "guest0"], 1)
    assert listed[3].unread == 2
    assert chats.chat_list("carol") == listed  # listing marks nothing seen
    assert chats.chat_list("nobody") == []


# Retention


def test_the_cap_bounds_a_chat_with_a_member_who_never_reads(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGES": 5}):
        chat_id = chats.create("alice", ["bob", "carol"], "hello")
        for n in range(20):
            chats.send(chat_id, "alice", f"message {n}")
            chats.fetch_pending("bob")
            assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") <= 5
        [pending] = chats.fetch_pending("carol")
        assert [m.id for m in pending.messages] == [17, 18, 19, 20, 21]
        assert pending.missed == 16
        assert chats.fetch_pending("carol") == []
        chats.fetch_pending("alice")
        assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 0


def test_a_member_who_missed_everything_is_told(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGES": 2}):
        chat_id = chats.create("alice", ["carol"], "hello")
        for n in range(3):
            chats.send(chat_id, "alice", f"message {n}")
        chats.fetch_pending("alice")
        r.zremrangebyrank(f"rc:chat:{{{chat_id}}}:messages", 0, -1)  # as if all aged out
        [pending] = chats.fetch_pending("carol")
        assert (pending.chat_id, list(pending.messages), pending.missed) == (chat_id, [], 4)
        assert chats.fetch_pending("carol") == []


def test_the_age_limit_drops_old_messages(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_AGE": 0.3}):
        chat_id = chats.create("alice", ["carol"], "old")
        time.sleep(0.4)
        assert chats.unread_counts("carol").per_chat == {chat_id: 0}
        chats.send(chat_id, "alice", "new")
        assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 1
        [pending] = chats.fetch_pending("carol")
        assert [m.message for m in pending.messages] == ["new"]
        assert pending.missed == 1


# History


def test_history_pages_back_without_marking_anything_seen(redis_mode: str) -> None:
    chat_id = chats.create("alice", ["bob"], "m1")
    for n in range(2, 7):
        chats.send(chat_id, "alice", f"m{n}")
    assert [m.id for m in chats.history(chat_id, "bob", limit=2)] == [5, 6]
    assert [m.id for m in chats.history(chat_id, "bob", before=5, limit=2)] == [3, 4]
    assert [m.id for m in chats.history(chat_id, "bob", before=2)] == [1]
    assert chats.history(chat_id, "bob", before=1) == []
    assert chats.unread_counts("bob").per_chat == {chat_id: 6}


# Bad input


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: chats.create("", ["bob"], "hi"), "sender"),
        (lambda: chats.create("alice", "bob", "hi"), "recipients"),
        (lambda: chats.create("alice", ["bo\x00b"], "hi"), "recipients"),
        (lambda: chats.create("alice", [None], "hi"), "recipients"),
        (lambda: chats.create("alice", [True], "hi"), "recipients"),
        (lambda: chats.create("alice", ["bob"], ""), "message"),
        (lambda: chats.create("alice", ["bob"], " \n\t "), "message"),
        (lambda: chats.create("alice", ["bob"], None), "message"),
        (lambda: chats.send("1", "alice", "x" * 4001), "message"),
        (lambda: chats.send("1", "alice", "bell\x07"), "message"),
        (lambda: chats.send("1", "alice", "half \ud800 a pair"), "message"),
        (lambda: chats.send("abc", "alice", "hi"), "chat_id"),
        (lambda: chats.send("01", "alice", "hi"), "chat_id"),
        (lambda: chats.send("0", "alice", "hi"), "chat_id"),
        (lambda: chats.send(1, "alice", "hi"), "chat_id"),
        (lambda: chats.send("1", "x" * 1001, "hi"), "sender"),
        (lambda: chats.fetch_pending(""), "user"),
        (lambda: chats.fetch_pending("alice", wait=-1), "wait"),
        (lambda: chats.fetch_pending("alice", wait=float("nan")), "wait"),
        (lambda: chats.fetch_pending("alice", wait=True), "wait"),
        (lambda: chats.unread_counts(None), "user"),
        (lambda: chats.history("1", "alice", before=0), "before"),
        (lambda: chats.history("1", "alice", limit=0), "limit"),
        (lambda: chats.history("1", "alice", limit=1001), "limit"),
        (lambda: chats.history("1", "alice", limit=True), "limit"),
        (lambda: chats.join("1", ""), "user"),
        (lambda: chats.leave("x", "alice"), "chat_id"),
        (lambda: chats.members("1; DROP"), "chat_id"),
        (lambda: Mailbox().send("", {}), "recipient"),
        (lambda: Mailbox().send("bob", {1, 2}), "message"),
        (lambda: Mailbox().send("bob", float("inf")), "message"),
        (lambda: Mailbox().fetch("\x00"), "user"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(call: Any, field: str, r: redis.Redis) -> None:
    chats.create("alice", ["bob"], "hello")
    before = snapshot(r)
    with pytest.raises(InvalidInput) as raised:
        call()
    assert raised.value.field == field
    assert snapshot(r) == before


@pytest.mark.parametrize(
    ("chat_id", "said"),
    [
        ("9" * 23, "chat_id: has 23 digits: no chat id has over 18"),
        ("042", "chat_id: must be a chat id: a string of digits such as '42'"),
        ("x", "chat_id: must be a chat id: a string of digits such as '42'"),
    ],
)
def test_a_bad_chat_id_is_told_what_is_wrong_with_it(chat_id: str, said: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        chats.members(chat_id)
    assert str(raised.value) == said


def test_the_length_limit_follows_the_setting() -> None:
    chat_id = chats.create("alice", [], "hello")
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGE_LENGTH": 3}):
        assert chats.send(chat_id, "alice", "abc") == 2
        with pytest.raises(InvalidInput, match="at most 3 characters"):
            chats.send(chat_id, "alice", "abcd")


# Waiting for messages


def _when_subscribed(r: redis.Redis, channel: str, action: Any) -> threading.Thread:
    """Run ``action`` in a thread once someone listens on ``channel``."""

    def run() -> None:
        while not r.pubsub_numsub(channel)[0][1]:
            time.sleep(0.005)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


# The waits below are far longer than the test's timeout: only a wake-up can pass them.
@pytest.mark.timeout(60)
def test_a_waiting_fetch_wakes_for_a_new_message(redis_mode: str, r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["carol"], "hello")
    chats.fetch_pending("carol")
    channel = f"rc:chat:{{{chat_id}}}:messages"
    thread = _when_subscribed(r, channel, lambda: chats.send(chat_id, "alice", "wake up"))
    pending = chats.fetch_pending("carol", wait=600)
    thread.join()
    assert [m.message for chat in pending for m in chat.messages] == ["wake up"]


@pytest.mark.timeout(60)
def test_a_waiting_fetch_wakes_for_a_new_chat(redis_mode: str, r: redis.Redis) -> None:
    created: list[str] = []
    thread = _when_subscribed(
        r, "rc:chat-index:{carol}", lambda: created.append(chats.create("alice", ["carol"], "hi"))
    )
    pending = chats.fetch_pending("carol", wait=600)
    thread.join()
    assert ids(pending) == {created[0]: [1]}


@pytest.mark.timeout(60)
def test_a_waiting_fetch_wakes_for_a_chat_created_just_after_it_read_the_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created: list[str] = []
    reads: list[dict[str, int]] = []
    read_index = GroupChat._index

    def index_then_create(self: GroupChat, user: str) -> Steps[dict[str, int]]:
        reads.append((yield from read_index(self, user)))
        if len(reads) == 2:  # the waiting loop's first read: the chat comes right after it
            created.append(chats.create("alice", ["carol"], "hi"))
        return reads[-1]

    monkeypatch.setattr(GroupChat, "_index", index_then_create)
    pending = chats.fetch_pending("carol", wait=600)
    assert reads[1] == {}
    assert ids(pending) == {created[0]: [1]}


def test_a_waiting_fetch_returns_empty_when_the_time_is_up() -> None:
    chats.create("alice", ["carol"], "hello")
    chats.fetch_pending("carol")
    assert chats.fetch_pending("carol", wait=0.2) == []


# Concurrency, with real processes

SENDERS = 8
PER_SENDER = 1000


def _send_and_fetch(chat_id: str, index: int, out: Path) -> None:
    sender = f"sender{index}"
    received: list[dict[str, Any]] = []
    for n in range(PER_SENDER):
        chats.send(chat_id, sender, f"{index}:{n}")
        if n % 100 == 99:
            received += [m.as_dict() for chat in chats.fetch_pending(sender) for m in chat.messages]
    out.write_text(json.dumps(received))


def _read_until_all_sent(chat_id: str, member: str, out: Path) -> None:
    total = SENDERS * PER_SENDER + 1
    meta = f"rc:chat:{{{chat_id}}}:meta"
    received: list[dict[str, Any]] = []
    missed = 0
    while True:
        everything_sent = int(get_client().hget(meta, "last_id") or 0) == total
        pending = chats.fetch_pending(member)
        for chat in pending:
            received += [message.as_dict() for message in chat.messages]
            missed += chat.missed
        if everything_sent and not pending:
            break
    out.write_text(json.dumps({"received": received, "missed": missed}))


def test_concurrent_senders_and_readers_get_every_message_once_in_order(
    tmp_path: Path, r: redis.Redis
) -> None:
    total = SENDERS * PER_SENDER + 1
    senders = [f"sender{i}" for i in range(SENDERS)]
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGES": total}):
        chat_id = chats.create("reader", [*senders, "twin"], "hello")
        run_processes(
            lambda role, *args: role(*args),
            [(_send_and_fetch, chat_id, i, tmp_path / f"sender{i}.json") for i in range(SENDERS)]
            # "reader" fetches in one process, "twin" in two at once.
            + [(_read_until_all_sent, chat_id, "reader", tmp_path / "reader.json")]
            + [(_read_until_all_sent, chat_id, "twin", tmp_path / f"twin{i}.json") for i in (1, 2)],
            timeout=110,
        )
        # The senders fetch what remains after everyone is done.
        received = {
            sender: json.loads((tmp_path / f"{sender}.json").read_text())
            + [m.as_dict() for chat in chats.fetch_pending(sender) for m in chat.messages]
            for sender in senders
        }
    everything = list(range(1, total + 1))
    twins = [json.loads((tmp_path / f"twin{i}.json").read_text()) for i in (1, 2)]
    for twin in twins:  # each process gets its share in order...
        got = [m["id"] for m in twin["received"]]
        assert got == sorted(set(got))
    # ...and together exactly everything: nothing twice, nothing lost.
    every_message = sorted((m for twin in twins for m in twin["received"]), key=lambda m: m["id"])
    assert [m["id"] for m in every_message] == everything
    reader = json.loads((tmp_path / "reader.json").read_text())
    assert reader["missed"] == 0
    # Everyone else gets every message but their own, which they saw as they sent it.
    for member, got in [("reader", reader["received"]), *received.items()]:
        others = [m["id"] for m in every_message if m["sender"] != member]
        assert [m["id"] for m in got] == others, member
    # Each sender's own messages got ids in the order it sent them.
    by_sender: dict[str, list[str]] = {}
    for message in every_message:
        by_sender.setdefault(message["sender"], []).append(message["message"])
    for i, sender in enumerate(senders):
        assert by_sender[sender] == [f"{i}:{n}" for n in range(PER_SENDER)]
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 0  # all seen by all, all cleaned


# Mailboxes


def test_a_mailbox_returns_messages_oldest_first_and_empties(redis_mode: str) -> None:
    mailbox = Mailbox()
    mailbox.send("bob", {"text": "hi"})
    mailbox.send("bob", ["two", 2])
    mailbox.send("bob", "three ü")
    assert mailbox.fetch("bob") == [{"text": "hi"}, ["two", 2], "three ü"]
    assert mailbox.fetch("bob") == []


def test_entries_that_are_not_json_come_back_marked_and_nothing_is_lost(
    r: redis.Redis,
) -> None:
    Mailbox().send("bob", {"text": "before"})
    r.rpush("rc:mailbox:{bob}", b"\xff\xfe not utf-8", b"{not json", b"[" * 100_000)
    Mailbox().send("bob", {"text": "after"})
    fetched = Mailbox().fetch("bob")
    assert fetched[0] == {"text": "before"}
    assert fetched[-1] == {"text": "after"}
    unreadable = fetched[1:4]
    assert all(isinstance(message, UnreadableMessage) for message in unreadable)
    assert unreadable[0].text == "\\xff\\xfe not utf-8"
    assert unreadable[1].text == "{not json"
    assert Mailbox().fetch("bob") == []


def test_a_full_mailbox_drops_its_oldest() -> None:
    with override_settings(REDIS_COMPONENTS={"MAILBOX_MAX_MESSAGES": 3}):
        for n in range(5):
            Mailbox().send("bob", n)
    assert Mailbox().fetch("bob") == [2, 3, 4]


MAILBOX_MESSAGES = 3000


def _fill_mailbox() -> None:
    for n in range(MAILBOX_MESSAGES):
        Mailbox().send("bob", n)
    get_client().set("test:all-sent", 1)


def _drain_mailbox(out: Path) -> None:
    received: list[int] = []
    while True:
        all_sent = get_client().exists("test:all-sent")
        batch = Mailbox().fetch("bob")
        received += batch
        if all_sent and not batch:
            break
    out.write_text(json.dumps(received))


def test_two_concurrent_fetchers_never_get_a_message_twice(tmp_path: Path) -> None:
    with override_settings(REDIS_COMPONENTS={"MAILBOX_MAX_MESSAGES": MAILBOX_MESSAGES}):
        run_processes(
            lambda role, *args: role(*args),
            [
                (_fill_mailbox,),
                (_drain_mailbox, tmp_path / "a.json"),
                (_drain_mailbox, tmp_path / "b.json"),
            ],
        )
    a, b = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json"))
    assert a == sorted(a)
    assert b == sorted(b)
    assert sorted(a + b) == list(range(MAILBOX_MESSAGES))


# Keeping read messages as history (CHAT_KEEP_READ / keep_read=True)

keeping = GroupChat(keep_read=True, creates_per_minute=0, accounts=True)


def test_kept_history_shows_read_messages_and_unread_tracking_is_unchanged() -> None:
    chat_id = keeping.create("alice", ["bob"], "one")
    keeping.send(chat_id, "bob", "two")
    for member, other in (("alice", "two"), ("bob", "one")):
        [pending] = keeping.fetch_pending(member)
        assert [m.message for m in pending.messages] == [other]
    assert keeping.unread_counts("alice").per_chat == {chat_id: 0}
    assert [m.message for m in keeping.history(chat_id, "alice")] == ["one", "two"]
    keeping.send(chat_id, "alice", "three")
    assert keeping.unread_counts("bob").per_chat == {chat_id: 1}
    [pending] = keeping.fetch_pending("bob")
    assert [m.message for m in pending.messages] == ["three"]
    # The book's way deletes what everyone has read, at the next message or read.
    chats.send(chat_id, "bob", "four")
    assert [m.message for m in chats.history(chat_id, "alice")] == ["four"]
    chats.fetch_pending("alice")
    assert chats.history(chat_id, "alice") == []


def _send_many(chat_id: str, sender: str, count: int) -> None:
    for n in range(count):
        keeping.send(chat_id, sender, f"{sender}:{n}")


def _reload_while_others_send(chat_id: str, out: Path) -> None:
    """As the chat page does: show the history, then fetch what is new, again and again;
    the page keeps what it shows by id."""
    shown: dict[int, str] = {}
    pending_ids: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for message in keeping.history(chat_id, "bob", limit=1000):  # a reload
            shown[message.id] = message.message
        for _ in range(5):
            for pending in keeping.fetch_pending("bob"):
                pending_ids += [m.id for m in pending.messages]
                shown.update((m.id, m.message) for m in pending.messages)
        if len(shown) == 401:
            break
    out.write_text(json.dumps({"shown": sorted(shown), "pending": pending_ids}))


def test_a_member_reloading_while_another_sends_loses_nothing_and_gets_nothing_twice(
    tmp_path: Path,
) -> None:
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGES": 1000}):
        chat_id = keeping.create("alice", ["bob"], "hello")
        run_processes(
            lambda role, *args: role(*args),
            [
                (_send_many, chat_id, "alice", 400),
                (_reload_while_others_send, chat_id, tmp_path / "bob.json"),
            ],
        )
    seen = json.loads((tmp_path / "bob.json").read_text())
    assert seen["shown"] == list(range(1, 402))
    assert seen["pending"] == sorted(set(seen["pending"]))  # never the same message twice


def test_the_cap_holds_with_kept_history_under_8_concurrent_senders(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"CHAT_MAX_MESSAGES": 50}):
        senders = [f"s{i}" for i in range(8)]
        chat_id = keeping.create("alice", senders, "hello")
        run_processes(_send_many, [(chat_id, sender, 100) for sender in senders])
        held = keeping.history(chat_id, "alice", limit=1000)
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 50
    assert [m.id for m in held] == list(range(752, 802))  # the newest 50 of 801


def test_a_user_may_create_a_bounded_number_of_chats_per_minute(r: redis.Redis) -> None:
    limited = GroupChat(accounts=True)
    with override_settings(REDIS_COMPONENTS={"CHAT_CREATES_PER_MINUTE": 3}):
        for _ in range(3):
            limited.create("alice", ["bob"], "hi")
        with pytest.raises(ChatLimitReached) as refused:
            limited.create("alice", ["bob"], "one too many")
        assert 0 < refused.value.retry_after <= 60
        assert len(limited.chats_of("bob")) == 3  # nothing written for the refused one
        limited.create("carol", ["bob"], "others may")
    assert 0 < r.ttl("rc:chat-creates:{alice}") <= 60  # the count does not outlive its minute


def test_following_a_chat_marks_nothing_read_and_wakes_on_a_new_message() -> None:
    chat_id = keeping.create("alice", ["bob"], "one")
    keeping.send(chat_id, "alice", "two")
    assert [m.message for m in keeping.messages_after(chat_id, "bob")] == ["one", "two"]
    assert [m.message for m in keeping.messages_after(chat_id, "bob", 1)] == ["two"]
    assert keeping.unread_counts("bob").per_chat == {chat_id: 2}  # following reads nothing
    started = time.monotonic()
    threading.Timer(0.2, keeping.send, args=(chat_id, "alice", "three")).start()
    [third] = keeping.messages_after(chat_id, "bob", 2, wait=5)
    assert third.message == "three"
    assert time.monotonic() - started < 2  # woken by the message, not the time limit
    assert keeping.messages_after(chat_id, "bob", 3, wait=0.1) == []
    assert keeping.mark_read(chat_id, "bob") == 3
    assert keeping.unread_counts("bob").per_chat == {chat_id: 0}
    with pytest.raises(NotAMember):
        keeping.messages_after(chat_id, "mallory")
    with pytest.raises(InvalidInput, match="after"):
        keeping.messages_after(chat_id, "bob", -1)


def test_waiting_for_unread_counts_wakes_on_a_message_in_any_chat_or_a_new_chat() -> None:
    first = keeping.create("alice", ["bob"], "hello")
    started = time.monotonic()
    threading.Timer(0.2, keeping.send, args=(first, "alice", "news")).start()
    counts = keeping.unread_counts("bob", wait=5)
    assert counts.per_chat == {first: 2}
    threading.Timer(0.2, keeping.create, args=("carol", ["bob"], "a new chat")).start()
    counts = keeping.unread_counts("bob", wait=5, shown=counts)
    [second] = set(counts.per_chat) - {first}
    assert counts.per_chat == {first: 2, second: 1}
    assert time.monotonic() - started < 3
    # Nothing new: the time runs out and the same counts come back.
    assert keeping.unread_counts("bob", wait=0.1, shown=counts.mark) == counts
    # A message sent between two polls is not missed: the counts shown are older.
    keeping.send(first, "alice", "between two polls")
    assert keeping.unread_counts("bob", wait=5, shown=counts).per_chat == {first: 3, second: 1}
    assert time.monotonic() - started < 3
    # Read elsewhere: the counts differ from those shown, whatever woke the poll.
    keeping.mark_read(first, "bob")
    assert keeping.unread_counts("bob", wait=5, shown=counts).per_chat == {first: 0, second: 1}


# One's own messages: seen by their sender when sent, unread by the other members


def test_a_senders_own_message_is_seen_by_them_and_unread_by_the_others(
    redis_mode: str,
) -> None:
    chat_id = chats.create("alice", ["bob", "carol"], "hello")
    assert [chats.unread_counts(user).per_chat for user in ("alice", "bob", "carol")] == [
        {chat_id: 0},
        {chat_id: 1},
        {chat_id: 1},
    ]
    assert chats.fetch_pending("alice") == []
    chats.fetch_pending("bob")
    assert chats.send(chat_id, "bob", "hi") == 2
    assert [chats.unread_counts(user).per_chat for user in ("alice", "bob", "carol")] == [
        {chat_id: 1},
        {chat_id: 0},
        {chat_id: 2},
    ]
    assert [chats.chat_list(user)[0].unread for user in ("alice", "bob", "carol")] == [1, 0, 2]
    assert ids(chats.fetch_pending("alice")) == {chat_id: [2]}
    assert chats.fetch_pending("bob") == []
    assert ids(chats.fetch_pending("carol")) == {chat_id: [1, 2]}


def test_a_message_sent_before_reading_the_others_leaves_theirs_unread() -> None:
    chat_id = chats.create("alice", ["bob"], "one")
    chats.send(chat_id, "alice", "two")
    chats.send(chat_id, "bob", "three")  # bob has read neither one nor two
    chats.send(chat_id, "bob", "four")
    assert chats.unread_counts("bob").per_chat == {chat_id: 2}
    assert [summary.unread for summary in chats.chat_list("bob")] == [2]
    assert chats.unread_counts("alice").per_chat == {chat_id: 2}
    [pending] = chats.fetch_pending("bob")
    assert ([m.message for m in pending.messages], pending.missed) == (["one", "two"], 0)
    assert chats.fetch_pending("bob") == []
    chats.send(chat_id, "bob", "five")
    assert chats.unread_counts("bob").per_chat == {chat_id: 0}
    assert chats.mark_read(chat_id, "alice") == 3


def test_a_message_is_gone_once_every_other_member_has_read_it(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    chats.fetch_pending("bob")
    assert r.zcard(f"rc:chat:{{{chat_id}}}:messages") == 0
    note = chats.create("alice", [], "a note to myself")  # no one else to read it
    assert r.zcard(f"rc:chat:{{{note}}}:messages") == 0
    assert keeping.history(keeping.create("alice", [], "kept"), "alice")[0].message == "kept"


def test_renaming_a_member_keeps_their_own_messages_seen(r: redis.Redis) -> None:
    chat_id = chats.create("alice", ["bob"], "one")
    chats.send(chat_id, "bob", "two")  # before reading "one": his own is seen all the same
    client = get_client()
    scripts.load("chat_rename")(client, _chat_keys(chat_id), ["bob", "8", 1])  # migration
    assert chats._run(chat_id, "unread", "8")(client) == [0, 1]
    assert not r.hexists(f"rc:chat:{{{chat_id}}}:meta", "own:bob")


@single_server_only
def test_sending_marks_the_message_seen_in_the_same_round_trip(
    redis_server: EmbeddedRedis,
) -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    with round_trips(redis_server, "alice") as sent:
        chats.send(chat_id, "alice", "again")
        assert sent() == 1
    assert chats.unread_counts("alice").per_chat == {chat_id: 0}
    assert chats.unread_counts("bob").per_chat == {chat_id: 2}


# Users: a primary key that the user model can have

users = GroupChat(creates_per_minute=0)  # the default: members are users of the site


@pytest.mark.parametrize(
    ("call", "field", "value"),
    [
        (lambda: users.create(7, ["bob"], "hello"), "recipients", "'bob'"),
        (lambda: users.create(7, [8, "7.5"], "hello"), "recipients", "'7.5'"),
        (lambda: users.create("alice", [8], "hello"), "sender", "'alice'"),
        (lambda: users.send("1", "alice", "hi"), "sender", "'alice'"),
        (lambda: users.join("1", "bob"), "user", "'bob'"),
        (lambda: users.leave("1", "bob"), "user", "'bob'"),
        (lambda: users.fetch_pending("bob"), "user", "'bob'"),
        (lambda: users.unread_counts("bob", wait=1), "user", "'bob'"),
        (lambda: users.chat_list("bob"), "user", "'bob'"),
        (lambda: users.chats_of("bob"), "user", "'bob'"),
        (lambda: users.history("1", "bob"), "user", "'bob'"),
        (lambda: users.messages_after("1", "bob"), "user", "'bob'"),
        (lambda: users.mark_read("1", "bob"), "user", "'bob'"),
        (lambda: users.forget("bob"), "user", "'bob'"),
    ],
)
def test_a_value_that_cannot_be_a_users_primary_key_is_refused_and_changes_nothing(
    call: Any, field: str, value: str, r: redis.Redis
) -> None:
    users.create(7, [8], "hello")
    before = snapshot(r)
    with pytest.raises(InvalidInput) as raised:
        call()
    assert raised.value.field == field
    assert value in raised.value.problem
    assert snapshot(r) == before


@pytest.mark.django_db
def test_a_username_given_for_a_user_is_refused(django_user_model: type[User]) -> None:
    alice, bob = (django_user_model.objects.create_user(username=n) for n in ("alice", "bob"))
    with pytest.raises(InvalidInput, match=r"^recipients: .*'bob'"):
        GroupChat().create(alice, ["bob"], "hello")
    assert GroupChat().chats_of(alice) == GroupChat().chats_of(bob) == []


@pytest.mark.django_db
def test_a_user_is_a_saved_user_or_their_primary_key_in_any_form(
    django_user_model: type[User],
) -> None:
    alice, bob, carol = (
        django_user_model.objects.create_user(username=n) for n in ("alice", "bob", "carol")
    )
    chat_id = users.create(alice, [bob.pk, str(carol.pk)], "hello")
    assert users.members(chat_id) == sorted(str(user.pk) for user in (alice, bob, carol))
    assert users.unread_counts(f"00{bob.pk}").per_chat == {chat_id: 1}  # as pk_field.to_python
    assert users.send(chat_id, f" {carol.pk}", "hi") == 2
    assert [m.sender for m in users.history(chat_id, bob)] == [str(alice.pk), str(carol.pk)]


def test_usernames_are_taken_while_the_views_know_users_by_them() -> None:
    with override_settings(REDIS_COMPONENTS={"MESSAGING_USER_KEY": "username"}):
        chat_id = users.create("alice", ["bob"], "hello")  # 0.1's way, until migrated
        assert users.members(chat_id) == ["alice", "bob"]
        assert users.unread_counts("bob").per_chat == {chat_id: 1}


# The 0.1 forms of the values, kept until 0.3: what the type a value was (a dict, a list,
# a NamedTuple, a str) did, it still does and gives the same answer, with a
# DeprecationWarning where the new type reads otherwise.

HELLO = Message(1, 1700000000.5, "7", "hello")
COUNTS = UnreadCounts({"42": 1, "7": 0})
MESSAGES = MessageList((HELLO, dataclasses.replace(HELLO, id=2)), missed=1)
PENDING = Pending("42", MESSAGES)
SUMMARY = ChatSummary("42", ["7", "8"], 1)
UNREADABLE = UnreadableMessage("{not json")
# The 0.1 types of Pending and ChatSummary (a MessageList was a list then; the tuples'
# own behaviour is what counts here).
OldPending = collections.namedtuple("OldPending", ["chat_id", "messages"])
OldSummary = collections.namedtuple("OldSummary", ["chat_id", "members", "unread"])

# Each value with what 0.1 returned for it, and a key or item of it.
DICTS = {
    "Message": (HELLO, {"id": 1, "ts": 1700000000.5, "message": "hello", "sender": "7"}, "id"),
    "UnreadCounts": (COUNTS, {"42": 1, "7": 0}, "42"),
}
TUPLES = {
    "Pending": (PENDING, OldPending("42", MESSAGES), "42"),
    "ChatSummary": (SUMMARY, OldSummary("42", ["7", "8"], 1), 1),
}

Operation = Callable[[Any, Any, Any], Any]  # (the value, its 0.1 form, a key or item)
DICT_OPERATIONS: dict[str, Operation] = {
    "value[key]": lambda d, old, key: d[key],
    "key in value": lambda d, old, key: key in d,
    "key not in value": lambda d, old, key: key not in d,
    "missing in value": lambda d, old, key: "nope" in d,
    "len(value)": lambda d, old, key: len(d),
    "iter(value)": lambda d, old, key: list(iter(d)),
    "[*value]": lambda d, old, key: [*d],
    "reversed(value)": lambda d, old, key: list(reversed(d)),
    "sorted(value)": lambda d, old, key: sorted(d),
    "value.get(key)": lambda d, old, key: d.get(key),
    "value.get(missing, default)": lambda d, old, key: d.get("nope", -1),
    "value.keys()": lambda d, old, key: list(d.keys()),
    "value.keys() & set": lambda d, old, key: d.keys() & {key, "nope"},
    "value.values()": lambda d, old, key: list(d.values()),
    "value.items()": lambda d, old, key: list(d.items()),
    "value.copy()": lambda d, old, key: d.copy(),
    "dict(value)": lambda d, old, key: dict(d),
    "{**value}": lambda d, old, key: {**d, "x": 1},
    "value | dict": lambda d, old, key: d | {"x": 1},
    "dict | value": lambda d, old, key: {"x": 1} | d,
    "value == dict": lambda d, old, key: d == dict(old),
    "value != dict": lambda d, old, key: d != {"x": 1},
}
TUPLE_OPERATIONS: dict[str, Operation] = {
    "value[0]": lambda t, old, item: t[0],
    "value[-1]": lambda t, old, item: t[-1],
    "value[:1]": lambda t, old, item: t[:1],
    "len(value)": lambda t, old, item: len(t),
    "iter(value)": lambda t, old, item: list(iter(t)),
    "unpacking": lambda t, old, item: (lambda first, *rest: (first, len(rest)))(*t),
    "reversed(value)": lambda t, old, item: list(reversed(t)),
    "item in value": lambda t, old, item: item in t,
    "missing in value": lambda t, old, item: "nope" in t,
    "value.index(item)": lambda t, old, item: t.index(item),
    "value.count(item)": lambda t, old, item: t.count(item),
    "value + tuple": lambda t, old, item: t + ("x",),  # noqa: RUF005 (+ is the point)
    "tuple + value": lambda t, old, item: ("x",) + t,  # noqa: RUF005
    "value * 2": lambda t, old, item: t * 2,
    "2 * value": lambda t, old, item: 2 * t,
    "value == tuple": lambda t, old, item: t == tuple(old),
    "value != tuple": lambda t, old, item: t != ("x",),
    "value < tuple": lambda t, old, item: t < ("9",),
    "value <= tuple": lambda t, old, item: t <= ("1",),
    "value > tuple": lambda t, old, item: t > ("1",),
    "value >= tuple": lambda t, old, item: t >= ("9",),
    "value._asdict()": lambda t, old, item: t._asdict(),
}
LIST_OPERATIONS: dict[str, Operation] = {
    "value + list": lambda v, old, item: v + [item],  # noqa: RUF005 (+ is the point)
    "list + value": lambda v, old, item: [item] + v,  # noqa: RUF005
    "value * 2": lambda v, old, item: v * 2,
    "2 * value": lambda v, old, item: 2 * v,
    "value == list": lambda v, old, item: v == old,
    "value != list": lambda v, old, item: v != [item],
    "value < list": lambda v, old, item: v < [],
    "value <= list": lambda v, old, item: v <= [],
    "value > list": lambda v, old, item: v > [],
    "value >= list": lambda v, old, item: v >= [],
    "value.copy()": lambda v, old, item: v.copy(),
}
STR_OPERATIONS: dict[str, Operation] = {
    "value == str": lambda s, old, part: s == old,
    "value != str": lambda s, old, part: s != "x",
    "value < str": lambda s, old, part: s < "|",
    "value <= str": lambda s, old, part: s <= "a",
    "value > str": lambda s, old, part: s > "a",
    "value >= str": lambda s, old, part: s >= "|",
    "len(value)": lambda s, old, part: len(s),
    "bool(value)": lambda s, old, part: bool(s),
    "value[0]": lambda s, old, part: s[0],
    "value[1:4]": lambda s, old, part: s[1:4],
    "value[::-1]": lambda s, old, part: s[::-1],
    "iter(value)": lambda s, old, part: list(iter(s)),
    "reversed(value)": lambda s, old, part: list(reversed(s)),
    "str in value": lambda s, old, part: part in s,
    "value + str": lambda s, old, part: s + "!",
    "str + value": lambda s, old, part: "> " + s,
    "value * 2": lambda s, old, part: s * 2,
    "2 * value": lambda s, old, part: 2 * s,
    "value % args": lambda s, old, part: s % (),
    "a format spec": lambda s, old, part: f"{s:>12}",
    "value.upper()": lambda s, old, part: s.upper(),
    "value.split()": lambda s, old, part: s.split(),
    "value.startswith()": lambda s, old, part: s.startswith("{"),
    "value.encode()": lambda s, old, part: s.encode(),
    "value.replace()": lambda s, old, part: s.replace(part, "JSON"),
}


def _answers(operation: Operation, value: Any, old: Any, part: Any) -> tuple[Any, Any]:
    """What ``operation`` gives on the value (which warns, naming the line that used it)
    and on its 0.1 form."""
    with pytest.deprecated_call() as caught:
        answer = operation(value, old, part)
    assert {warning.filename for warning in caught} == {__file__}
    return answer, operation(old, old, part)


@pytest.mark.parametrize("operation", DICT_OPERATIONS.values(), ids=DICT_OPERATIONS)
@pytest.mark.parametrize(("value", "old", "key"), DICTS.values(), ids=DICTS)
def test_a_value_that_was_a_dict_still_does_what_a_dict_did_and_warns(
    operation: Operation, value: Any, old: dict[str, Any], key: str
) -> None:
    answer, old_answer = _answers(operation, value, old, key)
    assert answer == old_answer


@pytest.mark.parametrize("operation", TUPLE_OPERATIONS.values(), ids=TUPLE_OPERATIONS)
@pytest.mark.parametrize(("value", "old", "item"), TUPLES.values(), ids=TUPLES)
def test_a_value_that_was_a_named_tuple_still_does_what_a_tuple_did_and_warns(
    operation: Operation, value: Any, old: tuple[Any, ...], item: Any
) -> None:
    answer, old_answer = _answers(operation, value, old, item)
    assert answer == old_answer


@pytest.mark.parametrize("operation", LIST_OPERATIONS.values(), ids=LIST_OPERATIONS)
def test_a_message_list_still_does_what_a_list_did_and_warns(operation: Operation) -> None:
    answer, old_answer = _answers(operation, MESSAGES, list(MESSAGES), HELLO)
    assert answer == old_answer


@pytest.mark.parametrize("operation", STR_OPERATIONS.values(), ids=STR_OPERATIONS)
def test_an_unreadable_message_still_does_what_a_str_did_and_warns(
    operation: Operation,
) -> None:
    answer, old_answer = _answers(operation, UNREADABLE, "{not json", "json")
    assert answer == old_answer


def test_the_truth_of_unread_counts_is_that_of_the_dict_and_warns() -> None:
    with pytest.deprecated_call():
        assert COUNTS
    with pytest.deprecated_call():
        assert not UnreadCounts()


def test_what_reads_the_same_in_0_2_does_not_warn() -> None:
    assert [bool(value) for value in (HELLO, PENDING, SUMMARY, MESSAGES)] == [True] * 4
    assert (len(MESSAGES), MESSAGES[0], next(reversed(MESSAGES)).id) == (2, HELLO, 2)
    assert (HELLO in MESSAGES, MESSAGES.index(HELLO), MESSAGES.count(HELLO)) == (True, 0, 1)
    assert str(UNREADABLE) == f"{UNREADABLE}" == format(UNREADABLE, "") == "{not json"
    assert hash(UNREADABLE) == hash("{not json")
    assert PENDING == dataclasses.replace(PENDING) != dataclasses.replace(PENDING, chat_id="1")
    assert ChatSummary("42", ["7", "8"], 1) == SUMMARY


def test_what_failed_on_the_0_1_types_fails_alike() -> None:
    with pytest.raises(KeyError):
        HELLO["nope"]
    with pytest.raises(KeyError):
        COUNTS["nope"]
    for value in (PENDING, SUMMARY, UNREADABLE):
        with pytest.raises(IndexError), pytest.deprecated_call():
            value[99]
    with pytest.raises(ValueError, match="not in tuple"), pytest.deprecated_call():
        PENDING.index("nope")
    with pytest.raises(TypeError):  # a template's {{ pending.chat_id }} goes on to the attribute
        PENDING["chat_id"]  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(SUMMARY)  # it holds a list, as the NamedTuple did
    with pytest.raises(TypeError), pytest.deprecated_call():
        UNREADABLE + 1  # type: ignore[operator]


def test_replacing_a_field_as_a_named_tuple_did_gives_the_new_type() -> None:
    with pytest.deprecated_call():
        replaced = PENDING._replace(chat_id="9")
    assert replaced == Pending("9", MESSAGES)


# The names of the 0.1 types that are gone: what changed a value (they are frozen now),
# and what only their class had (dataclasses.fields() replaces a NamedTuple's _fields).
DICT_GONE = {"__class_getitem__", "fromkeys", "__delitem__", "__setitem__", "__ior__", "clear"}
DICT_GONE |= {"pop", "popitem", "setdefault", "update"}
LIST_GONE = {"__delitem__", "__setitem__", "__iadd__", "__imul__"}
LIST_GONE |= {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"}
TUPLE_GONE = {"__class_getitem__", "__getnewargs__", "_make", "_fields", "_field_defaults"}


@pytest.mark.parametrize(
    ("value", "was", "gone"),
    [
        (HELLO, dict, DICT_GONE),
        (COUNTS, dict, DICT_GONE),
        (MESSAGES, list, LIST_GONE),
        (PENDING, OldPending, TUPLE_GONE),
        (SUMMARY, OldSummary, TUPLE_GONE),
        (UNREADABLE, str, {"__getnewargs__"}),
    ],
    ids=["Message", "UnreadCounts", "MessageList", "Pending", "ChatSummary", "Unreadable"],
)
def test_every_operation_of_the_type_a_value_was_is_there(
    value: Any, was: type, gone: set[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a str's methods warn when read
        missing = {name for name in dir(was) if not hasattr(value, name)}
    assert missing == gone
