from __future__ import annotations

import io
import random
import threading
import time

import pytest
import redis
from django.core.management import CommandError, call_command

from demo_project.marketplace.market import MODES, Market, Mode, item_lock
from redis_components import RedisLock
from tests.processes import run_processes


@pytest.fixture
def market() -> Market:
    market = Market("test")
    market.add_user(1, "alice", 100)
    market.add_user(2, "bob", 50)
    market.make_item(1, "ItemA")
    market.make_item(1, "ItemB")
    return market


def test_listing_moves_the_item_to_the_market(market: Market) -> None:
    assert market.list_item("ItemA", 1, 35)
    assert market.inventory(1) == ["ItemB"]
    assert market.listings() == [("ItemA", 1, 35)]
    assert not market.list_item("ItemA", 1, 35)  # not in the inventory any more
    assert not market.list_item("Nothing", 1, 5)
    with pytest.raises(ValueError, match="price"):
        market.list_item("ItemB", 1, 0)
    assert market.check() == []


@pytest.mark.parametrize("mode", MODES)
def test_every_purchase_outcome(market: Market, mode: Mode) -> None:
    market.list_item("ItemA", 1, 35, mode)
    market.list_item("ItemB", 1, 80, mode)
    assert market.purchase_item(1, "ItemA", 1, mode).outcome == "own item"
    assert market.purchase_item(2, "ItemA", 1, mode, price=30).outcome == "price changed"
    assert market.purchase_item(2, "ItemB", 1, mode).outcome == "cannot pay"
    bought = market.purchase_item(2, "ItemA", 1, mode, price=35)
    assert (bought.outcome, bought.price, bought.balance) == ("bought", 35, 15)
    assert market.purchase_item(2, "ItemA", 1, mode).outcome == "gone"
    assert market.funds(1) == 135
    assert market.inventory(2) == ["ItemA"]
    assert market.check() == []


def test_a_purchase_finds_a_busy_item_busy(market: Market, monkeypatch: pytest.MonkeyPatch) -> None:
    market.list_item("ItemA", 1, 35)
    monkeypatch.setattr("demo_project.marketplace.market.BUSY_TIMEOUT", 0.2)
    held = []
    holder = threading.Thread(
        target=lambda: held.append(RedisLock(item_lock("ItemA", 1), timeout=5).acquire())
    )
    holder.start()
    holder.join()
    assert market.purchase_item(2, "ItemA", 1, "fine").outcome == "busy"
    held[0].release()
    assert market.purchase_item(2, "ItemA", 1, "fine").ok


def test_check_reports_each_kind_of_violation(market: Market, r: redis.Redis) -> None:
    market.list_item("ItemA", 1, 35)
    assert market.check() == []
    r.hincrby("demo:{test}:users:2", "funds", -60)
    r.sadd("demo:{test}:inventory:2", "ItemA")
    r.srem("demo:{test}:inventory:1", "ItemB")
    r.sadd("demo:{test}:inventory:2", "Forged")
    assert market.check() == [
        "user 2 has negative funds: -10",
        "funds add up to 90, not 150",
        "ItemA is in 2 places: user 2's inventory, the market (sold by 1)",
        "ItemB has vanished",
        "Forged appeared from nowhere",
    ]


def _trade(mode: Mode, me: int, seconds: float) -> None:
    market = Market("test")
    rng = random.Random(me)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if rng.random() < 0.5 and (mine := market.inventory(me)):
            market.list_item(rng.choice(mine), me, rng.randint(1, 30), mode)
        elif listed := market.listings():
            item, seller, price = rng.choice(listed)
            market.purchase_item(me, item, seller, mode, price)


@pytest.mark.parametrize("mode", MODES)
def test_eight_traders_keep_the_invariants(mode: Mode) -> None:
    market = Market("test")
    for user in range(1, 9):
        market.add_user(user, f"trader{user}", 100)
        for n in range(5):
            market.make_item(user, f"Item{user}x{n}")
    run_processes(_trade, [(mode, user, 2.0) for user in range(1, 9)], timeout=60)
    assert market.check() == []
    # Trades happened: some items changed hands.
    assert any(
        not item.startswith(f"Item{user}x")
        for user in range(1, 9)
        for item in market.inventory(user)
    )


def test_market_check_command_lists_violations_and_fails(market: Market, r: redis.Redis) -> None:
    out = io.StringIO()
    call_command("market_check", "--market", "test", stdout=out)
    assert "sound" in out.getvalue()
    r.hincrby("demo:{test}:users:2", "funds", -60)
    errors = io.StringIO()
    with pytest.raises(CommandError, match="breaks 2 invariant"):
        call_command("market_check", "--market", "test", stderr=errors)
    assert "user 2 has negative funds: -10" in errors.getvalue()
