"""Pull messaging (*Redis in Action* 6.5): mailboxes and group chats.

Messages wait in Redis until their recipient asks for them, so a client that was
offline loses nothing (PUBLISH/SUBSCRIBE would drop what was sent meanwhile).

:class:`Mailbox` is the single-recipient variant: a list per user that senders push
to and the user drains.

:class:`GroupChat` keeps, for chat ``42`` and user ``alice``::

    rc:chat:{42}:meta        hash: last_id (the message id counter), public,
                             from:<user> -> the last id before a user joined an existing chat,
                             and own:<user> while some of the user's own messages are
                             after the last one they have seen (they sent before reading)
    rc:chat:{42}:members     zset: member -> id of the last message they have seen
    rc:chat:{42}:joins       hash: user -> version of their latest join (kept after leaving)
    rc:chat:{42}:messages    zset: message JSON -> message id
    rc:chat-index:{alice}    hash: chat id -> version of alice's latest join of it; also
                             the channel that tells alice's waiting pages of a chat joined
                             ("joined") or of messages she read ("read")
    rc:chat-index:{alice}:versions   alice's join version counter (see :meth:`GroupChat.forget`)
    rc:chat:{next-id}        the chat id counter

Users are identified by their primary key (:func:`~redis_components.keys.user_id`):
``alice`` above stands for her pk, say ``7``; a message's ``sender`` is the pk too, as a
string. Every ``user``, ``sender`` and ``recipient(s)`` argument is a saved Django user
or a pk (``int`` or ``str``), so a renamed user keeps their chats and mailbox; a chat
refuses a pk that the user model cannot have, such as a username. Version 0.1 keyed them
by whatever string it was given (its chat views gave the username); ``manage.py
rc_migrate_users`` moves such data to the pks.

Every operation on a chat is one call of ``lua/chat.lua`` on the chat's keys, so
sending (next id + store + seen by its sender), fetching (read + mark seen + clean up)
and leaving are atomic, without a lock. What is per user lives under the user's hash
tag, so no script spans two slots: :meth:`GroupChat.fetch_pending` reads the user's
index, then runs one script per chat in one pipeline, two round trips for any number of
chats, on Redis Cluster too (a third only when it cleans up an index entry left stale).

A member has seen their own messages from the moment they send them (in the script that
sends them): :meth:`GroupChat.fetch_pending` and the unread counts leave them out.

A member's place in a chat (the last id they have seen) is kept by the chat alone;
the user's index only lists their chats. The index is written before the chat when
joining and cleaned after it when leaving, so every member finds the chat in their
index; an entry whose chat does not list the user (say, after a crash between the two
steps) is skipped. Each join carries a version from the user's counter and the chat
remembers the latest version it applied, so a join that lost a race to a newer one
cannot slip in late, and a stale entry is removed only when no join is on its way.

Retention: a message is kept until every member has seen it, but only the newest
``CHAT_MAX_MESSAGES`` of a chat are kept, and, if ``CHAT_MAX_AGE`` is set, none older
than that many seconds. A member who comes back after those limits dropped messages
they had not read gets what is left, and :attr:`Pending.missed` says how many they
missed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, partial
from typing import Any, TypeVar, cast, overload

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from . import keys, scripts
from .conf import conf
from .connection import Step, Steps, pipelined, text, watching
from .deprecation import deprecated
from .exceptions import ChatLimitReached, ChatNotFound, InvalidInput, MessagingError, NotAMember
from .twins import twins

# The statuses that lua/chat.lua returns first.
DONE, NO_CHAT, NOT_MEMBER, EXISTS = 0, 1, 2, 3
T = TypeVar("T")

# The most messages one history call returns.
HISTORY_MAX_LIMIT = 1000
CHAT_ID = re.compile(r"[1-9][0-9]{0,17}")
LINE_BREAKS_AND_TABS = re.compile(r"[\n\r\t]")


# Until 0.2 the values were a dict (Message, UnreadCounts), a list (MessageList), named
# tuples (ChatSummary, Pending) and a str (UnreadableMessage). Until 0.3 each still does
# what that type did, with a DeprecationWarning: an operation the new type has not is a
# _Was, which warns (the value's _warn_was) and does it on the value as that type (_was).

_USES = {
    "__contains__": "`in`",
    "__iter__": "iterating",
    "__reversed__": "reversed()",
    "__len__": "len()",
    "__getitem__": "indexing",
    "__eq__": "==",
    "__add__": "+",
    "__radd__": "+",
    "__mul__": "*",
    "__rmul__": "*",
    "__mod__": "%",
    "__rmod__": "%",
    "__or__": "|",
    "__ror__": "|",
    "__lt__": "<",
    "__le__": "<=",
    "__gt__": ">",
    "__ge__": ">=",
}


def _use(operation: str) -> str:
    """How code writes ``operation`` (a method's name): ``len()``, ``+``, ``.get()``."""
    return _USES.get(operation, f".{operation}()")


class _Was:
    """An operation of the type a value was until 0.2: it warns, then does the operation on
    the value as that type (``value._was()``; an argument of the value's own type is taken
    as that type too). ``do(old, *args)`` does it where that type has no such method
    (``x + value``, ``reversed(value)``)."""

    def __init__(self, do: Callable[..., Any] | None = None) -> None:
        self.do = do
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, value: Any, owner: type | None = None) -> Any:
        if value is None:
            return self
        name, do = self.name, self.do

        def operation(*args: Any) -> Any:
            value._warn_was(name)
            args = tuple(arg._was() if type(arg) is type(value) else arg for arg in args)
            return do(value._was(), *args) if do else getattr(value._was(), name)(*args)

        return operation


