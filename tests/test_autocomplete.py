from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import redis
from django.contrib.auth.models import AnonymousUser, User
from django.test import override_settings

from conftest import single_server_only
from redis_components import Guild, InvalidInput, RecentContacts
from redis_components.autocomplete import find_prefix_range, normalize
from tests.processes import run_processes

NAMES = [
    "Ærwyn",
    "aeron",
    "Zoë Saldaña",
    "Zoe",
    "zoe",
    "Zack",
    "îñônùdo",
    "Straße",
    "strasse",
    "Łukasz",
    "Øystein",
    "Ólafur",
    "ab",
    "abc",
    "abd",
    "a{b}",
    "Ab",
    "7th Knight",
    "山田太郎",
    "山本",
    "田中",
    "がくせい",
    "かくれんぼ",
    "한국",
    "Ἀθηνᾶ",
    "Владимир",
    "владислав",
]


def commands_and_writes(r: redis.Redis) -> tuple[int, int]:
    """Commands the server has run (INFO itself left out) and its count of changes."""
    stats = r.info("commandstats")
    calls = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return calls, int(r.info("persistence")["rdb_changes_since_last_save"])


def expected_matches(names: list[str], prefix: str) -> list[str]:
    """What a prefix query must answer, computed in Python: every name whose normalized
    form starts with the normalized prefix, in the order of their UTF-8 bytes."""
    wanted = normalize(prefix)
    matching = [name for name in names if normalize(name).startswith(wanted)]
    return sorted(matching, key=lambda name: (normalize(name).encode(), name.encode()))


# --- normalize and find_prefix_range ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("Zoë Saldaña", "zoe saldana"),
        ("ÎÑ", "in"),
        ("îñônùdo", "inonudo"),
        ("Ærwyn", "aerwyn"),
        ("Œuvre", "oeuvre"),
        ("Łódź", "lodz"),
        ("Øystein", "oystein"),
        ("Þór", "thor"),
        ("Straße", "strasse"),
        ("İstanbul", "istanbul"),
        ("ﬁre", "fire"),
        ("ＡＢＣ", "abc"),  # noqa: RUF001 - full-width letters on purpose
        ("Ἀθηνᾶ", "αθηνα"),
        ("Владимир", "владимир"),
        ("がくせい", "かくせい"),
        ("山田", "山田"),
        ("Plain ASCII 7", "plain ascii 7"),
    ],
)
def test_normalize_folds_case_and_accents_in_any_script(text: str, normalized: str) -> None:
    assert normalize(text) == normalized


def test_find_prefix_range_bounds_are_utf8_with_an_0xff_ceiling() -> None:
    assert find_prefix_range("Zoë") == (b"[zoe", b"(zoe\xff")
    assert find_prefix_range("山") == (b"[" + "山".encode(), b"(" + "山".encode() + b"\xff")
    assert find_prefix_range("") == (b"[", b"(\xff")


# --- Guild ----------------------------------------------------------------------------


def test_suggest_matches_exactly_what_python_computes_for_every_prefix(redis_mode: str) -> None:
    guild = Guild("knights")
    assert guild.join_many(NAMES) == len(NAMES)
    prefixes = {""} | {name[:n] for name in NAMES for n in (1, 2, 3)}
    prefixes |= {name[:n].upper() for name in NAMES for n in (1, 2)}
    prefixes |= {"ae", "AE", "æ", "zoe", "ZOË", "in", "ÎÑ", "ss", "stras", "o", "l", "zz", "{"}
    with override_settings(REDIS_COMPONENTS={"AUTOCOMPLETE_MAX_RESULTS": 1000}):
        for prefix in sorted(prefixes):
            assert guild.suggest(prefix) == expected_matches(NAMES, prefix), prefix


