"""Autocomplete: a user's recent contacts, and a large set of names searched by prefix.

The two structures of *Redis in Action* 6.1, kept, with their flaws fixed:

- :class:`RecentContacts` keeps each user's newest contacts in a LIST, as the book does.
  ``add`` moves a contact to the front and trims the list in one MULTI/EXEC round trip;
  ``suggest`` reads the short list and filters it in Python.
- :class:`Guild` keeps many names in a ZSET whose scores are all 0, so members sort by
  their bytes. Each member is stored as ``normalized + "\\x00" + name``: a prefix query
  is then one ``ZRANGEBYLEX`` with a LIMIT, with no writes and no retries, instead of
  the book's temporary marker members under WATCH.

Matching ignores case and accents in any script: names and prefixes are compared in
their :func:`normalize` form. Names come back exactly as they were added, and two names
with the same normalized form (``Zoe`` and ``Zoë``) are both kept.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import lru_cache
from itertools import islice
from typing import TYPE_CHECKING, Any

from . import keys
from .conf import conf
from .connection import Steps, get_client, pipelined, text
from .exceptions import InvalidInput
from .twins import twins

if TYPE_CHECKING:
    from django.http import HttpRequest

    from .keys import User

MAX_NAME_LENGTH = 200
MAX_PREFIX_LENGTH = 100
# Sorts before every character a normalized name can hold (names have no control
# characters), so "ab" and its entries sort before "abc".
SEPARATOR = "\x00"
# Members per ZADD in join_many: large guilds are loaded in several commands of one
# transaction rather than one huge command.
JOIN_BATCH = 10_000


# Latin letters that are a base letter with a stroke, or a ligature, which Unicode
# does not decompose; users type them as these letters.
_LETTERS = str.maketrans(
    {
        "æ": "ae",
        "œ": "oe",
        "ø": "o",
        "đ": "d",
        "ð": "d",
        "ł": "l",
        "þ": "th",
        "ħ": "h",
        "ŧ": "t",
        "\u0131": "i",  # dotless i
    }
)


# Recent contacts normalize every contact on each query: the same few names, again.
@lru_cache(maxsize=4096)
def normalize(value: str) -> str:
    """The form in which names and prefixes are compared.

    Compatibility decomposition (NFKD) around Unicode case folding, as the Unicode
    standard defines caseless matching, then without nonspacing marks (accents) and
    with the few Latin letters that do not decompose spelled out:
    ``normalize("ÎÑ") == "in"``, ``normalize("Ærwyn") == "aerwyn"``,
    ``normalize("Straße") == "strasse"``, ``normalize("がくせい") == "かくせい"``.
    """
    if value.isascii():  # its own NFKD, and casefold() is lower() there
        return value.lower()
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", value).casefold())
    return "".join(char for char in folded if unicodedata.category(char) != "Mn").translate(
        _LETTERS
    )


def find_prefix_range(prefix: str) -> tuple[bytes, bytes]:
    """The ``ZRANGEBYLEX`` bounds that hold every member whose name starts with ``prefix``.

    The book's idea, correct for any prefix: members are UTF-8 and begin with the
    normalized name, so ``[<prefix>`` is at or below every match and ``(<prefix>\\xff``
    above all of them (no UTF-8 text holds the byte 0xFF). Nothing is written.
    """
    start = normalize(validate_prefix(prefix)).encode()
    return b"[" + start, b"(" + start + b"\xff"


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a usable search prefix, else raise :class:`InvalidInput`.

    The empty prefix is allowed (it matches every name).
    """
    if not isinstance(prefix, str):
        raise InvalidInput("prefix", f"must be a string, not {type(prefix).__name__}")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise InvalidInput(
            "prefix", f"must be at most {MAX_PREFIX_LENGTH} characters, not {len(prefix)}"
        )
    keys.validate_text(prefix, "prefix")
    return prefix


def validate_limit(limit: object) -> int:
    """The number of suggestions to return: ``limit`` capped by AUTOCOMPLETE_MAX_RESULTS."""
    most = conf.AUTOCOMPLETE_MAX_RESULTS
    if limit is None:
        return most
    return min(keys.integer(limit, "limit"), most)


def validate_member(name: object, field: str = "name") -> str:
    """Return ``name`` if it may be stored (1-200 characters, no control characters)."""
    return keys.validate_name(name, field, max_length=MAX_NAME_LENGTH)


def validate_contact(name: object, field: str = "contact") -> str:
    """A name a person is known by: as :func:`validate_member`, and not only whitespace, nor
    holding U+FFFD (what a decoder puts for bytes that were not UTF-8: the name meant is
    not known)."""
    name = validate_member(name, field)
    if not name.strip():
        raise InvalidInput(field, "must not be only whitespace")
    if "\ufffd" in name:
        raise InvalidInput(field, "must be valid UTF-8 text (it holds U+FFFD)")
    return name


class Guild:
    """A large set of names searched by prefix: a game guild's members, an address book.

    The names live in one ZSET, ``<KEY_PREFIX>:guild:{<guild name>}``, with every score
    0. ``suggest`` is one read-only command whatever the size of the guild; ``join``,
    ``leave`` and ``join_many`` are single atomic writes. Invalid names raise
    :class:`InvalidInput` and change nothing.
    """

    def __init__(self, name: str) -> None:
        self.name = keys.validate_name(name, "guild")

    def __repr__(self) -> str:
        return f"Guild({self.name!r})"

    @property
    def key(self) -> str:
        return keys.key("guild", self.name)

    def _join(self, name: str) -> Steps[bool]:
        """Add ``name``; False if it was already a member."""
        member = _member(name)
        return bool((yield lambda client: client.zadd(self.key, {member: 0})))

    def _join_many(self, names: Iterable[str]) -> Steps[int]:
        """Add every name in one transaction; return how many were not members yet.

        All names are validated before anything is sent: one bad name adds none.
        """
        if isinstance(names, str):
            raise InvalidInput("names", "must be an iterable of names, not one string")
        members = [_member(name) for name in names]

        def add(pipe: Any) -> None:
            for start in range(0, len(members), JOIN_BATCH):
                pipe.zadd(self.key, dict.fromkeys(members[start : start + JOIN_BATCH], 0))

        return sum((yield pipelined(add)))

    def _leave(self, name: str) -> Steps[bool]:
        """Remove ``name``; False if it was not a member."""
        member = _member(name)
        return bool((yield lambda client: client.zrem(self.key, member)))

    def __contains__(self, name: object) -> bool:
        try:
            member = _member(name)
        except InvalidInput:
            return False  # a name that cannot be stored is no member
        return get_client().zscore(self.key, member) is not None

    def __len__(self) -> int:
        return int(get_client().zcard(self.key))

    def _suggest(self, prefix: str, limit: int | None = None) -> Steps[list[str]]:
        """Up to ``limit`` names starting with ``prefix`` (ignoring case and accents), in order.

        One ``ZRANGEBYLEX ... LIMIT`` round trip; nothing is written. The empty prefix
        returns the first names.
        """
        low, high = find_prefix_range(prefix)
        most = validate_limit(limit)
        found = yield lambda client: client.zrangebylex(self.key, low, high, start=0, num=most)
        return [text(member).partition(SEPARATOR)[2] for member in found]

    join, ajoin = twins(_join)
    join_many, ajoin_many = twins(_join_many)
    leave, aleave = twins(_leave)
    suggest, asuggest = twins(_suggest)


def _member(name: object) -> str:
    """The ZSET member for ``name``: it sorts by the normalized form, then by the name."""
    valid = validate_member(name)
    return normalize(valid) + SEPARATOR + valid


class RecentContacts:
    """Each user's most recently used contacts, newest first, as in a mail client's "To:".

    One LIST per user, ``<KEY_PREFIX>:contacts:{<user id>}``, keeps at most
    ``capacity`` names (CONTACTS_MAX, 100 by default). ``user`` is a saved Django user
    or its primary key (``str`` or ``int``), as everywhere (:func:`~.keys.user_id`);
    contacts are names of 1-200 characters.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self._capacity = None if capacity is None else keys.integer(capacity, "capacity")

    @property
    def capacity(self) -> int:
        return self._capacity or conf.CONTACTS_MAX

    def _add(self, user: User, contact: str) -> Steps[None]:
        """Put ``contact`` at the front (moving it if present) and keep the newest ``capacity``.

        One MULTI/EXEC round trip, so concurrent adds never leave a duplicate or an
        over-long list.
        """
        key = _contacts_key(user)
        contact, most = validate_contact(contact), self.capacity - 1
        yield pipelined(
            lambda pipe: (
                pipe.lrem(key, 0, contact),
                pipe.lpush(key, contact),
                pipe.ltrim(key, 0, most),
            )
        )

    def _remove(self, user: User, contact: str) -> Steps[bool]:
        """Forget ``contact``; False if the user did not have it."""
        key, contact = _contacts_key(user), validate_member(contact, "contact")
        return bool((yield lambda client: client.lrem(key, 0, contact)))

    def _all(self, user: User) -> Steps[list[str]]:
        """Every contact of ``user``, most recent first."""
        key = _contacts_key(user)
        return [text(contact) for contact in (yield lambda client: client.lrange(key, 0, -1))]

    def _suggest(self, user: User, prefix: str, limit: int | None = None) -> Steps[list[str]]:
        """Up to ``limit`` contacts starting with ``prefix`` (ignoring case and accents).

        Most recent first; one round trip reads the list, Python filters it.
        """
        wanted = normalize(validate_prefix(prefix))
        count = validate_limit(limit)
        contacts = yield from self._all(user)
        matches = (name for name in contacts if normalize(name).startswith(wanted))
        return list(islice(matches, count))

    add, aadd = twins(_add)
    remove, aremove = twins(_remove)
    all, aall = twins(_all)
    suggest, asuggest = twins(_suggest)


def _contacts_key(user: User) -> str:
    return keys.key("contacts", keys.user_id(user))


def members_only(request: HttpRequest, guild: str) -> bool:
    """The default guild access rule: the signed-in user's username is a member."""
    user = request.user
    return user.is_authenticated and user.get_username() in Guild(guild)
