"""The demo's components seen in a browser: the rate-limited email (a burst of sales
queues more sold emails than the mail relay takes in a second, and the notices page
lists them waiting on its rate), and checkouts under a counting semaphore (a load of
them, and the slots held now)."""

from __future__ import annotations

import time

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from demo_project.marketplace import checkouts
from demo_project.marketplace.seed import DEMO_PASSWORD, seed
from demo_project.marketplace.views import BURST, MARKET
from redis_components.tasks.worker import Worker
from tests.processes import wait_until
from tests.test_market_views import flash, login

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("worker_may_check_db_connections")]


@pytest.fixture
def users() -> dict[str, int]:
    seed(MARKET, guild_size=300)
    return dict(get_user_model()._default_manager.values_list("username", "pk"))


def _changes(r: redis.Redis) -> int:
    return int(r.info("persistence")["rdb_changes_since_last_save"])


def test_buying_ten_at_once_shows_the_emails_waiting_on_the_rate(
    users: dict[str, int], r: redis.Redis
) -> None:
    alice = users["alice"]
    offered = [row for row in MARKET.listings() if row[1] != alice][:BURST]
    assert len(offered) == BURST > 5  # more than the mail relay takes in a second
    client = login("alice")
    assert f"Buy {BURST} at once" in client.get("/market/").content.decode()
    response = client.post("/market/buy-many/", follow=True)
    assert response.redirect_chain[-1][0] == "/notices/"
    items = [item for item, _, _ in offered]
    balance = 1000 - sum(price for _, _, price in offered)
    [said] = flash(response)
    assert said.startswith(f"You bought {BURST} items at once ({', '.join(items)}).")
    assert f"Your balance is {balance}." in said
    assert set(items) <= set(MARKET.inventory(alice))
    assert MARKET.check() == []
    # Each sale's workflow records it, then queues its email: ten at once.
    assert Worker(["market"], burst=True).run() == BURST
    queued = client.get("/notices/waiting/").json()
    assert queued["ready"] == BURST
    assert queued["rate"] == "at most 5 per 1 s"
    assert sorted(email["item"] for email in queued["emails"]) == sorted(items)
    # A worker sends what the rate allows now and sets the rest aside, each until its turn.
    sent = Worker(["email"], burst=True).run()
    assert 1 <= sent <= 5
    before = _changes(r)
    waiting = client.get("/notices/waiting/").json()
    assert _changes(r) == before  # looking changes nothing
    assert waiting["delayed"] == BURST - sent
    assert waiting["ready"] == waiting["on_limits"] == 0
    for email in waiting["emails"]:
        assert (email["state"], email["waits_for"], email["waits_on"]) == (
            "delayed",
            "rate",
            "mail-relay",
        )
        assert email["item"] in items
        assert 0 <= email["due_in"] <= 3
    page = client.get("/notices/").content.decode()
    assert page.count("waits on the rate <code>mail-relay</code>") == BURST - sent
    assert f'data-count="delayed">{BURST - sent}<' in page
    # None fails or retries: each is sent in its turn.
    deadline = time.monotonic() + 10
    while len(mail.outbox) < BURST and time.monotonic() < deadline:
        Worker(["email"], burst=True).run()
        time.sleep(0.1)
    assert sorted(email.subject for email in mail.outbox) == sorted(f"{i} sold" for i in items)
    assert client.get("/notices/waiting/").json()["emails"] == []


def test_buying_ten_at_once_with_nothing_affordable_changes_nothing(
    users: dict[str, int],
) -> None:
    get_user_model()._default_manager.create_user("frank", password=DEMO_PASSWORD)
    before = MARKET.listings()
    response = login("frank").post("/market/buy-many/", follow=True)
    assert response.redirect_chain[-1][0] == "/market/"
    assert flash(response)[0].startswith("Nothing was bought")
    assert MARKET.listings() == before
    assert login("frank").get("/market/buy-many/").status_code == 405
    anonymous = Client().post("/market/buy-many/")
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/login/")


def test_a_load_of_checkouts_holds_at_most_the_semaphores_slots(
    users: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkouts, "PAY_SECONDS", 0.2)
    client = login("bob")
    page = client.get("/checkouts/").content.decode()
    assert f"at most <strong>{checkouts.SLOTS}</strong> checkouts at once" in page
    assert page.count('class="slot"') == checkouts.SLOTS  # all free
    idle = client.get("/checkouts/slots/").json()
    assert (idle["held"], idle["started"], idle["running"]) == (0, 0, False)
    started = client.post("/checkouts/load/", {"count": 8}, HTTP_ACCEPT="application/json")
    assert started.status_code == 202
    assert started.json() == {"started": 8, "slots": checkouts.SLOTS}
    # One load at a time: a second is refused while the first runs.
    again = client.post("/checkouts/load/", {"count": 8}, HTTP_ACCEPT="application/json")
    assert again.status_code == 409
    assert "a load is running" in again.json()["error"]
    seen = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        now = client.get("/checkouts/slots/").json()
        seen.append(now["held"])
        assert now["held"] <= checkouts.SLOTS
        assert now["paying"] <= checkouts.SLOTS
        assert now["paying"] + now["waiting"] + now["done"] + now["gave_up"] == 8
        if not now["running"]:
            break
        time.sleep(0.05)
    assert (now["done"], now["gave_up"], now["waiting"]) == (8, 0, 0)
    # Every slot comes free: at once, or, when a release ran between a grant and its
    # waiter's leaving the queue (one permit too many handed on: see Permit.holding, the
    # next acquire takes it), once that permit's timeout has passed, with no acquire.
    wait_until(lambda: client.get("/checkouts/slots/").json()["held"] == 0, timeout=5)
    assert now["peak"] == checkouts.SLOTS  # 8 at once fill every slot, and never more
    assert max(seen) <= checkouts.SLOTS
    # Over: a form post starts another and comes back to the page.
    response = client.post("/checkouts/load/", {"count": 1}, follow=True)
    assert response.redirect_chain[-1][0] == "/checkouts/"
    assert flash(response) == ["1 checkouts started: watch the slots."]
    deadline = time.monotonic() + 10
    while client.get("/checkouts/slots/").json()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize("count", ["", "0", "51", "-1", "3.5", "ten", "\u0661\u0660", "9" * 20])
def test_a_load_of_a_bad_size_is_refused_with_json(users: dict[str, int], count: str) -> None:
    response = login("bob").post("/checkouts/load/", {"count": count})
    assert response.status_code == 400
    assert response.json() == {"error": "count must be a whole number from 1 to 50"}
    assert login("bob").get("/checkouts/slots/").json()["started"] == 0


def test_checkout_pages_need_a_login_and_the_load_a_post(users: dict[str, int]) -> None:
    for page in ("/checkouts/", "/checkouts/slots/", "/notices/waiting/"):
        assert Client().get(page).status_code == 302
    assert Client().post("/checkouts/load/").status_code == 302
    assert login("bob").get("/checkouts/load/").status_code == 405