def test_suggest_on_random_unicode_names_agrees_with_python() -> None:
    rng = random.Random(5)
    alphabet = "aAbBeEéÉèzZçÇøØæßİı山田がかガ한국ΑαΩωЖж {}0-"  # noqa: RUF001 - look-alikes on purpose
    names = sorted({"".join(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(400)})
    guild = Guild("random")
    guild.join_many(names)
    with override_settings(REDIS_COMPONENTS={"AUTOCOMPLETE_MAX_RESULTS": 1000}):
        for name in rng.sample(names, 60):
            for prefix in (name[:1], name[:2], name[:3].swapcase()):
                assert guild.suggest(prefix) == expected_matches(names, prefix), prefix


def test_suggest_examples_the_book_gets_wrong() -> None:
    guild = Guild("knights")
    guild.join_many(NAMES)
    # The book's a-z version returned the whole guild for these one-character prefixes.
    assert guild.suggest("A") == ["Ab", "ab", "abc", "abd", "aeron", "Ærwyn", "a{b}"]
    assert guild.suggest("7") == ["7th Knight"]
    # A member equal to the prefix is found (the book's markers skip it), braces are fine.
    assert guild.suggest("abc") == ["abc"]
    assert guild.suggest("a{") == ["a{b}"]
    assert guild.suggest("aer") == ["aeron", "Ærwyn"]
    assert guild.suggest("山") == ["山本", "山田太郎"]
    assert guild.suggest("ÎÑ") == ["îñônùdo"]


def test_names_that_normalize_alike_are_all_kept_and_returned_as_added() -> None:
    guild = Guild("knights")
    assert guild.join("Zoë")
    assert guild.join("Zoe")
    assert guild.join("zoe")
    assert not guild.join("Zoë")
    assert len(guild) == 3
    assert guild.suggest("ZOE") == ["Zoe", "Zoë", "zoe"]


def test_limit_is_capped_by_the_setting_and_empty_prefix_lists_the_first_names() -> None:
    guild = Guild("big")
    names = [f"member {i:03}" for i in range(50)]
    guild.join_many(names)
    assert guild.suggest("member", limit=3) == names[:3]
    assert guild.suggest("member", limit=500) == names[:10]
    assert guild.suggest("") == names[:10]
    with override_settings(REDIS_COMPONENTS={"AUTOCOMPLETE_MAX_RESULTS": 25}):
        assert guild.suggest("m", limit=500) == names[:25]
        assert guild.suggest("m") == names[:25]


@single_server_only
def test_suggest_is_one_command_and_writes_nothing(r: redis.Redis) -> None:
    guild = Guild("knights")
    guild.join_many(NAMES)
    before = commands_and_writes(r)
    assert guild.suggest("zo") == ["Zoe", "zoe", "Zoë Saldaña"]
    after = commands_and_writes(r)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 0)


def test_join_leave_contains_len(redis_mode: str) -> None:
    guild = Guild("knights")
    assert len(guild) == 0
    assert guild.join("Ærwyn")
    assert "Ærwyn" in guild
    assert "ærwyn" not in guild
    assert "x" * 500 not in guild
    assert guild.leave("Ærwyn")
    assert not guild.leave("Ærwyn")
    assert "Ærwyn" not in guild
    assert len(guild) == 0


def test_join_many_loads_in_batches_inside_one_transaction(r: redis.Redis) -> None:
    guild = Guild("huge")
    names = [f"knight {i}" for i in range(25_000)]
    assert guild.join_many(names) == 25_000
    assert guild.join_many([*names[:10], "new"]) == 1
    assert len(guild) == 25_001
    assert r.type(guild.key) == b"zset"
    assert guild.key == "rc:guild:{huge}"


def test_join_many_with_one_bad_name_adds_nothing() -> None:
    guild = Guild("knights")
    with pytest.raises(InvalidInput) as caught:
        guild.join_many(["good", "also good", "x" * 201])
    assert caught.value.field == "name"
    assert len(guild) == 0
    with pytest.raises(InvalidInput, match="names"):
        guild.join_many("one string")


