from __future__ import annotations

import datetime
import re

import pytest
from django.test import override_settings
from redis.crc import key_slot

from redis_components import keys
from redis_components.exceptions import InvalidInput
from redis_components.keys import escape, key, seconds, validate_name


def test_key_layout_and_prefix_from_settings() -> None:
    assert key("lock", "order:42") == "rc:lock:{order:42}"
    assert key("lock", "order:42", "fence") == "rc:lock:{order:42}:fence"
    with override_settings(REDIS_COMPONENTS={"KEY_PREFIX": "shop"}):
        assert key("chat", "7", "msgs") == "shop:chat:{7}:msgs"


@pytest.mark.parametrize("name", ["a}b", "}", "{", "{}", "}{", "%7D", "Zoë 🎉", "名前"])
def test_all_keys_of_a_name_share_one_cluster_slot(name: str) -> None:
    slots = {key_slot(key("lock", name, *parts).encode()) for parts in [(), ("fence",), ("q",)]}
    assert len(slots) == 1


def test_escaping_keeps_names_distinct() -> None:
    names = ["a}", "a%7D", "a%257D", "a{", "a"]
    assert len({escape(name) for name in names}) == len(names)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "must not be empty"),
        ("x" * 1001, "at most 1000"),
        ("a\nb", "control character"),
        ("a\x00b", "control character"),
        (42, "must be a string"),
        (None, "must be a string"),
    ],
)
def test_bad_names_are_refused_with_the_field(value: object, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem) as info:
        validate_name(value, field="lock name")
    assert info.value.field == "lock name"
    assert str(info.value).startswith("lock name: ")


def test_any_unicode_name_is_fine() -> None:
    assert validate_name("Ærwyn 王 🎉") == "Ærwyn 王 🎉"
    assert validate_name("x" * 1000) == "x" * 1000


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), 10**400, "5", True, None])
def test_bad_seconds_are_refused_with_the_field(value: object) -> None:
    with pytest.raises(InvalidInput, match="number of seconds") as info:
        seconds(value, "wait")
    assert info.value.field == "wait"


def test_seconds() -> None:
    assert seconds(0, "wait") == 0.0
    assert seconds(2.5, "wait") == 2.5
    with pytest.raises(InvalidInput, match="positive"):
        seconds(0, "timeout", positive=True)


@pytest.mark.parametrize(
    ("value", "minimum", "maximum", "wanted"),
    [
        (True, 1, None, "a positive integer, not True"),
        (0, 1, None, "a positive integer, not 0"),
        (-1, 0, None, "a non-negative integer, not -1"),
        (1.0, 0, None, "a non-negative integer, not 1.0"),
        (11, 1, 10, "an integer from 1 to 10, not 11"),
        (2, 3, None, "an integer of at least 3, not 2"),
        (10**400, 1, 10, "an integer from 1 to 10, not an integer of about 401 digits"),
    ],
)
def test_integers_are_ints_not_bools_within_their_bounds(
    value: object, minimum: int, maximum: int | None, wanted: str
) -> None:
    with pytest.raises(InvalidInput, match=f"^count: must be {re.escape(wanted)}$"):
        keys.integer(value, "count", minimum=minimum, maximum=maximum)
    assert keys.integer(minimum, "count", minimum=minimum, maximum=maximum) == minimum


def test_times_from_redis_are_aware_utc_or_none() -> None:
    assert keys.utc_from_ms(1_500) == datetime.datetime(
        1970, 1, 1, 0, 0, 1, 500_000, tzinfo=datetime.timezone.utc
    )
    assert keys.utc_from_ms(None) is None
    assert keys.utc_from_ms(10**20) is None  # beyond what a datetime holds
