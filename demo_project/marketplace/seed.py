"""The demo's starting data: people, funds, unique items, listings, contacts, a chat.

Every step is idempotent: seeding twice leaves the same data as seeding once.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from redis_components import GroupChat, Guild, RecentContacts

from .market import Market
from .names import guild_names

DEMO_PASSWORD = "redis-demo"
PEOPLE = ["alice", "bob", "carol", "dave", "erin"]
FUNDS = 1000
ADJECTIVES = [
    "Amber", "Brass", "Cobalt", "Dusky", "Emerald", "Frosted", "Gilded", "Hollow",
    "Ivory", "Jade", "Kindled", "Lunar", "Mossy", "Nimble", "Onyx", "Pearl",
]  # fmt: skip
NOUNS = [
    "Compass", "Lantern", "Sword", "Shield", "Cloak", "Amulet", "Tome", "Chalice",
    "Dagger", "Helm", "Ring", "Quiver", "Staff", "Gauntlet", "Map", "Flute",
]  # fmt: skip
ITEMS_EACH = 8
LISTED_EACH = 3
GUILD = "traders"
GUILD_SIZE = 120_000

# progress(step, partial): partial steps (a count going up) may be overwritten by the next.
Progress = Callable[[str, bool], None]


def seed(
    market: Market, progress: Progress = lambda step, partial: None, guild_size: int = GUILD_SIZE
) -> None:
    users = _people(progress)
    _market(market, users, progress)
    _contacts(users, progress)
    _guild(guild_size, progress)
    _chat(market, users, progress)


def _people(progress: Progress) -> dict[str, int]:
    model = get_user_model()
    ids = {}
    for n, name in enumerate(PEOPLE):
        user, created = model._default_manager.get_or_create(
            username=name, defaults={"email": f"{name}@example.com", "is_staff": n == 0}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
            if n == 0:  # staff: the task queues' admin pages, and their actions
                user.user_permissions.add(
                    Permission.objects.get(
                        content_type__app_label="redis_components", codename="manage_task_queues"
                    )
                )
        ids[name] = user.pk
    staff = f"{PEOPLE[0]} is staff and may act on the task queues"
    progress(f"{len(ids)} users (password {DEMO_PASSWORD!r}); {staff}", False)
    return ids


def _market(market: Market, users: dict[str, int], progress: Progress) -> None:
    rng = random.Random(6)  # the same items and prices on every machine
    names = [f"{a} {n}" for a in ADJECTIVES for n in NOUNS]
    rng.shuffle(names)
    known = {name.decode() if isinstance(name, bytes) else name
             for name in market.client.smembers(market.key("items"))}  # fmt: skip
    made = listed = 0
    for n, (person, user_id) in enumerate(sorted(users.items(), key=lambda pair: pair[1])):
        market.add_user(user_id, person, FUNDS)
        for k, item in enumerate(names[n * ITEMS_EACH : (n + 1) * ITEMS_EACH]):
            if item in known:
                continue
            market.make_item(user_id, item)
            made += 1
            if k < LISTED_EACH:
                market.list_item(item, user_id, rng.randint(5, 120))
                listed += 1
    progress(f"market: {made} new items, {listed} listed for sale", False)


def _contacts(users: dict[str, int], progress: Progress) -> None:
    contacts = RecentContacts()
    for person, user_id in users.items():
        if not contacts.all(user_id):
            for other in PEOPLE:
                if other != person:
                    contacts.add(user_id, other)
    progress("recent contacts: everyone knows everyone", False)


def _guild(size: int, progress: Progress) -> None:
    guild = Guild(GUILD)
    guild.join_many(PEOPLE)
    batch: list[str] = []
    for n, name in enumerate(guild_names(size), start=1):
        batch.append(name)
        if len(batch) == 10_000 or n == size:
            guild.join_many(batch)
            batch = []
            progress(f"guild {GUILD!r}: {n:,} of {size:,} names", True)
    progress(f"guild {GUILD!r}: {len(guild):,} members", False)


def _chat(market: Market, users: dict[str, int], progress: Progress) -> None:
    marker = market.key("seeded-chat")
    if market.client.exists(marker):
        return
    chat_id = GroupChat().create(
        users[PEOPLE[0]],
        [users[person] for person in PEOPLE[1:3]],
        "Welcome to the market chat! Ask about an item here.",
    )
    market.client.set(marker, chat_id)
    progress(f"chat {chat_id} for {', '.join(PEOPLE[:3])}", False)