@pytest.mark.parametrize(
    ("call", "field", "problem"),
    [
        (lambda g: g.suggest("x" * 101), "prefix", "at most 100"),
        (lambda g: g.suggest("a\nb"), "prefix", "control character"),
        (lambda g: g.suggest(42), "prefix", "must be a string"),
        (lambda g: g.suggest("a", limit=0), "limit", "positive integer"),
        (lambda g: g.suggest("a", limit=-3), "limit", "positive integer"),
        (lambda g: g.suggest("a", limit=True), "limit", "positive integer"),
        (lambda g: g.suggest("a", limit="5"), "limit", "positive integer"),
        (lambda g: g.join("x" * 201), "name", "at most 200"),
        (lambda g: g.join(""), "name", "must not be empty"),
        (lambda g: g.join("tab\there"), "name", "control character"),
        (lambda g: g.join(None), "name", "must be a string"),
        (lambda g: g.leave("x" * 201), "name", "at most 200"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    call: Callable[[Guild], object], field: str, problem: str, r: redis.Redis
) -> None:
    guild = Guild("knights")
    guild.join("Ærwyn")
    before = commands_and_writes(r)[1]
    with pytest.raises(InvalidInput, match=problem) as caught:
        call(guild)
    assert caught.value.field == field
    assert commands_and_writes(r)[1] == before
    assert guild.suggest("") == ["Ærwyn"]


def test_a_prefix_of_100_characters_and_a_name_of_200_are_accepted() -> None:
    guild = Guild("knights")
    assert guild.join("é" * 200)
    assert guild.suggest("É" * 100) == ["é" * 200]


@pytest.mark.parametrize("name", ["", "x" * 1001, "a\x00b", 7])
def test_bad_guild_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        Guild(name)  # type: ignore[arg-type]
    assert caught.value.field == "guild"


def test_guilds_are_separate() -> None:
    assert repr(Guild("knights")) == "Guild('knights')"
    Guild("knights").join("Ærwyn")
    Guild("mages").join("Aeris")
    assert Guild("knights").suggest("ae") == ["Ærwyn"]
    assert Guild("mages").suggest("ae") == ["Aeris"]


# --- RecentContacts -----------------------------------------------------------------


def test_add_moves_to_the_front_without_duplicates(redis_mode: str) -> None:
    contacts = RecentContacts()
    for name in ["Ann", "Bob", "Zoë Saldaña", "Bob"]:
        contacts.add("u1", name)
    assert contacts.all("u1") == ["Bob", "Zoë Saldaña", "Ann"]


def test_add_keeps_only_the_newest_capacity(r: redis.Redis) -> None:
    contacts = RecentContacts()
    for i in range(130):
        contacts.add(7, f"contact {i}")
    kept = contacts.all(7)
    assert kept == [f"contact {i}" for i in range(129, 29, -1)]
    small = RecentContacts(capacity=3)
    small.add(7, "newest")
    assert small.all(7) == ["newest", "contact 129", "contact 128"]
    with override_settings(REDIS_COMPONENTS={"CONTACTS_MAX": 2}):
        RecentContacts().add(7, "x")
        assert RecentContacts().all(7) == ["x", "newest"]
    assert r.llen("rc:contacts:{7}") == 2


def test_add_is_one_transaction_in_one_round_trip(r: redis.Redis) -> None:
    contacts = RecentContacts()
    contacts.add("u1", "Ann")
    before = r.info("commandstats")
    contacts.add("u1", "Bob")
    after = r.info("commandstats")
    ran = {k: after[k]["calls"] - before.get(k, {"calls": 0})["calls"] for k in after}
    ran = {k.removeprefix("cmdstat_"): v for k, v in ran.items() if v and k != "cmdstat_info"}
    assert ran == {"multi": 1, "lrem": 1, "lpush": 1, "ltrim": 1, "exec": 1}


def test_suggest_is_case_and_accent_insensitive_and_most_recent_first(redis_mode: str) -> None:
    contacts = RecentContacts()
    for name in ["îñônùdo", "Zoë Saldaña", "zoe", "Zack", "ZOE ADAMS", "Ivan"]:
        contacts.add("u1", name)
    assert contacts.suggest("u1", "ÎÑ") == ["îñônùdo"]
    assert contacts.suggest("u1", "zoe") == ["ZOE ADAMS", "zoe", "Zoë Saldaña"]
    assert contacts.suggest("u1", "zoë", limit=2) == ["ZOE ADAMS", "zoe"]
    assert contacts.suggest("u1", "z", limit=50) == ["ZOE ADAMS", "Zack", "zoe", "Zoë Saldaña"]
    assert contacts.suggest("u1", "") == contacts.all("u1")
    assert contacts.suggest("u1", "q") == []
    assert contacts.suggest("nobody", "z") == []


def test_remove() -> None:
    contacts = RecentContacts()
    contacts.add("u1", "Ann")
    contacts.add("u1", "Bob")
    assert contacts.remove("u1", "Ann")
    assert not contacts.remove("u1", "Ann")
    assert contacts.all("u1") == ["Bob"]


@pytest.mark.django_db
def test_users_are_separate_and_may_be_models_or_ids() -> None:
    alice = User.objects.create(username="alice")
    contacts = RecentContacts()
    contacts.add(alice, "Zoë")
    contacts.add("someone-else", "Zack")
    assert contacts.all(alice) == ["Zoë"]
    assert contacts.all(alice.pk) == ["Zoë"]
    assert contacts.all(str(alice.pk)) == ["Zoë"]
    assert contacts.suggest("someone-else", "z") == ["Zack"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.add(AnonymousUser(), "Ann"), "user"),
        (lambda c: c.add(User(username="unsaved"), "Ann"), "user"),
        (lambda c: c.add(None, "Ann"), "user"),
        (lambda c: c.add("", "Ann"), "user"),
        (lambda c: c.add("u1", "x" * 201), "contact"),
        (lambda c: c.add("u1", "bell\a"), "contact"),
        (lambda c: c.add("u1", b"bytes"), "contact"),
        (lambda c: c.suggest("u1", "x" * 101), "prefix"),
        (lambda c: c.suggest("u1", "a", limit=0), "limit"),
        (lambda c: c.remove("u1", ""), "contact"),
    ],
)
def test_contacts_bad_input_names_the_field_and_changes_nothing(
    call: Callable[[RecentContacts], object], field: str
) -> None:
    contacts = RecentContacts()
    contacts.add("u1", "Ann")
    with pytest.raises(InvalidInput) as caught:
        call(contacts)
    assert caught.value.field == field
    assert contacts.all("u1") == ["Ann"]


