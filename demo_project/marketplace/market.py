"""The market of the book's running example, with its three ways of buying safely.

Data, as the book lays it out (every key of one market shares the ``{<market>}`` hash
tag, so the market also runs on Redis Cluster)::

    demo:{main}:users:<id>       hash: name, funds, and trade stats (sold, earned, bought, spent)
    demo:{main}:sale:<id>        a recorded sale, so that it counts once (expires)
    demo:{main}:inventory:<id>   set of the items a user owns
    demo:{main}:market           ZSET "<item>.<seller id>" -> price
    demo:{main}:people           set of every user id (for the invariant check)
    demo:{main}:items            set of every item ever made (items are unique names)
    demo:{main}:total            the total of all funds, which trades never change

Buying checks that the item is still listed at the price the buyer saw and that the
buyer can pay, then moves the money and the item in one MULTI/EXEC. What keeps two
buyers (or a buyer and the item's seller) apart is the mode, one of the book's three:

- ``"watch"``: optimistic, WATCH the market and the buyer, retry when either changed;
- ``"lock"``: one coarse lock on the whole market;
- ``"fine"``: a lock on the one listing, plus one on the buyer so that two purchases by
  the same buyer cannot both spend the same funds (the book locks the item alone,
  which lets funds go negative). The locks are taken in sorted order, all or nothing.

A seller withdrawing a listing takes the same listing lock as a purchase, so of a
withdraw and a purchase of one item exactly one happens. Each lock's name is written
once, below (``ITEM_LOCK``, ``USER_LOCK``): the market fills them in, and so does the
site's buy view (``@redis_lock(*PURCHASE_LOCKS)``), so the two cannot drift apart.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import redis

from redis_components import get_client, redis_lock
from redis_components.exceptions import LockNotAcquired

Mode = Literal["watch", "lock", "fine"]
MODES: tuple[Mode, ...] = ("watch", "lock", "fine")
Outcome = Literal["bought", "gone", "price changed", "cannot pay", "busy", "own item"]

LOCK_TIMEOUT = 10
BUSY_TIMEOUT = 10  # how long a purchase waits for its locks, as in the book


@dataclass(frozen=True)
class Purchase:
    """What became of one purchase attempt."""

    outcome: Outcome
    price: int | None = None  # what the buyer paid, when bought
    balance: int | None = None  # the buyer's funds afterwards
    retries: int = 0  # WATCH retries

    @property
    def ok(self) -> bool:
        return self.outcome == "bought"


def listing(item: str, seller: int) -> str:
    """The market member for ``item`` sold by ``seller``: "<item>.<seller id>"."""
    return f"{item}.{seller}"


def parse_listing(member: str) -> tuple[str, int]:
    item, _, seller = member.rpartition(".")
    return item, int(seller)


MAX_ITEM_NAME = 100


def item_name_problem(item: str) -> str | None:
    """What is wrong with ``item`` as an item's name, or ``None``: names are 1 to
    100 characters of text (no control characters), not only spaces."""
    if not item.strip():
        return "An item needs a name."
    if len(item) > MAX_ITEM_NAME:
        return f"An item's name has at most {MAX_ITEM_NAME} characters."
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in item):
        return "An item's name cannot hold control characters."
    return None


# The locks' names, as templates in ``@redis_lock``'s form: the buy view's decorator
# fills them from its URL's ``item`` and ``seller`` and the request's ``{user}``, and
# the market fills them with the same values. Written here only.
ITEM_LOCK = "market:item:{item}.{seller}"  # one listing: purchases and withdraws
USER_LOCK = "market:user:{user}"  # one buyer: their purchases spend the same funds
PURCHASE_LOCKS = (ITEM_LOCK, USER_LOCK)
MARKET_LOCK = "market"  # the whole market, in the "lock" mode


def item_lock(item: str, seller: int) -> str:
    """The name of the lock on ``item`` listed by ``seller``."""
    return ITEM_LOCK.format(item=item, seller=seller)


def purchase_locks(buyer: int, item: str, seller: int) -> list[str]:
    """The names of the locks a fine-grained purchase takes: the listing's, the buyer's."""
    return [name.format(item=item, seller=seller, user=buyer) for name in PURCHASE_LOCKS]


class Market:
    """One market (``name`` keeps the benchmark's markets apart from the site's)."""

    def __init__(self, name: str = "main", client: redis.Redis | None = None) -> None:
        self.name = name
        self._client = client

    @property
    def client(self) -> redis.Redis:
        return self._client if self._client is not None else get_client()

    def key(self, *parts: object) -> str:
        return ":".join([f"demo:{{{self.name}}}", *map(str, parts)])

    # -- people and things ------------------------------------------------------------

    def add_user(self, user: int, name: str, funds: int) -> None:
        """Create a user with some funds (idempotent: an existing user is left alone)."""
        keys = [self.key("people"), self.key("users", user), self.key("total")]
        self.client.register_script(ADD_USER)(keys, [user, name, funds])

    def make_item(self, user: int, item: str) -> None:
        """Put a new item (a name never used before) in a user's inventory."""
        if "." in item or not item:
            raise ValueError("an item name must be non-empty and contain no '.'")
        keys = [self.key("items"), self.key("inventory", user)]
        if not self.client.register_script(MAKE_ITEM)(keys, [item]):
            raise ValueError(f"an item called {item!r} exists already")

    def user(self, user: int) -> dict[str, str]:
        return {_text(k): _text(v) for k, v in self.client.hgetall(self.key("users", user)).items()}

    def funds(self, user: int) -> int:
        return int(self.client.hget(self.key("users", user), "funds") or 0)

    def record_sale(self, sale: str, seller: int, buyer: int, price: int) -> bool:
        """Count a sale in both users' trade stats (``sold``/``earned``, ``bought``/``spent``
        in their hashes), once: recording the same ``sale`` again changes nothing, so the
        task that records it may run twice. False when it was recorded already."""
        keys = [self.key("sale", sale), self.key("users", seller), self.key("users", buyer)]
        return bool(self.client.register_script(RECORD_SALE)(keys, [price, SALE_KEPT]))

    def trades(self, user: int) -> dict[str, int]:
        """A user's trade stats: how many items they sold and bought, and for how much."""
        values = self.client.hmget(self.key("users", user), TRADE_STATS)
        return {name: int(value or 0) for name, value in zip(TRADE_STATS, values, strict=True)}

    def exists(self, item: str) -> bool:
        """Whether an item of that name was ever made (names are never used twice)."""
        return bool(self.client.sismember(self.key("items"), item))

    def seller_of(self, item: str) -> int | None:
        """Who lists ``item`` for sale now, or ``None`` (an item is in one place at a time)."""
        return next((seller for name, seller, _ in self.listings() if name == item), None)

    def inventory(self, user: int) -> list[str]:
        return sorted(_text(item) for item in self.client.smembers(self.key("inventory", user)))

    def listings(self) -> list[tuple[str, int, int]]:
        """Everything for sale: (item, seller, price), cheapest first."""
        members = self.client.zrange(self.key("market"), 0, -1, withscores=True)
        return [(*parse_listing(_text(member)), int(price)) for member, price in members]

    def price(self, item: str, seller: int) -> int | None:
        score = self.client.zscore(self.key("market"), listing(item, seller))
        return None if score is None else int(score)

    # -- listing ------------------------------------------------------------------------

    def list_item(self, item: str, seller: int, price: int, mode: Mode = "fine") -> bool:
        """Move ``item`` from the seller's inventory to the market; False if they lack it."""
        if isinstance(price, bool) or not isinstance(price, int) or price < 1:
            raise ValueError("the price must be a whole number of at least 1")
        inventory = self.key("inventory", seller)
        if mode == "watch":
            with self.client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        pipe.watch(inventory)
                        if not pipe.sismember(inventory, item):
                            return False
                        pipe.multi()
                        pipe.zadd(self.key("market"), {listing(item, seller): price})
                        pipe.srem(inventory, item)
                        pipe.execute()
                        return True
                    except redis.WatchError:
                        continue
        with self._locked(mode, [item_lock(item, seller)] if mode == "fine" else [MARKET_LOCK]):
            if not self.client.sismember(inventory, item):
                return False
            pipe = self.client.pipeline(transaction=True)
            pipe.zadd(self.key("market"), {listing(item, seller): price})
            pipe.srem(inventory, item)
            pipe.execute()
            return True

    def withdraw(self, item: str, seller: int) -> bool:
        """Take ``item`` off the market, back to the seller's inventory; False if it is not
        listed (sold, or withdrawn already). Under the listing's lock, as a purchase is:
        of a withdraw and a purchase racing, exactly one happens."""
        with self._locked("fine", [item_lock(item, seller)]):
            if self.price(item, seller) is None:
                return False
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(self.key("market"), listing(item, seller))
            pipe.sadd(self.key("inventory", seller), item)
            pipe.execute()
            return True

    # -- buying -------------------------------------------------------------------------

    def purchase_item(
        self, buyer: int, item: str, seller: int, mode: Mode = "fine", price: int | None = None
    ) -> Purchase:
        """Buy ``item`` from ``seller`` if it is still for sale (at ``price``, if given)."""
        if mode == "watch":
            return self._purchase_watching(buyer, item, seller, price)
        names = purchase_locks(buyer, item, seller) if mode == "fine" else [MARKET_LOCK]
        try:
            with self._locked(mode, names):
                return self.purchase_under_lock(buyer, item, seller, price)
        except LockNotAcquired:
            return Purchase("busy")

    def purchase_under_lock(
        self, buyer: int, item: str, seller: int, price: int | None = None
    ) -> Purchase:
        """The purchase itself, for a caller that holds the locks (fine or coarse)."""
        if buyer == seller:
            return Purchase("own item")
        member = listing(item, seller)
        pipe = self.client.pipeline(transaction=False)  # two reads, under the locks
        pipe.zscore(self.key("market"), member)
        pipe.hget(self.key("users", buyer), "funds")
        listed, funds = pipe.execute()
        verdict = _verdict(listed, int(funds or 0), price)
        if verdict is not None:
            return verdict
        assert listed is not None
        cost = int(listed)
        balance = self._apply(self.client.pipeline(transaction=True), buyer, item, seller, cost)
        return Purchase("bought", cost, balance)

    def _purchase_watching(
        self, buyer: int, item: str, seller: int, price: int | None, patience: float = BUSY_TIMEOUT
    ) -> Purchase:
        """The book's optimistic purchase: WATCH, read, MULTI/EXEC, retry on conflict."""
        if buyer == seller:
            return Purchase("own item")
        member = listing(item, seller)
        buyer_key = self.key("users", buyer)
        retries = 0
        deadline = time.monotonic() + patience
        with self.client.pipeline(transaction=True) as pipe:
            while time.monotonic() < deadline:
                try:
                    pipe.watch(self.key("market"), buyer_key)
                    listed = pipe.zscore(self.key("market"), member)
                    funds = int(pipe.hget(buyer_key, "funds") or 0)
                    verdict = _verdict(listed, funds, price, retries)
                    if verdict is not None:
                        pipe.unwatch()
                        return verdict
                    assert listed is not None
                    pipe.multi()
                    balance = self._apply(pipe, buyer, item, seller, int(listed))
                    return Purchase("bought", int(listed), balance, retries)
                except redis.WatchError:
                    retries += 1
        return Purchase("busy", retries=retries)

    def _apply(
        self, pipe: redis.client.Pipeline, buyer: int, item: str, seller: int, cost: int
    ) -> int:
        """Move the money and the item in one MULTI/EXEC; the buyer's new balance."""
        pipe.hincrby(self.key("users", seller), "funds", cost)
        pipe.hincrby(self.key("users", buyer), "funds", -cost)
        pipe.sadd(self.key("inventory", buyer), item)
        pipe.zrem(self.key("market"), listing(item, seller))
        return int(pipe.execute()[1])

    @contextmanager
    def _locked(self, mode: Mode, names: list[str]) -> Iterator[None]:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        with redis_lock(*names, timeout=LOCK_TIMEOUT, blocking_timeout=BUSY_TIMEOUT):
            yield

    # -- the invariants -------------------------------------------------------------------

    def check(self) -> list[str]:
        """Every violated invariant, in words (empty when the market is sound)."""
        problems = []
        # One consistent snapshot: every read in one MULTI, and nobody joined meanwhile.
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(self.key("people"))
                    people = [int(user) for user in pipe.smembers(self.key("people"))]
                    pipe.multi()
                    for user in people:
                        pipe.hget(self.key("users", user), "funds")
                        pipe.smembers(self.key("inventory", user))
                    pipe.zrange(self.key("market"), 0, -1)
                    pipe.smembers(self.key("items"))
                    pipe.get(self.key("total"))
                    *per_user, market, items, total = pipe.execute()
                    break
                except redis.WatchError:
                    continue
        funds = [int(value or 0) for value in per_user[0::2]]
        for user, amount in zip(people, funds, strict=True):
            if amount < 0:
                problems.append(f"user {user} has negative funds: {amount}")
        if sum(funds) != int(total or 0):
            problems.append(f"funds add up to {sum(funds)}, not {int(total or 0)}")
        places: dict[str, list[str]] = {}
        for user, owned in zip(people, per_user[1::2], strict=True):
            for item in owned:
                places.setdefault(_text(item), []).append(f"user {user}'s inventory")
        for member in market:
            item, seller = parse_listing(_text(member))
            places.setdefault(item, []).append(f"the market (sold by {seller})")
        for item, where in sorted(places.items()):
            if len(where) > 1:
                problems.append(f"{item} is in {len(where)} places: {', '.join(where)}")
        known = {_text(item) for item in items}
        for item in sorted(known - places.keys()):
            problems.append(f"{item} has vanished")
        for item in sorted(places.keys() - known):
            problems.append(f"{item} appeared from nowhere")
        return problems

    def delete(self) -> int:
        """Remove every key of this market (the benchmark cleans up after itself)."""
        people = [int(user) for user in self.client.smembers(self.key("people"))]
        names = [self.key(part) for part in ("people", "items", "market", "total")]
        names += [self.key(kind, user) for user in people for kind in ("users", "inventory")]
        return int(self.client.delete(*names)) if names else 0