def _right(operation: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``operation`` with its operands swapped: ``__radd__`` from ``+``."""
    return lambda old, other: operation(other, old)


class _WasDict:
    """What a dict did, for Message and UnreadCounts (each has its own ``value[key]`` and
    ``==``, which warn in their own words)."""

    __slots__ = ()
    __contains__ = _Was()
    __iter__ = _Was()
    __len__ = _Was()
    __reversed__ = _Was()
    __or__ = _Was()
    __ror__ = _Was()
    copy = _Was()
    get = _Was()
    keys = _Was()
    values = _Was()
    items = _Was()


@dataclass(frozen=True, slots=True)
class Message(_WasDict):
    """One chat message as members receive it; ``ts`` is the server's time, in seconds.

    :meth:`as_dict` gives the JSON object the chat views send. Reading it as a dict
    (``message["sender"]``, ``dict(message)``, ``"id" in message``, comparing it with a
    dict) still works until 0.3, with a ``DeprecationWarning``.
    """

    id: int
    ts: float
    sender: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        """``{"id", "ts", "message", "sender"}`` (in the order the chat views have always
        sent), ready for ``json.dumps`` or ``JsonResponse``."""
        return {"id": self.id, "ts": self.ts, "message": self.message, "sender": self.sender}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Message):
            return self.as_dict() == other.as_dict()
        if isinstance(other, dict):
            deprecated("comparing a Message with a dict", "compare message.as_dict()", stacklevel=2)
            return self.as_dict() == other
        return NotImplemented

    def __bool__(self) -> bool:
        return True  # as the dict of four keys was, and without a warning

    # Message was a dict until 0.2.
    def __getitem__(self, key: str) -> Any:
        value = self.as_dict()[key]  # a KeyError first: a template's lookup goes on
        deprecated(f"message[{key!r}]", f"use message.{key}", stacklevel=2)
        return value

    def _was(self) -> dict[str, Any]:
        return self.as_dict()

    def _warn_was(self, operation: str) -> None:
        if operation.startswith("__"):
            use = f"a Message as a dict ({_use(operation)})"
        else:
            use = f"message.{operation}()"
        deprecated(use, "use the attributes, or message.as_dict() for a dict", stacklevel=3)


@dataclass(frozen=True, slots=True)
class MessageList(Sequence[Message]):
    """A chat's messages (a tuple, oldest first); ``missed`` counts unread ones the limits
    dropped.

    A sequence: it iterates, indexes, slices and has a length. What else a list did (it
    was one until 0.2: comparing it with a list, ``+``, ``*``, ``.copy()``) still works
    until 0.3, with a ``DeprecationWarning``; use ``list(messages)`` or ``.messages``.
    """

    messages: tuple[Message, ...] = ()
    missed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageList):
            return (self.messages, self.missed) == (other.messages, other.missed)
        if isinstance(other, list):
            deprecated(
                "comparing a MessageList with a list",
                "compare list(messages), or messages.messages with a tuple",
                stacklevel=2,
            )
            return list(self.messages) == other
        return NotImplemented

    # MessageList was a list until 0.2.
    __add__ = _Was()
    __radd__ = _Was(_right(operator.add))
    __mul__ = _Was()
    __rmul__ = _Was()
    __lt__ = _Was()
    __le__ = _Was()
    __gt__ = _Was()
    __ge__ = _Was()
    copy = _Was()

    def _was(self) -> list[Message]:
        return list(self.messages)

    def _warn_was(self, operation: str) -> None:
        deprecated(
            f"a MessageList as a list ({_use(operation)})",
            "use list(messages), or messages.messages (a tuple)",
            stacklevel=3,
        )


@dataclass(frozen=True, slots=True)
class UnreadCounts(_WasDict):
    """Unread messages per chat id (``per_chat``); ``mark`` is a short fingerprint of
    them, for a client to send back to :meth:`GroupChat.unread_counts` as what it shows.

    Reading it as a dict (``counts["42"]``, ``counts.items()``, iterating, comparing it
    with a dict: it was one until 0.2) still works until 0.3, with a
    ``DeprecationWarning``: use ``counts.per_chat``.
    """

    per_chat: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_chat", dict(self.per_chat))  # a snapshot of its own

    @property
    def mark(self) -> str:
        text = json.dumps(sorted(self.per_chat.items()), separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnreadCounts):
            return self.per_chat == other.per_chat
        if isinstance(other, Mapping):
            _old_counts("comparing UnreadCounts with a dict", "compare counts.per_chat")
            return self.per_chat == other
        return NotImplemented

    # UnreadCounts was a dict until 0.2 (its truth too: whether there are chats).
    def __getitem__(self, chat_id: str) -> int:
        count = self.per_chat[chat_id]  # a KeyError first: a template's lookup goes on
        _old_counts(f"counts[{chat_id!r}]", f"use counts.per_chat[{chat_id!r}]")
        return count

    def _was(self) -> dict[str, int]:
        return self.per_chat

    def _warn_was(self, operation: str) -> None:
        method = "" if operation.startswith("__") else f".{operation}()"
        deprecated(
            f"UnreadCounts as a dict ({_use(operation)})",
            f"use counts.per_chat{method}",
            stacklevel=3,
        )


def _old_counts(use: str, instead: str) -> None:
    deprecated(use, instead, stacklevel=3)


@cache
def _named_tuple(name: str, names: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
    """The ``NamedTuple`` ``name`` with the fields ``names``, as a value was until 0.2."""
    return collections.namedtuple(name, names)


class _WasTuple:
    """What a ``NamedTuple`` did, for ChatSummary and Pending: unpacking (``chat_id,
    messages = pending``), indexing (``summary[2]``), comparing with a tuple, ``._asdict()``
    and the rest; they compare and hash by their fields, as the tuples did."""

    __slots__ = ()

    def _names(self) -> tuple[str, ...]:
        return tuple(attribute.name for attribute in fields(cast(Any, self)))

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def _was(self) -> tuple[Any, ...]:
        return _named_tuple(type(self).__name__, self._names())(*self._values())

    def _warn_was(self, operation: str) -> None:
        names = ", ".join(f".{name}" for name in self._names())
        if operation == "__iter__":
            use = "unpacking or iterating"
        elif operation == "__getitem__":
            use = "indexing"
        else:
            use = f"{_use(operation)} on"
        deprecated(f"{use} a {type(self).__name__}", f"read {names}", stacklevel=3)

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._values() == other._values()
        if isinstance(other, tuple):
            self._warn_was("__eq__")
            return self._was() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __bool__(self) -> bool:
        return True  # as the tuple of its fields was, and without a warning

    def __getitem__(self, index: int | slice) -> Any:
        if not isinstance(index, (int, slice)):  # a template's {{ summary.unread }}
            raise TypeError(f"{type(self).__name__} is not a mapping")
        self._warn_was("__getitem__")
        return self._was()[index]

    def _replace(self, **changes: Any) -> Any:
        self._warn_was("_replace")
        return replace(cast(Any, self), **changes)

    __iter__ = _Was()
    __len__ = _Was()
    __contains__ = _Was()
    __reversed__ = _Was(reversed)
    __add__ = _Was()
    __radd__ = _Was(_right(operator.add))
    __mul__ = _Was()
    __rmul__ = _Was()
    __lt__ = _Was()
    __le__ = _Was()
    __gt__ = _Was()
    __ge__ = _Was()
    count = _Was()
    index = _Was()
    _asdict = _Was()


@dataclass(frozen=True, slots=True, eq=False)
class ChatSummary(_WasTuple):
    """One of a user's chats, as :meth:`GroupChat.chat_list` lists them.

    Unpacking or indexing it (it was a ``NamedTuple`` until 0.2) still works until 0.3,
    with a ``DeprecationWarning``.
    """

    chat_id: str
    members: list[str]  # the members' user ids (primary keys), sorted
    unread: int


@dataclass(frozen=True, slots=True, eq=False)
class Pending(_WasTuple):
    """The new messages of one chat, as :meth:`GroupChat.fetch_pending` returns them.

    Unpacking it (``for chat_id, messages in pending``) or indexing it (it was a
    ``NamedTuple`` until 0.2) still works until 0.3, with a ``DeprecationWarning``: read
    ``.chat_id``, ``.messages`` and ``.missed``.
    """

    chat_id: str
    messages: MessageList

    @property
    def missed(self) -> int:
        """How many unread messages the retention limits dropped before this fetch."""
        return self.messages.missed


@dataclass(frozen=True, slots=True)
class UnreadableMessage:
    """A mailbox entry that is not JSON (written by something other than
    :meth:`Mailbox.send`): its ``text``, undecodable bytes shown as ``\\x..`` escapes.

    ``str()`` of it is its text. Using it as a string (it was a ``str`` until 0.2:
    comparing it with one, its methods, ``len``, indexing, ``in``, ``+``) still works
    until 0.3, with a ``DeprecationWarning``: use ``.text``.
    """

    text: str

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        if spec:  # f"{message}" is its text; a format spec, what a str did
            _old_str("a format spec")
        return format(self.text, spec)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UnreadableMessage):
            return self.text == other.text
        if isinstance(other, str):
            _old_str("comparing it with a str")
            return self.text == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)  # as the str it was: equal ones hash alike

    # UnreadableMessage was a str until 0.2: its methods, and its operators below.
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe for these
            raise AttributeError(name)
        value = getattr(self.text, name)  # an AttributeError for what str has not
        _old_str(f".{name}")
        return value

    __len__ = _Was()
    __getitem__ = _Was()
    __contains__ = _Was()
    __iter__ = _Was()
    __reversed__ = _Was(reversed)
    __add__ = _Was()
    __radd__ = _Was(_right(operator.add))
    __mul__ = _Was()
    __rmul__ = _Was()
    __mod__ = _Was()
    __rmod__ = _Was()
    __lt__ = _Was()
    __le__ = _Was()
    __gt__ = _Was()
    __ge__ = _Was()

    def _was(self) -> str:
        return self.text

    def _warn_was(self, operation: str) -> None:
        deprecated(f"UnreadableMessage as a str ({_use(operation)})", "use its .text", stacklevel=3)


def _old_str(use: str) -> None:
    deprecated(f"UnreadableMessage as a str ({use})", "use its .text", stacklevel=3)


def _mail(item: bytes | str) -> Any:
    try:
        return json.loads(item)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
        raw = item.decode("utf-8", "backslashreplace") if isinstance(item, bytes) else item
        return UnreadableMessage(raw)


class Mailbox:
    """Single-recipient pull messaging: one list per user, drained by its owner.

    A mailbox keeps the newest ``MAILBOX_MAX_MESSAGES`` messages; sending to a full one
    drops its oldest. Messages are any JSON value.
    """

    def _send(self, recipient: keys.User, message: Any) -> Steps[None]:
        """Append ``message`` to ``recipient``'s mailbox (a user or a user's pk).

        Raises :class:`InvalidInput` for a bad user or a message that is not
        JSON-serializable; nothing is written then.
        """
        recipient = keys.user_id(recipient, "recipient")
        try:
            payload = json.dumps(message, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise InvalidInput("message", f"must be JSON-serializable: {exc}") from None
        key, most = keys.key("mailbox", recipient), conf.MAILBOX_MAX_MESSAGES
        yield pipelined(lambda pipe: (pipe.rpush(key, payload), pipe.ltrim(key, -most, -1)))

    def _fetch(self, user: keys.User) -> Steps[list[Any]]:
        """Remove and return every message in ``user``'s mailbox, oldest first.

        Reading and emptying are one transaction: of two concurrent fetches, each
        message goes to exactly one. An entry that is not JSON comes back as an
        :class:`UnreadableMessage`: nothing is lost, nothing raises.
        """
        key = keys.key("mailbox", keys.user_id(user))
        packed, _ = yield pipelined(lambda pipe: (pipe.lrange(key, 0, -1), pipe.delete(key)))
        return [_mail(item) for item in packed]

    send, asend = twins(_send)
    fetch, afetch = twins(_fetch)


class GroupChat:
    """Group chats with pull delivery, unread tracking and bounded retention.

    Chat ids are strings of digits; users are saved Django users or their pks (a value
    that the user model's pk cannot have, such as a username, is :class:`InvalidInput`),
    and members and senders come back as pks (strings). A member's own messages are seen
    by them when they send them: :meth:`fetch_pending` and the unread counts leave them
    out (:meth:`history` and :meth:`messages_after` show every message, for a page that
    renders one stream). Ids are strictly increasing within a chat and
    :meth:`fetch_pending` never returns a message twice to the same member. Bad input
    raises :class:`InvalidInput`, an unknown chat :class:`ChatNotFound`, a non-member
    :class:`NotAMember`; in each case nothing is written.

    ``keep_read`` (default: the ``CHAT_KEEP_READ`` setting) keeps messages every member
    has read, so that members see the conversation's history; only ``CHAT_MAX_MESSAGES``
    and ``CHAT_MAX_AGE`` drop messages then. Off, a message is deleted once every
    member has read it (the book's way). ``creates_per_minute`` (default: the
    ``CHAT_CREATES_PER_MINUTE`` setting; 0: no limit) bounds the chats one sender
    creates per minute. ``accounts=True`` makes members accounts of the caller's own
    naming (any name, as file distribution's per-channel accounts) rather than users of
    the site: names are not checked against the user model.
    """

    def __init__(
        self,
        *,
        keep_read: bool | None = None,
        creates_per_minute: int | None = None,
        accounts: bool = False,
    ) -> None:
        self.keep_read = keep_read
        self.creates_per_minute = creates_per_minute
        self.accounts = accounts

    def _create(
        self,
        sender: keys.User,
        recipients: Iterable[keys.User],
        message: str,
        *,
        public: bool = False,
    ) -> Steps[str]:
        """Create a chat of ``sender`` and ``recipients``, send ``message``, return its id.

        A ``public`` chat may be joined by anyone through the views; otherwise only
        the members it was created with are in it (the service's :meth:`join` does
        not ask).
        """
        sender = self._user(sender, "sender")
        if isinstance(recipients, (str, bytes)):
            raise InvalidInput("recipients", "must be a list of users, not a string")
        named = [self._user(user, "recipients") for user in recipients]
        members = list(dict.fromkeys([sender, *named]))
        body = _message_text(message)
        yield from self._count_creation(sender)
        chat_id = str((yield lambda c: c.incr(keys.key("chat", "next-id"))))
        versions = yield from self._add_to_indexes(chat_id, members)
        pairs = [value for pair in zip(members, versions, strict=True) for value in pair]
        reply = yield self._run(chat_id, "create", sender, int(public), body, *pairs)
        if reply[0] == EXISTS:
            for user, version in zip(members, versions, strict=True):
                yield self._remove_from_index(user, [(chat_id, version)])
            raise MessagingError(
                f"chat {chat_id} exists already: the chat id counter "
                f"{keys.key('chat', 'next-id')} was reset or deleted"
            )
        return chat_id

    def _send(self, chat_id: str, sender: keys.User, message: str) -> Steps[int]:
        """Send ``message`` to the chat as ``sender`` and return its id."""
        chat_id = _chat_id(chat_id)
        sender = self._user(sender, "sender")
        body = _message_text(message)
        reply = yield self._run(chat_id, "send", sender, body)
        return int(_checked(reply, chat_id, sender)[1])

    def _fetch_pending(self, user: keys.User, *, wait: float = 0) -> Steps[list[Pending]]:
        """Return ``user``'s unread messages, per chat, and mark them seen.

        Only chats with something new are listed, in chat id order. With ``wait``
        (seconds), when nothing is pending, wait up to that long for a message in
        any of the user's chats, or in one they join meanwhile.
        """
        user = self._user(user)
        wait = keys.seconds(wait, "wait")
        pending = yield from self._pending(user, (yield from self._index(user)))
        if pending or not wait:
            return pending
        pending_now = partial(self._pending, user)
        return (yield from self._watch(user, time.monotonic() + wait, pending_now, bool))

    def _unread_counts(
        self,
        user: keys.User,
        *,
        wait: float = 0,
        shown: UnreadCounts | Mapping[str, int] | str | None = None,
    ) -> Steps[UnreadCounts]:
        """How many unread messages ``user`` has per chat, without marking any seen.

        With ``wait``, a long poll: answers once the counts differ from ``shown`` (the
        counts the caller shows, or their :attr:`UnreadCounts.mark`; by default the
        counts at the call), or when ``wait`` seconds have passed. It listens before it
        looks, so a message sent between two polls is never missed.
        """
        user = self._user(user)
        deadline = time.monotonic() + keys.seconds(wait, "wait")
        if not wait:
            return (yield from self._counts(user, (yield from self._index(user))))
        baseline = _mark(shown)

        def differs(counts: UnreadCounts) -> bool:
            nonlocal baseline
            baseline = baseline or counts.mark  # none shown: the counts at the call
            return counts.mark != baseline

        return (yield from self._watch(user, deadline, partial(self._counts, user), differs))

    def _chat_list(self, user: keys.User) -> Steps[list[ChatSummary]]:
        """Each of ``user``'s chats with its members and unread count, in chat id order,
        marking nothing seen: two round trips for any number of chats."""
        user = self._user(user)
        replies = yield from self._on_chats_of(user, (yield from self._index(user)), "summary")
        return [
            ChatSummary(chat_id, sorted(text(name) for name in names), int(unread))
            for chat_id, (_, unread, names) in replies
        ]

    def _counts(self, user: str, index: dict[str, int]) -> Steps[UnreadCounts]:
        replies = yield from self._on_chats_of(user, index, "unread")
        return UnreadCounts({chat_id: int(reply[1]) for chat_id, reply in replies})

    def _history(
        self, chat_id: str, user: keys.User, before: int | None = None, limit: int = 50
    ) -> Steps[list[Message]]:
        """The chat's messages still held, oldest first: the ``limit`` newest below ``before``.

        Members only, and from their join on: a member who joined an existing chat does
        not see what was sent before. It marks nothing seen. Unless read messages are kept
        (``keep_read``), messages every member has seen are deleted, so history holds
        what some member has not read yet.
        """
        chat_id = _chat_id(chat_id)
        user = self._user(user)
        if before is not None and not _positive_int(before):
            raise InvalidInput("before", f"must be a message id (an integer >= 1), not {before!r}")
        if not _positive_int(limit) or limit > HISTORY_MAX_LIMIT:
            raise InvalidInput(
                "limit", f"must be an integer from 1 to {HISTORY_MAX_LIMIT}, not {limit!r}"
            )
        below = "+inf" if before is None else before
        reply = yield self._run(chat_id, "history", user, below, limit)
        return _decode(reversed(_checked(reply, chat_id, user)[1]))

    def _messages_after(
        self, chat_id: str, user: keys.User, after: int = 0, *, wait: float = 0, limit: int = 100
    ) -> Steps[list[Message]]:
        """The chat's messages after id ``after``, oldest first (at most ``limit``),
        marking nothing seen: every open page of every member can follow a chat this way.

        Members only. With ``wait`` (seconds), when there is none yet, wait up to that
        long for one to be sent. It shows what is held: with ``keep_read`` off, messages
        that every member has read are gone.
        """
        chat_id = _chat_id(chat_id)
        user = self._user(user)
        if not keys.is_integer(after) or after < 0:
            raise InvalidInput("after", f"must be a message id (an integer >= 0), not {after!r}")
        if not _positive_int(limit) or limit > HISTORY_MAX_LIMIT:
            raise InvalidInput(
                "limit", f"must be an integer from 1 to {HISTORY_MAX_LIMIT}, not {limit!r}"
            )
        deadline = time.monotonic() + keys.seconds(wait, "wait")
        since = partial(self._since, chat_id, user, after, limit)
        if not wait:
            return (yield from since())
        return (yield from watching(deadline, {_chat_keys(chat_id)[3]}, lambda _: since(), bool))

    def _since(self, chat_id: str, user: str, after: int, limit: int) -> Steps[list[Message]]:
        reply = yield self._run(chat_id, "since", user, after, limit)
        return _decode(_checked(reply, chat_id, user)[1])

    def _mark_read(self, chat_id: str, user: keys.User) -> Steps[int]:
        """Mark everything in the chat read by ``user``; how many messages were unread."""
        chat_id = _chat_id(chat_id)
        user = self._user(user)
        reply = _checked(
            (yield self._run(chat_id, "fetch", user, _user_channel(user))), chat_id, user
        )
        return int(reply[1]) + len(reply[2])

    def _join(self, chat_id: str, user: keys.User) -> Steps[None]:
        """Add ``user`` to the chat; they will receive the messages sent from now on.

        Joining a chat one is in already changes nothing. Joining an unknown chat
        raises :class:`ChatNotFound` and changes nothing (if the chat is deleted between
        the check and the join, the user's index entry is taken back).
        """
        chat_id = _chat_id(chat_id)
        user = self._user(user)
        if not (yield lambda c: c.exists(_chat_keys(chat_id)[0])):
            raise ChatNotFound(f"no chat {chat_id}")
        [version] = yield from self._add_to_indexes(chat_id, [user])
        reply = yield self._run(chat_id, "join", user, version)
        if reply[0] == NO_CHAT:
            yield self._remove_from_index(user, [(chat_id, version)])
        _checked(reply, chat_id, user)

    def _leave(self, chat_id: str, user: keys.User) -> Steps[None]:
        """Remove ``user`` from the chat; the last member to leave deletes it."""
        chat_id = _chat_id(chat_id)
        user = self._user(user)
        reply = _checked((yield self._run(chat_id, "leave", user)), chat_id, user)
        yield self._remove_from_index(user, [(chat_id, int(reply[1]))])

    def _members(self, chat_id: str) -> Steps[list[str]]:
        """The chat's members: their pks, as strings, sorted as strings."""
        chat_id = _chat_id(chat_id)
        names = yield lambda c: c.zrange(_chat_keys(chat_id)[1], 0, -1)
        if not names:
            raise ChatNotFound(f"no chat {chat_id}")
        return sorted(text(name) for name in names)

    def _is_public(self, chat_id: str) -> Steps[bool]:
        """Whether anyone may join the chat through the views."""
        chat_id = _chat_id(chat_id)
        flag = yield lambda c: c.hget(_chat_keys(chat_id)[0], "public")
        if flag is None:
            raise ChatNotFound(f"no chat {chat_id}")
        return text(flag) == "1"

    def _chats_of(self, user: keys.User) -> Steps[list[str]]:
        """The ids of the chats ``user`` is a member of, in id order."""
        return list((yield from self._unread_counts(user)).per_chat)

    def _forget(self, user: keys.User) -> Steps[bool]:
        """Delete ``user``'s join counter once they are in no chat; ``False`` while they are.

        Only for accounts that will never again join a chat they were in, such as the
        per-channel accounts of file distribution (whose chat is deleted when the
        channel finishes): a chat remembers each member's latest join version, and a
        counter that started again from 1 would make it ignore a new join.
        """
        user = self._user(user)
        index, versions = keys.key("chat-index", user), keys.key("chat-index", user, "versions")
        return bool(
            (yield scripts.step((scripts.load("chat_index_forget"), [index, versions], [])))
        )

    create, acreate = twins(_create)
    send, asend = twins(_send)
    fetch_pending, afetch_pending = twins(_fetch_pending)
    unread_counts, aunread_counts = twins(_unread_counts)
    chat_list, achat_list = twins(_chat_list)
    history, ahistory = twins(_history)
    messages_after, amessages_after = twins(_messages_after)
    mark_read, amark_read = twins(_mark_read)
    join, ajoin = twins(_join)
    leave, aleave = twins(_leave)
    members, amembers = twins(_members)
    is_public, ais_public = twins(_is_public)
    chats_of, achats_of = twins(_chats_of)
    forget, aforget = twins(_forget)

    # Helpers. Each reads or writes one slot: a chat's or a user's.

    def _user(self, user: keys.User, field: str = "user") -> str:
        """``user`` as the chats know them (:func:`~redis_components.keys.user_id`): a pk
        given as an ``int`` or ``str`` must be one the user model's pk can have (its
        ``to_python`` takes it; ``"007"`` is ``"7"``), else :class:`InvalidInput` names
        ``field`` and the value, so that a username is refused rather than kept as a
        member no user is. Any name is taken for ``accounts``, and while the views know
        users by username (``MESSAGING_USER_KEY = "username"``, 0.1's way)."""
        name = keys.user_id(user, field)
        if not isinstance(user, (str, int)):  # a saved user: their pk
            return name
        pk_field = get_user_model()._meta.pk
        if self.accounts or conf.MESSAGING_USER_KEY == "username" or pk_field is None:
            return name
        try:
            return keys.validate_name(str(pk_field.to_python(name)), field)
        except ValidationError:
            raise InvalidInput(
                field, f"must be a user or a user's primary key, not {keys.shorten(user)}"
            ) from None

    def _count_creation(self, sender: str) -> Steps[None]:
        """Count a chat ``sender`` creates; :class:`ChatLimitReached` past
        ``CHAT_CREATES_PER_MINUTE`` (a window that starts with their first in a minute)."""
        limit = self.creates_per_minute
        if limit is None:
            limit = conf.CHAT_CREATES_PER_MINUTE
        if not limit:
            return
        key = keys.key("chat-creates", sender)
        _, count, ttl = yield pipelined(
            lambda pipe: (pipe.set(key, 0, ex=60, nx=True), pipe.incr(key), pipe.ttl(key))
        )
        if int(count) > limit:
            raise ChatLimitReached(
                f"{sender!r} created {limit} chats in the last minute (CHAT_CREATES_PER_MINUTE)",
                retry_after=max(int(ttl), 1),
            )

    def _args(self, operation: str, user: str, *rest: scripts.Arg) -> list[scripts.Arg]:
        max_age = conf.CHAT_MAX_AGE
        keep = conf.CHAT_KEEP_READ if self.keep_read is None else self.keep_read
        limits = [conf.CHAT_MAX_MESSAGES, 0 if max_age is None else max_age, int(keep)]
        return [operation, user, *limits, *rest]

    def _run(self, chat_id: str, operation: str, user: str, *rest: scripts.Arg) -> Step:
        """The step that runs ``operation`` of lua/chat.lua on the chat; it replies a list."""
        args = self._args(operation, user, *rest)
        return scripts.step((scripts.load("chat"), _chat_keys(chat_id), args))

    def _index(self, user: str) -> Steps[dict[str, int]]:
        """The user's index, chat id -> join version, in chat id order."""
        entries = yield lambda c: c.hgetall(keys.key("chat-index", user))
        index = {text(chat_id): int(version) for chat_id, version in entries.items()}
        return dict(sorted(index.items(), key=lambda entry: int(entry[0])))

    def _on_chats_of(
        self, user: str, index: dict[str, int], operation: str, *rest: str
    ) -> Steps[list[tuple[str, list[Any]]]]:
        """Run ``operation`` on every chat of the index in one pipeline.

        Returns ``(chat_id, reply)`` for the chats that list the user as a member, and
        removes the index entries of the others whose join the chat has applied or
        overtaken (an entry whose join is still on its way is kept).
        """
        chat = scripts.load("chat")
        args = self._args(operation, user, *rest)
        calls = [(chat, _chat_keys(chat_id), args) for chat_id in index]
        replies = yield scripts.many(calls)
        done, stale = [], []
        for (chat_id, version), reply in zip(index.items(), replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            if reply[0] == DONE:
                done.append((chat_id, reply))
            elif reply[0] == NOT_MEMBER and version <= int(reply[1]):
                stale.append((chat_id, version))
        if stale:
            yield self._remove_from_index(user, stale)
        return done

    def _pending(self, user: str, index: dict[str, int]) -> Steps[list[Pending]]:
        pending = []
        replies = yield from self._on_chats_of(user, index, "fetch", _user_channel(user))
        for chat_id, (_, missed, packed) in replies:
            if packed or missed:
                pending.append(Pending(chat_id, MessageList(tuple(_decode(packed)), int(missed))))
        return pending

    def _watch(
        self,
        user: str,
        deadline: float,
        look: Callable[[dict[str, int]], Steps[T]],
        enough: Callable[[T], bool],
    ) -> Steps[T]:
        """``look(index)`` at the user's chats whenever something is published on them or
        on the user's own channel, until ``enough`` of what it returns or ``deadline``;
        the last look.

        Every channel is subscribed (and the subscription confirmed) before the look that
        follows it, and the user's own channel before the index is read, so a message
        sent or a chat joined in between wakes the loop rather than wait for the deadline.
        """

        def looking(also: Callable[[set[str]], Steps[bool]]) -> Steps[T]:
            index = yield from self._index(user)
            yield from also({_chat_keys(chat_id)[3] for chat_id in index})
            return (yield from look(index))

        return (yield from watching(deadline, {_user_channel(user)}, looking, enough))

    def _add_to_indexes(self, chat_id: str, users: list[str]) -> Steps[list[int]]:
        """Add the chat to each user's index (one pipeline); return each join's version."""
        add = scripts.load("chat_index_add")
        calls = [
            (add, [keys.key("chat-index", u), keys.key("chat-index", u, "versions")], [chat_id])
            for u in users
        ]
        versions = yield scripts.many(calls)
        for version in versions:
            if isinstance(version, Exception):
                raise version
        return [int(version) for version in versions]

    def _remove_from_index(self, user: str, entries: list[tuple[str, int]]) -> Step:
        pairs = [value for entry in entries for value in entry]
        return scripts.step(
            (scripts.load("chat_index_remove"), [keys.key("chat-index", user)], pairs)
        )


def _chat_keys(chat_id: str) -> list[str]:
    """meta, members, joins, messages: the KEYS of lua/chat.lua."""
    chat = keys.key("chat", chat_id)  # built once: sending is a hot path
    return [f"{chat}:{part}" for part in ("meta", "members", "joins", "messages")]


def _checked(reply: list[Any], chat_id: str, user: str) -> list[Any]:
    """The reply of lua/chat.lua, or the exception its status stands for."""
    if reply[0] == NO_CHAT:
        raise ChatNotFound(f"no chat {chat_id}")
    if reply[0] == NOT_MEMBER:
        raise NotAMember(f"{user!r} is not a member of chat {chat_id}")
    return reply


def _user_channel(user: str) -> str:
    """The user's own channel (named as their chat index): the user's waiting pages
    (:meth:`GroupChat.fetch_pending`, :meth:`GroupChat.unread_counts`) hear on it of chats
    joined and of messages read, in any tab."""
    return keys.key("chat-index", user)


def _decode(packed: Iterable[bytes | str]) -> list[Message]:
    messages = []
    for item in packed:
        data = json.loads(item)
        messages.append(Message(data["id"], data["ts"], data["sender"], data["message"]))
    return messages


def _mark(shown: UnreadCounts | Mapping[str, int] | str | None) -> str | None:
    """The mark of the counts a caller shows, given as counts, a mapping or a mark."""
    if isinstance(shown, UnreadCounts):
        return shown.mark
    if isinstance(shown, Mapping):
        return UnreadCounts(dict(shown)).mark
    return shown


def _chat_id(value: object) -> str:
    if isinstance(value, str) and CHAT_ID.fullmatch(value):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and value[0] != "0":
        raise InvalidInput("chat_id", f"has {len(value)} digits: no chat id has over 18")
    raise InvalidInput("chat_id", "must be a chat id: a string of digits such as '42'")


def _message_text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput("message", f"must be a string, not {type(value).__name__}")
    if not value.strip():
        raise InvalidInput("message", "must not be empty")
    most = conf.CHAT_MAX_MESSAGE_LENGTH
    if len(value) > most:
        raise InvalidInput("message", f"must be at most {most} characters, not {len(value)}")
    # Line breaks and tabs are text; other control characters are not.
    keys.validate_text(LINE_BREAKS_AND_TABS.sub("", value), "message")
    return value


def _positive_int(value: object) -> bool:
    return keys.is_integer(value) and value >= 1