@pytest.mark.parametrize("capacity", [0, -1, True, 2.5])
def test_bad_capacity_is_refused(capacity: object) -> None:
    with pytest.raises(InvalidInput, match="capacity"):
        RecentContacts(capacity)  # type: ignore[arg-type]


def _add_contacts(worker: int) -> None:
    contacts = RecentContacts(capacity=50)
    rng = random.Random(worker)
    for _ in range(300):
        contacts.add("shared", f"contact {rng.randrange(80)}")


def test_concurrent_adds_never_duplicate_or_overfill(r: redis.Redis) -> None:
    run_processes(_add_contacts, [(worker,) for worker in range(4)])
    kept = RecentContacts().all("shared")
    assert len(kept) == 50
    assert len(set(kept)) == 50


PERMANENT = ["tempest", "temple", "tempo"]


def _churn_or_read(role: str, worker: int) -> None:
    guild = Guild("busy")
    for i in range(300):
        if role == "writer":
            guild.join(f"temp {worker} {i}")
            guild.leave(f"temp {worker} {i}")
        else:
            assert guild.suggest("tempe") == ["tempest"]
            found = guild.suggest("temp")
            assert found == sorted(found)
            permanent = [name for name in found if not name.startswith("temp ")]
            assert permanent == PERMANENT[: len(permanent)]
            assert len(found) == 10 or permanent == PERMANENT


def test_suggest_during_concurrent_joins_and_leaves_is_consistent() -> None:
    Guild("busy").join_many(PERMANENT)
    run_processes(_churn_or_read, [("writer", 0), ("writer", 1), ("reader", 2), ("reader", 3)])
    assert Guild("busy").suggest("temp") == PERMANENT
