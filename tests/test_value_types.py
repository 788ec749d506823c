"""The public value types are frozen dataclasses; their 0.1 forms still work until 0.3,
with a DeprecationWarning, and the JSON of the views is what it was."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from demo_project.marketplace.models import notice_text
from redis_components import (
    ChatSummary,
    GroupChat,
    Mailbox,
    MessageList,
    Pending,
    ReceivedFile,
    ReceiveProgress,
    SendProgress,
    UnreadableMessage,
    get_client,
    receive_files,
    send_files,
)
from redis_components.messaging import Message, UnreadCounts

chats = GroupChat(accounts=True)  # accounts: readable names, not users
HELLO = Message(1, 1700000000.5, "alice", "hello")
VALUES = [
    HELLO,
    MessageList((HELLO,), missed=2),
    UnreadCounts({"42": 1}),
    ChatSummary("42", ["alice", "bob"], 1),
    Pending("42", MessageList((HELLO,))),
    UnreadableMessage("{not json"),
    SendProgress("logs", files_total=1, bytes_total=10),
    ReceiveProgress("logs", reader="0"),
    ReceivedFile("logs", "0", seq=1, name="a.log", size=10, lines=1),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda value: type(value).__name__)
def test_every_value_type_is_a_frozen_dataclass(value: Any) -> None:
    assert dataclasses.is_dataclass(value)
    first = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, None)
    assert dataclasses.replace(value) == value


# Message: was a dict.


def test_a_message_has_attributes_and_a_json_ready_dict() -> None:
    assert (HELLO.id, HELLO.ts, HELLO.sender, HELLO.message) == (1, 1700000000.5, "alice", "hello")
    wire = {"id": 1, "ts": 1700000000.5, "message": "hello", "sender": "alice"}
    assert HELLO.as_dict() == dataclasses.asdict(HELLO) == wire
    assert list(HELLO.as_dict()) == list(wire)  # the order the views have always sent
    assert json.loads(json.dumps(HELLO.as_dict())) == wire


def test_reading_a_message_as_a_dict_still_works_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match=r"message\['sender'\].*use message.sender"):
        assert HELLO["sender"] == "alice"
    with pytest.warns(DeprecationWarning, match="use the attributes"):
        assert HELLO.get("message") == "hello"
    with pytest.warns(DeprecationWarning, match=r"message(\.keys\(\)|\[)"):  # keys, then each
        assert dict(HELLO) == HELLO.as_dict()
    with pytest.warns(DeprecationWarning, match=r"as_dict\(\)"):
        assert dict(HELLO.items()) == HELLO.as_dict()
    with pytest.warns(DeprecationWarning, match=r"compare message.as_dict\(\)"):
        assert HELLO == {"id": 1, "ts": 1700000000.5, "sender": "alice", "message": "hello"}
    with pytest.raises(KeyError):  # as a dict did
        HELLO["nope"]


# MessageList: was a list; a sequence still, without warnings.


def test_a_message_list_is_a_sequence_without_warnings() -> None:
    second = dataclasses.replace(HELLO, id=2)
    messages = MessageList([HELLO, second], missed=3)  # any iterable; kept as a tuple
    assert messages.messages == (HELLO, second)
    assert (len(messages), messages[0], messages[-1], messages[:1]) == (2, HELLO, second, (HELLO,))
    assert list(messages) == [HELLO, second]
    assert HELLO in messages
    assert not MessageList()
    assert messages == MessageList((HELLO, second), 3) != MessageList((HELLO, second))


def test_comparing_a_message_list_with_a_list_still_works_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="compare list"):
        assert MessageList((HELLO,), missed=1) == [HELLO]
    with pytest.warns(DeprecationWarning, match="compare list"):
        assert MessageList() != [HELLO]


# ChatSummary and Pending: were NamedTuples.


def test_unpacking_a_pending_still_works_and_warns() -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    pending = chats.fetch_pending("bob")
    with pytest.warns(DeprecationWarning, match=r"unpacking or iterating a Pending.*\.chat_id"):
        [(fetched_chat, messages)] = pending  # as in `for chat_id, messages in pending`
    assert fetched_chat == chat_id
    assert [message.message for message in messages] == ["hello"]
    with pytest.warns(DeprecationWarning, match="indexing a Pending"):
        assert pending[0][0] == chat_id
    [chat] = pending
    assert (chat.chat_id, chat.messages.messages[0].message, chat.missed) == (chat_id, "hello", 0)


def test_unpacking_a_chat_summary_still_works_and_warns() -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    [summary] = chats.chat_list("bob")
    assert (summary.chat_id, summary.members, summary.unread) == (chat_id, summary.members, 1)
    with pytest.warns(DeprecationWarning, match=r"ChatSummary.*\.chat_id, \.members, \.unread"):
        listed_id, members, unread = summary
    assert (listed_id, members, unread) == (chat_id, summary.members, 1)
    with pytest.warns(DeprecationWarning, match="indexing a ChatSummary"):
        assert summary[2] == 1
    with pytest.raises(TypeError):  # a template's lookup falls through to the attribute
        summary["unread"]  # type: ignore[index]


# UnreadCounts: was a dict.


def test_unread_counts_are_read_through_per_chat() -> None:
    chat_id = chats.create("alice", ["bob"], "hello")
    counts = chats.unread_counts("bob")
    assert counts.per_chat == {chat_id: 1}
    expected = json.dumps(sorted({chat_id: 1}.items()), separators=(",", ":")).encode()
    assert counts.mark == hashlib.blake2b(expected, digest_size=8).hexdigest()  # as in 0.1
    # What a caller shows may be the counts, any mapping, or their mark.
    for shown in (counts, {chat_id: 1}, counts.mark):
        assert chats.unread_counts("bob", wait=0.05, shown=shown) == counts


def test_reading_unread_counts_as_a_dict_still_works_and_warns() -> None:
    counts = UnreadCounts({"42": 1, "7": 0})
    with pytest.warns(DeprecationWarning, match=r"counts\['42'\].*counts.per_chat\['42'\]"):
        assert counts["42"] == 1
    with pytest.warns(DeprecationWarning, match=r"counts.per_chat.items\(\)"):
        assert dict(counts.items()) == {"42": 1, "7": 0}
    with pytest.warns(DeprecationWarning, match="counts.per_chat"):  # iter, and len as a hint
        assert list(counts) == ["42", "7"]
    with pytest.warns(DeprecationWarning, match="counts.per_chat"):
        assert "42" in counts
    with pytest.warns(DeprecationWarning, match="counts.per_chat"):
        assert len(counts) == 2
    with pytest.warns(DeprecationWarning, match="counts.per_chat"):
        assert dict(counts) == {"42": 1, "7": 0}
    with pytest.warns(DeprecationWarning, match="compare counts.per_chat"):
        assert counts == {"42": 1, "7": 0}
    with pytest.warns(DeprecationWarning, match=r"counts.per_chat.get\(\)"):
        assert counts.get("99") is None
    with pytest.raises(KeyError):  # a template's {{ counts.mark }} falls through to it
        counts["mark"]


# UnreadableMessage: was a str.


def test_an_unreadable_message_keeps_its_text() -> None:
    Mailbox().send("bob", {"text": "hi"})
    get_client().rpush("rc:mailbox:{bob}", b"\xff not json")
    readable, unreadable = Mailbox().fetch("bob")
    assert readable == {"text": "hi"}
    assert unreadable == UnreadableMessage("\\xff not json")
    assert str(unreadable) == f"{unreadable}" == unreadable.text == "\\xff not json"
    assert notice_text(unreadable) == "(a message that could not be read: \\xff not json)"


def test_using_an_unreadable_message_as_a_str_still_works_and_warns() -> None:
    unreadable = UnreadableMessage("{not json")
    with pytest.warns(DeprecationWarning, match=r"UnreadableMessage as a str.*use its .text"):
        assert unreadable == "{not json"
    with pytest.warns(DeprecationWarning, match=r"\.startswith"):
        assert unreadable.startswith("{")
    with pytest.warns(DeprecationWarning, match=r"len\(\)"):
        assert len(unreadable) == 9
    with pytest.warns(DeprecationWarning, match="indexing"):
        assert unreadable[0] == "{"
    with pytest.warns(DeprecationWarning, match="`in`"):
        assert "json" in unreadable
    with pytest.warns(DeprecationWarning, match=r"\+"):
        assert "> " + unreadable + "!" == "> {not json!"
    with pytest.warns(DeprecationWarning, match="comparing it with a str"):
        assert {"{not json": 1}[unreadable] == 1  # it hashes as the str it was
    with pytest.raises(AttributeError):
        unreadable.no_such_method  # noqa: B018


# Progress: frozen snapshots.


def test_progress_reports_are_snapshots_that_do_not_change_afterwards(tmp_path: Path) -> None:
    path = tmp_path / "one.log"
    path.write_text("a line\n")
    sent: list[SendProgress] = []
    received: list[ReceiveProgress] = []
    reader = threading.Thread(
        target=receive_files, kwargs={"on_line": str, "progress": received.append}, daemon=True
    )
    reader.start()
    report = send_files([path], readers=1, progress=sent.append)
    reader.join(10)
    assert report == sent[-1]
    assert (report.complete, report.files_sent) == (True, 1)
    assert (sent[0].complete, sent[0].files_sent) == (False, 0)  # not changed since
    assert (received[0].finished, received[0].files_done) == (False, 0)
    assert (received[-1].finished, received[-1].files_done, received[-1].lines) == (True, 1, 1)


# The JSON of the views: as it was.


@pytest.mark.django_db
def test_the_chat_views_json_is_unchanged(django_user_model: type[User]) -> None:
    for name in ("alice", "bob"):
        django_user_model.objects.create_user(username=name)
    alice, bob = Client(), Client()
    alice.force_login(User.objects.get(username="alice"))
    bob.force_login(User.objects.get(username="bob"))

    def call(client: Client, method: str, name: str, body: Any = None, **kwargs: Any) -> Any:
        url = reverse(f"redis_components:{name}", kwargs=kwargs)
        if method == "get":
            response = client.get(url, body or {})
        else:
            data = "" if body is None else json.dumps(body)
            response = client.post(url, data, content_type="application/json")
        assert response.status_code in (200, 201), response.content
        return response.json()

    chat_id = call(alice, "post", "chats", {"recipients": ["bob"], "message": "hello"})["id"]
    call(bob, "post", "chat-messages", {"message": "hi alice"}, chat_id=chat_id)

    listed = call(alice, "get", "chats")
    assert listed == {"chats": [{"id": chat_id, "unread": 1}], "mark": listed["mark"]}
    assert re.fullmatch("[0-9a-f]{16}", listed["mark"])

    def wire(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """The messages' fields, checking each is exactly the four of 0.1."""
        for message in messages:
            assert list(message) == ["id", "ts", "message", "sender"]  # as Redis stores it
            assert isinstance(message["ts"], (int, float))
        return [(m["id"], m["sender"], m["message"]) for m in messages]

    both = [(1, "alice", "hello"), (2, "bob", "hi alice")]
    history = call(alice, "get", "chat-messages", chat_id=chat_id)
    assert list(history) == ["messages"]
    assert wire(history["messages"]) == both
    after = call(alice, "get", "chat-messages", {"after": "1"}, chat_id=chat_id)
    assert list(after) == ["messages"]
    assert wire(after["messages"]) == both[1:]

    pending = call(alice, "post", "chat-pending")
    [chat] = pending["chats"]
    assert list(pending) == ["chats"]
    assert list(chat) == ["id", "messages", "missed"]
    assert (chat["id"], wire(chat["messages"]), chat["missed"]) == (chat_id, both[1:], 0)
    assert chat["messages"] == history["messages"][1:]  # not her own
