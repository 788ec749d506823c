"""The one place that builds key names, and validates the names users supply.

Every key is ``<KEY_PREFIX>:<component>:{<name>}[:<part>...]``. The braces make
``<name>`` the Redis Cluster hash tag, so every key of one lock, chat or queue lands
in one slot and a script may touch them together. Braces and ``%`` inside a name
are percent-escaped, so no name can end the tag early or produce an empty tag
(which would make Redis hash the whole key and split one object over several slots).
"""

from __future__ import annotations

import datetime
import math
import unicodedata
from typing import TYPE_CHECKING, TypeGuard

from django.conf import settings
from django.utils import timezone

from .conf import conf
from .exceptions import InvalidInput

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    # How the services take a user: a saved Django user, or its primary key. (An
    # AnonymousUser is accepted by the type, as request.user, and refused at run time.)
    User = AbstractBaseUser | AnonymousUser | int | str

MAX_NAME_LENGTH = 1000

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def validate_name(value: object, field: str = "name", max_length: int = MAX_NAME_LENGTH) -> str:
    """Return ``value`` if it is a usable name, else raise :class:`InvalidInput`.

    A name is a non-empty ``str`` of at most ``max_length`` characters without
    control characters or unpaired surrogates; any other Unicode is allowed.
    """
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidInput(field, "must not be empty")
    if len(value) > max_length:
        raise InvalidInput(field, f"must be at most {max_length} characters, not {len(value)}")
    validate_text(value, field)
    return value


def validate_text(value: str, field: str) -> None:
    """Raise :class:`InvalidInput` if ``value`` holds a control character or a surrogate."""
    for char in value:
        category = unicodedata.category(char)
        if category in ("Cc", "Cs"):
            raise InvalidInput(field, f"must not contain the control character {char!r}")


def user_id(user: User, field: str = "user") -> str:
    """The one rule for identifying a user in Redis keys and data: their primary key.

    A saved Django user gives ``str(user.pk)``; an ``int`` or a ``str`` is taken as the
    primary key itself (a ``str`` must be a valid name: see :func:`validate_name`).
    Anything else (an unsaved user, an anonymous one, ``None``, a bool) raises
    :class:`InvalidInput` naming ``field``.
    """
    if isinstance(user, str):
        return validate_name(user, field)
    if is_integer(user):
        return str(user)
    if isinstance(user, (bool, bytes, float)) or user is None:
        raise InvalidInput(field, f"must be a saved user or a user id, not {shorten(user)}")
    pk = getattr(user, "pk", None)
    if pk is None:
        raise InvalidInput(field, "must be a saved user or a user id (this user has no pk)")
    return validate_name(str(pk), field)


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool`` (``True`` is an int to Python,
    never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: object, field: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` if it is an integer (not a bool) from ``minimum`` to ``maximum``, else
    :class:`InvalidInput` naming ``field``."""
    if is_integer(value) and value >= minimum and (maximum is None or value <= maximum):
        return value
    if maximum is not None:
        wanted = f"an integer from {minimum} to {maximum}"
    elif minimum in (0, 1):
        wanted = "a positive integer" if minimum else "a non-negative integer"
    else:
        wanted = f"an integer of at least {minimum}"
    raise InvalidInput(field, f"must be {wanted}, not {shorten(value)}")


def utc_from_ms(ms: int | None) -> datetime.datetime | None:
    """An aware UTC datetime from milliseconds since the epoch (how times are kept in
    Redis); ``None`` for ``None``, or for a time no datetime can hold."""
    if ms is None:
        return None
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


# The longest duration any argument may name: ten years (Redis's expiry times, in ms
# since the epoch, must stay far inside 64 bits).
MAX_SECONDS = 10 * 365 * 24 * 3600


def seconds(value: object, field: str, *, positive: bool = False) -> float:
    """``value`` as a number of seconds (an int or float, not a bool), from 0 (above 0 when
    ``positive``) to :data:`MAX_SECONDS`; else :class:`InvalidInput`."""
    number = math.nan
    if is_integer(value) or isinstance(value, float):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        kind = "a positive" if positive else "a finite, non-negative"
        raise InvalidInput(field, f"must be {kind} number of seconds, not {shorten(value)}")
    if number > MAX_SECONDS:
        raise InvalidInput(
            field,
            f"must be at most {MAX_SECONDS:,} seconds (ten years), not {shorten(value)}",
        )
    return number


def shorten(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters: error messages never repeat all of a
    large bad value."""
    if is_integer(value) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


def escape(name: str) -> str:
    """Make ``name`` safe inside a hash tag (injective: distinct names stay distinct)."""
    return name.translate(_ESCAPES)


def key(component: str, name: str, *parts: str) -> str:
    """Build ``<prefix>:<component>:{<name>}[:<part>...]`` for an already validated name."""
    tail = "".join(f":{part}" for part in parts)
    return f"{conf.KEY_PREFIX}:{component}:{{{escape(name)}}}{tail}"


def django_time(ms: int | None) -> datetime.datetime | None:
    """Epoch ms as Django's own backends give times: aware, or naive local time when
    ``USE_TZ`` is False."""
    return django_datetime(utc_from_ms(ms))


def django_datetime(value: datetime.datetime | None) -> datetime.datetime | None:
    """An aware time as Django's own backends give it (naive local when ``USE_TZ`` is False)."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)