# Lua run with redis-py's register_script (EVALSHA, loading the script when the
# server does not know it yet). Every key arrives through KEYS, as Redis Cluster needs.
ADD_USER = """-- KEYS: 1) the people set  2) the user's hash  3) the total of all funds
-- ARGV: 1) the user id  2) their name  3) their funds
-- Returns: 1 when the user was created; 0 when they existed (nothing changes)
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], 'name', ARGV[2], 'funds', ARGV[3])
redis.call('INCRBY', KEYS[3], ARGV[3])
return 1
"""

TRADE_STATS = ("sold", "earned", "bought", "spent")
SALE_KEPT = 7 * 24 * 3600  # seconds a recorded sale's id is remembered (a week of retries)

RECORD_SALE = """-- KEYS: 1) the sale's marker  2) the seller's hash  3) the buyer's hash
-- ARGV: 1) the price  2) seconds the marker is kept
-- Returns: 1 when recorded; 0 when this sale was recorded already (nothing changes)
if not redis.call('SET', KEYS[1], 1, 'NX', 'EX', ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[2], 'sold', 1)
redis.call('HINCRBY', KEYS[2], 'earned', ARGV[1])
redis.call('HINCRBY', KEYS[3], 'bought', 1)
redis.call('HINCRBY', KEYS[3], 'spent', ARGV[1])
return 1
"""

MAKE_ITEM = """-- KEYS: 1) the set of every item  2) the user's inventory
-- ARGV: 1) the item
-- Returns: 1 when made; 0 when an item of that name exists (nothing changes)
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""


def _verdict(
    listed: float | None, funds: int, price: int | None, retries: int = 0
) -> Purchase | None:
    """Why this purchase cannot happen, or None if it can."""
    if listed is None:
        return Purchase("gone", retries=retries)
    if price is not None and int(listed) != price:
        return Purchase("price changed", int(listed), retries=retries)
    if funds < listed:
        return Purchase("cannot pay", int(listed), funds, retries)
    return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
