from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import django
import pytest
import redis
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from conftest import CommandCount
from demo_project.marketplace import tasks as demo_tasks
from demo_project.marketplace.market import USER_LOCK, item_lock
from demo_project.marketplace.seed import DEMO_PASSWORD, GUILD, PEOPLE, seed
from demo_project.marketplace.views import MARKET
from redis_components import (
    GroupChat,
    Guild,
    RecentContacts,
    RedisLock,
    get_result,
    get_workflow,
)
from redis_components.autocomplete import normalize
from redis_components.tasks.worker import Worker

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("worker_may_check_db_connections")]


@pytest.fixture
def users() -> dict[str, int]:
    seed(MARKET, guild_size=300)
    return dict(get_user_model()._default_manager.values_list("username", "pk"))


def login(name: str, **options: bool) -> Client:
    client = Client(**options)
    assert client.login(username=name, password=DEMO_PASSWORD)
    return client


def listing_of(seller: int) -> tuple[str, int]:
    item, _, price = next(row for row in MARKET.listings() if row[1] == seller)
    return item, price


def flash(response: object) -> list[str]:
    return [str(message) for message in response.context["messages"]]  # type: ignore[attr-defined]


def test_pages_need_a_login(users: dict[str, int]) -> None:
    for page in ("/market/", "/inventory/", "/notices/", "/chats/"):
        response = Client().get(page)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
    response = Client().post(f"/market/buy/x/{users['bob']}/", {"price": 1})
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_login_page_names_the_demo_users(users: dict[str, int]) -> None:
    page = Client().get("/login/").content.decode()
    assert all(name in page for name in PEOPLE)
    assert DEMO_PASSWORD in page


def test_seeding_twice_changes_nothing(users: dict[str, int]) -> None:
    before = (MARKET.listings(), [MARKET.inventory(pk) for pk in users.values()])
    seed(MARKET, guild_size=300)
    assert (MARKET.listings(), [MARKET.inventory(pk) for pk in users.values()]) == before
    assert MARKET.check() == []


def test_market_lists_searches_and_sorts(users: dict[str, int]) -> None:
    client = login("alice")
    page = client.get("/market/")
    rows = page.context["rows"]
    assert len(rows) == len(MARKET.listings())
    assert [row[2] for row in rows] == sorted(row[2] for row in rows)
    highest = client.get("/market/?sort=-price").context["rows"]
    assert [row[2] for row in highest] == sorted((row[2] for row in rows), reverse=True)
    item = rows[0][0]
    found = client.get("/market/", {"q": item.split()[0].upper()}).context["rows"]
    assert item in [row[0] for row in found]
    assert client.get("/market/?sort=nonsense").status_code == 200


def test_buying_moves_money_and_item_and_notifies_the_seller(users: dict[str, int]) -> None:
    bob = users["bob"]
    item, price = listing_of(bob)
    alice = login("alice")
    response = alice.post(f"/market/buy/{item}/{bob}/", {"price": price}, follow=True)
    assert f"You bought {item} from bob for {price}. Your balance is {1000 - price}." in flash(
        response
    )
    assert item in MARKET.inventory(users["alice"])
    assert MARKET.funds(bob) == 1000 + price
    assert MARKET.check() == []
    # The sale runs a workflow on the task queues: nothing is recorded or sent until a
    # worker runs it, and alice's notices page shows where it is, step by step.
    assert mail.outbox == []
    sent = alice.get("/notices/").content.decode()
    assert f'{item} from bob: <strong class="task-status">RUNNING</strong>' in sent
    assert "(record_sale QUEUED, send_sold_email WAITING)" in sent
    assert Worker(["market", "email"], burst=True).run() == 2
    [email] = mail.outbox
    assert email.to == ["bob@example.com"]
    notices = login("bob").get("/notices/").content.decode()
    assert f"Your {item} sold to alice for {price}." in notices
    assert f"Sold 1 (for {price}), bought 0 (for 0)." in notices
    sent = alice.get("/notices/").content.decode()
    assert f'{item} from bob: <strong class="task-status">SUCCESSFUL</strong>' in sent
    assert "(record_sale SUCCESSFUL, send_sold_email SUCCESSFUL)" in sent
    assert f"Sold 0 (for 0), bought 1 (for {price})." in sent
    # alice is staff: the workflow links to its admin page, where its steps are.
    [workflow_id] = re.findall(r'taskqueues/workflow/\?id=(\w+)"', sent)
    admin = alice.get("/admin/redis_components/taskqueues/workflow/", {"id": workflow_id})
    assert "send_sold_email" in admin.content.decode()
    # On Django 6 the steps are Django @tasks, on our queues through RedisTaskBackend.
    backends = {get_result(step.task_id).backend for step in get_workflow(workflow_id).steps()}
    assert backends == {"default" if django.VERSION >= (6, 0) else "redis_components"}


def test_a_sale_recorded_twice_counts_once(users: dict[str, int]) -> None:
    """A step may run twice (at-least-once delivery): the sale still counts once."""
    assert MARKET.record_sale("sale-1", users["bob"], users["alice"], 30)
    assert not MARKET.record_sale("sale-1", users["bob"], users["alice"], 30)
    assert MARKET.trades(users["bob"]) == {"sold": 1, "earned": 30, "bought": 0, "spent": 0}
    assert MARKET.trades(users["alice"]) == {"sold": 0, "earned": 0, "bought": 1, "spent": 30}


def test_purchase_refusals_change_nothing(users: dict[str, int]) -> None:
    bob, alice_id = users["bob"], users["alice"]
    item, price = listing_of(bob)
    alice = login("alice")
    before = MARKET.funds(alice_id), MARKET.listings()

    def says(path: str, data: dict[str, object]) -> list[str]:
        return flash(alice.post(path, data, follow=True))

    assert says(f"/market/buy/{item}/{bob}/", {"price": price - 1}) == [
        f"The price of {item} is now {price}. Have another look."
    ]
    assert says(f"/market/buy/{item}/{users['carol']}/", {"price": price}) == [
        f"{item} is not for sale: it was sold or withdrawn, or never listed."
    ]
    assert says(f"/market/buy/{item}/{bob}/", {"price": "cheap"}) == [
        "The price you saw, 'cheap', is not a whole number; have another look."
    ]
    assert says(f"/market/buy/{item}/{bob}/", {}) == [
        "The price you saw was missing; have another look."
    ]
    mine, my_price = listing_of(alice_id)
    assert says(f"/market/buy/{mine}/{alice_id}/", {"price": my_price}) == [
        f"{mine} is your own item."
    ]
    MARKET.client.hset(MARKET.key("users", alice_id), "funds", 1)
    MARKET.client.incrby(MARKET.key("total"), 1 - before[0])
    assert says(f"/market/buy/{item}/{bob}/", {"price": price}) == [
        f"You cannot afford {item}: it costs {price} and you have 1."
    ]
    assert MARKET.listings() == before[1]
    assert MARKET.check() == []
    assert alice.get(f"/market/buy/{item}/{bob}/").status_code == 405


def test_a_purchase_in_progress_elsewhere_is_explained(users: dict[str, int]) -> None:
    bob = users["bob"]
    item, price = listing_of(bob)
    held = []
    thread = threading.Thread(target=lambda: held.append(RedisLock(item_lock(item, bob)).acquire()))
    thread.start()
    thread.join()
    alice = login("alice")
    response = alice.post(f"/market/buy/{item}/{bob}/", {"price": price}, follow=True)
    assert flash(response) == [f"Someone else is buying {item} right now. Try again in a moment."]
    api = alice.post(
        f"/market/buy/{item}/{bob}/", {"price": price}, headers={"accept": "application/json"}
    )
    assert api.status_code == 409
    assert int(api["Retry-After"]) >= 1
    held[0].release()
    assert item not in MARKET.inventory(users["alice"])


def test_a_busy_buyer_lock_is_the_one_the_409_names(users: dict[str, int]) -> None:
    """Only the buyer's own lock is held (a purchase of theirs in progress elsewhere):
    the 409 names it, not the listing's lock, the first of the view's names."""
    bob, alice_id = users["bob"], users["alice"]
    item, price = listing_of(bob)
    held = []
    buyer_lock = USER_LOCK.format(user=alice_id)
    thread = threading.Thread(target=lambda: held.append(RedisLock(buyer_lock, 5).acquire()))
    thread.start()
    thread.join()
    api = login("alice").post(
        f"/market/buy/{item}/{bob}/", {"price": price}, headers={"accept": "application/json"}
    )
    assert api.status_code == 409
    assert api.json()["lock"] == buyer_lock
    assert not RedisLock(item_lock(item, bob)).locked()
    held[0].release()
    assert item not in MARKET.inventory(alice_id)


def test_post_without_csrf_token_is_refused(users: dict[str, int]) -> None:
    bob = users["bob"]
    item, price = listing_of(bob)
    client = login("alice", enforce_csrf_checks=True)
    assert client.post(f"/market/buy/{item}/{bob}/", {"price": price}).status_code == 403
    assert client.post("/inventory/sell/", {"item": "x", "price": 5}).status_code == 403
    assert item not in MARKET.inventory(users["alice"])


def test_selling_only_your_own_items_at_a_sane_price(users: dict[str, int]) -> None:
    alice_id = users["alice"]
    mine = MARKET.inventory(alice_id)[0]
    theirs = MARKET.inventory(users["bob"])[0]
    alice = login("alice")

    def says(data: dict[str, object]) -> list[str]:
        return flash(alice.post("/inventory/sell/", data, follow=True))

    for bad in ("-5", "0", "2.5", "ten", "", "10000001", "²", "٣", "9" * 5000):
        assert says({"item": mine, "price": bad}) == [
            "A price is a whole number from 1 to 1,000,000."
        ]
    assert says({"item": theirs, "price": "10"}) == [f"You do not have {theirs!r} to sell."]
    assert theirs in MARKET.inventory(users["bob"])
    assert says({"item": mine, "price": "42"}) == [f"{mine} is for sale at 42."]
    assert (mine, alice_id, 42) in MARKET.listings()
    assert MARKET.check() == []


def test_item_names_no_item_can_have_are_refused_with_the_reason(
    users: dict[str, int], r: redis.Redis
) -> None:
    alice = login("alice")
    bob = users["bob"]
    before = sorted(r.keys("*"))
    for name, reason in (
        ("bad\x07name", "control characters"),
        ("tab\there", "control characters"),
        ("x" * 1000, "at most 100 characters"),
        ("   ", "needs a name"),
    ):
        sold = flash(alice.post("/inventory/sell/", {"item": name, "price": "5"}, follow=True))
        assert len(sold) == 1
        assert reason in sold[0]
        url = f"/market/buy/{quote(name, safe='')}/{bob}/"
        bought = alice.post(url, {"price": "5"}, follow=True)
        assert bought.status_code == 200
        assert reason in flash(bought)[0]
    assert sorted(r.keys("*")) == before  # nothing written, no lock or fence key left


def test_chat_pages(users: dict[str, int]) -> None:
    chats = login("bob").get("/chats/")
    [(chat_id, members, unread)] = chats.context["chats"]
    assert (members, unread) == (["alice", "carol"], 1)
    page = login("bob").get(f"/chats/{chat_id}/")
    assert page.status_code == 200
    assert b"data-chat-app" in page.content
    outsider = login("dave").get(f"/chats/{chat_id}/", follow=True)
    assert flash(outsider) == [f"You are not in chat {chat_id}."]
    counts = GroupChat().unread_counts(users["bob"])
    assert counts.per_chat == {chat_id: 1}  # looking marks nothing read


def test_message_someone_from_the_contacts_page(users: dict[str, int]) -> None:
    alice = login("alice")
    page = alice.get("/contacts/")
    assert page.context["contacts"] == ["erin", "dave", "carol", "bob"]
    assert b"data-rc-autocomplete" in page.content
    response = alice.post("/contacts/", {"to": "dave", "message": "Is the lantern still yours?"})
    assert response.status_code == 302
    chat_id = response["Location"].rstrip("/").rsplit("/", 1)[1]
    assert GroupChat().members(chat_id) == sorted([str(users["alice"]), str(users["dave"])])
    assert RecentContacts().all(users["alice"])[0] == "dave"
    for to, problem in (("nobody", "There is no user called 'nobody'."), ("alice", "yourself")):
        refused = alice.post("/contacts/", {"to": to, "message": "hi"}, follow=True)
        assert problem in flash(refused)[0]
    empty = alice.post("/contacts/", {"to": "bob", "message": "   "}, follow=True)
    assert "cannot be sent" in flash(empty)[0]


def test_guild_page_searches_a_guild_of_many_scripts(users: dict[str, int]) -> None:
    assert len(Guild(GUILD)) == 300 + len(PEOPLE)
    page = login("bob").get("/guild/", {"member": "Ærwyn Åberg"})
    assert page.context["size"] == len(Guild(GUILD))
    assert page.context["is_member"]
    for prefix, first in (
        ("王", "王伟伟"),
        ("алекс", "Александр Абрамов"),
        ("αθη", "Αθηνά Αντωνίου"),
    ):
        assert Guild(GUILD).suggest(prefix)[0] == first
    assert login("bob").get("/rc/autocomplete/guilds/traders/", {"q": "aer"}).json() == {
        "results": ["Ærwyn A. Åberg", "Ærwyn Åberg"]
    }
    assert Client().get("/rc/autocomplete/guilds/traders/", {"q": "a"}).status_code == 403


def test_the_docs_matching_examples_work_in_the_demo_guild(users: dict[str, int]) -> None:
    """docs/autocomplete.md: "`山` finds `山田`" and the others, in the guild as seeded."""
    seed(MARKET)  # the demo's whole guild
    docs = (ROOT / "docs" / "autocomplete.md").read_text()
    examples = re.findall(r"`([^`]+)` finds\s+`([^`]+)`", docs)
    assert len(examples) == 4
    client = login("bob")
    for typed, name in examples:
        # The guild holds names starting with `name`, and what was typed matches them.
        members = Guild(GUILD).suggest(name)
        assert members, name
        assert all(member.startswith(name) for member in members)
        assert normalize(name).startswith(normalize(typed)), (typed, name)
        found = client.get("/rc/autocomplete/guilds/traders/", {"q": typed}).json()["results"]
        assert found, typed


def test_home_page_lists_the_components_and_the_redis_in_use(
    users: dict[str, int], r: redis.Redis
) -> None:
    page = Client().get("/").content.decode()
    names = ("Autocomplete", "Distributed locks", "Counting semaphores", "Task queues")
    for name in (*names, "Task limits", "Pull messaging", "File distribution"):
        assert name in page
    assert 'href="/market/"' in page
    # Each component links to the page that shows it, and says what to click there.
    semaphores = re.search(r"<tr><td>Counting semaphores</td>.*?</tr>", page, re.DOTALL)
    assert semaphores is not None
    assert 'href="/checkouts/"' in semaphores[0]
    assert "Start 20 checkouts at once" in semaphores[0]
    files = re.search(r"<tr><td>File distribution</td>.*?</tr>", page, re.DOTALL)
    assert files is not None
    assert 'href="/catalogue/"' in files[0]
    assert "Publish my catalogue" in files[0]
    assert "rc_files_send" not in page
    limits = re.search(r"<tr><td>Task limits</td>.*?</tr>", page, re.DOTALL)
    assert limits is not None
    assert "Buy 10 at once" in limits[0]
    assert f"Redis {r.info('server')['redis_version']}" in page


def test_notices_of_any_shape_are_all_shown_and_none_lost(
    users: dict[str, int], r: redis.Redis
) -> None:
    from redis_components import Mailbox

    bob = users["bob"]
    Mailbox().send(bob, {"text": "Your lamp sold."})
    Mailbox().send(bob, ["not", "a", "notice"])
    Mailbox().send(bob, {"text": 5})
    r.rpush(f"rc:mailbox:{{{bob}}}", b"\xff junk")
    Mailbox().send(bob, {"text": "Your rug sold."})
    page = login("bob").get("/notices/")
    assert page.status_code == 200
    shown = [notice.text for notice in page.context["notices"]]
    assert len(shown) == 5
    assert "Your lamp sold." in shown
    assert "Your rug sold." in shown
    assert '(a message of an unexpected shape: ["not", "a", "notice"])' in shown
    assert '(a message of an unexpected shape: {"text": 5})' in shown
    assert "(a message that could not be read: \\xff junk)" in shown
    assert r.llen(f"rc:mailbox:{{{bob}}}") == 0


def test_pages_say_redis_is_unavailable_then_recover_by_themselves(
    users: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    from django.test import override_settings

    bob = login("bob")
    unreachable = "redis://127.0.0.1:1/0"
    gone = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": unreachable}}
    with override_settings(CACHES=gone):
        pages = [bob.get(page) for page in ("/market/", "/inventory/", "/chats/", "/market/")]
    for page in pages:
        assert page.status_code == 503
        assert page["Retry-After"] == "5"
        assert "cannot be reached" in page.content.decode()
    logged = [r for r in caplog.records if "Redis is unavailable" in r.getMessage()]
    assert len(logged) == 1  # once, not once per request
    assert bob.get("/market/").status_code == 200  # back, with nothing restarted


def test_a_seller_withdraws_a_listing_and_a_sold_one_cannot_be_withdrawn(
    users: dict[str, int],
) -> None:
    alice_id, bob_id = users["alice"], users["bob"]
    item, price = listing_of(alice_id)
    alice = login("alice")
    page = alice.get("/inventory/").content.decode()
    assert f'aria-label="Withdraw {item}"' in page
    done = alice.post("/inventory/withdraw/", {"item": item}, follow=True)
    assert flash(done) == [f"{item} is back in your items."]
    assert item in MARKET.inventory(alice_id)
    assert MARKET.price(item, alice_id) is None
    twice = alice.post("/inventory/withdraw/", {"item": item}, follow=True)
    assert flash(twice) == [f"{item} is in your items, not for sale."]
    unknown = alice.post("/inventory/withdraw/", {"item": "No Such Thing"}, follow=True)
    assert flash(unknown) == ["There is no item called No Such Thing."]
    assert item in MARKET.inventory(alice_id)
    # Bought first, then withdrawn: the withdraw says it was sold and changes nothing.
    other, other_price = listing_of(alice_id)
    bought = login("bob").post(f"/market/buy/{other}/{alice_id}/", {"price": other_price})
    assert bought.status_code == 302
    late = alice.post("/inventory/withdraw/", {"item": other}, follow=True)
    assert flash(late) == [f"{other} is not for sale any more: it was sold."]
    assert other in MARKET.inventory(bob_id)
    assert other not in MARKET.inventory(alice_id)
    # Another seller's listing, still listed: not mine to withdraw, and it stays listed.
    bobs, bobs_price = listing_of(bob_id)
    theirs = alice.post("/inventory/withdraw/", {"item": bobs}, follow=True)
    assert flash(theirs) == [f"{bobs} is not your listing."]
    assert MARKET.price(bobs, bob_id) == bobs_price
    # Withdrawn first, then bought: the purchase finds nothing.
    refused = login("bob").post(f"/market/buy/{item}/{alice_id}/", {"price": price}, follow=True)
    assert f"{item} is not for sale" in flash(refused)[0]
    assert MARKET.check() == []


def _buy_all(buyer: int, seller: int, items: list[str], bought_one: Any, withdrew_one: Any) -> None:
    """Buy from the first item on; after the first purchase, wait for the first withdraw."""
    first, *rest = items
    assert MARKET.purchase_item(buyer, first, seller).outcome == "bought"
    bought_one.set()
    assert withdrew_one.wait(30)
    for item in rest:
        MARKET.purchase_item(buyer, item, seller)


def _withdraw_all(seller: int, items: list[str], bought_one: Any, withdrew_one: Any) -> None:
    """Withdraw from the last item back, once the first purchase is made."""
    assert bought_one.wait(30)
    last, *rest = reversed(items)
    assert MARKET.withdraw(last, seller)
    withdrew_one.set()
    for item in rest:
        MARKET.withdraw(item, seller)


def test_withdraws_racing_purchases_end_in_exactly_one_of_them(users: dict[str, int]) -> None:
    from tests.processes import FORK, run_processes

    alice_id, bob_id = users["alice"], users["bob"]
    items = [f"race item {n}" for n in range(60)]
    for item in items:
        MARKET.make_item(alice_id, item)
        assert MARKET.list_item(item, alice_id, 1)
    # Each side waits for the other's first success, so both win some (however the
    # processes are scheduled); then they race over the rest.
    bought_one, withdrew_one = FORK.Event(), FORK.Event()
    run_processes(
        lambda role, *args: role(*args),
        [
            (_buy_all, bob_id, alice_id, items, bought_one, withdrew_one),
            (_withdraw_all, alice_id, items, bought_one, withdrew_one),
        ],
    )
    bought = set(MARKET.inventory(bob_id)) & set(items)
    withdrawn = set(MARKET.inventory(alice_id)) & set(items)
    assert bought | withdrawn == set(items)  # each ended one way...
    assert not bought & withdrawn  # ...and only one
    assert bought
    assert withdrawn
    assert MARKET.check() == []


def test_the_market_pages_its_listings_and_says_how_many(users: dict[str, int]) -> None:
    alice_id = users["alice"]
    items = [f"page item {n:03}" for n in range(230)]
    for item in items:
        MARKET.make_item(alice_id, item)
        MARKET.list_item(item, alice_id, 1)
    total = len(MARKET.listings())
    bob = login("bob")
    first = bob.get("/market/", {"sort": "item"})
    assert f"{total} listings; 1 to 100 shown." in first.content.decode()
    assert len(first.context["rows"]) == 100
    last = bob.get("/market/", {"sort": "item", "page": 3})
    assert len(last.context["rows"]) == total - 200
    narrowed = bob.get("/market/", {"q": "page item 1"}).content.decode()
    assert "100 listings matching “page item 1”." in narrowed


def test_a_purchase_reads_only_the_seller_from_the_user_table(users: dict[str, int]) -> None:
    bob = users["bob"]
    item, price = listing_of(bob)
    alice = login("alice")
    with CaptureQueriesContext(connection) as queries:
        response = alice.post(f"/market/buy/{item}/{bob}/", {"price": price})
    assert response.status_code == 302
    assert item in MARKET.inventory(users["alice"])
    sql = [query["sql"] for query in queries]
    # The buyer (the session's user) and the seller's name, for the notice and the message.
    read_users = [query for query in sql if '"auth_user"' in query]
    assert len(read_users) == 2
    assert all('WHERE "auth_user"."id" ' in query for query in read_users)
    # And the session: read, then saved (it remembers the notice) in a savepoint.
    assert len(sql) == 6
    with CaptureQueriesContext(connection) as refused:
        alice.post(f"/market/buy/{item}/{bob}/", {"price": price})  # gone now
    assert len(refused) == 2  # the session and its user: a refusal names nobody


def _changes(r: redis.Redis) -> int:
    """The server's count of writes that changed data (what the next save would store)."""
    return int(r.info("persistence")["rdb_changes_since_last_save"])


def test_page_views_write_nothing_to_redis(
    users: dict[str, int], r: redis.Redis, count_commands: CommandCount
) -> None:
    """Looking writes nothing, also for a user the market has never seen (not seeded)."""
    get_user_model()._default_manager.create_user("frank", password=DEMO_PASSWORD)
    writing = {
        name for name, info in r.command().items() if {"write", "may_replicate"} & {*info["flags"]}
    }
    [chat] = GroupChat().chat_list(users["alice"])
    pages = ["/", "/login/", "/market/", "/market/?sort=seller", "/inventory/", "/contacts/"]
    pages += ["/guild/?member=Ada+Abbott", "/notices/", "/chats/", "/checkouts/"]
    pages += ["/notices/waiting/", "/checkouts/slots/", "/catalogue/", "/catalogue/progress/"]
    for name, chats in (("alice", [f"/chats/{chat.chat_id}/"]), ("frank", [])):
        client = login(name)
        for page in pages + chats:
            before = _changes(r)
            with count_commands as counted:
                assert client.get(page).status_code == 200
            assert _changes(r) == before, f"{name} looking at {page} changed Redis"
            if page.startswith(("/chats/", "/notices/", "/checkouts/")):
                # The chat list's script applies the chats' limits (CHAT_MAX_MESSAGES),
                # a write only for a chat over them; the notices page pulls the mailbox
                # (MULTI, LRANGE, DEL, EXEC): that is what delivers notices, and an empty
                # mailbox changes nothing, as the count above shows. The checkouts
                # page counts the semaphore's permits with a read-only script (EVALSHA,
                # which the command table cannot tell from a writing one).
                continue
            sent = {command.split()[0].lower() for command in counted.commands}
            assert not sent & writing, f"{name} looking at {page} sent {sorted(sent & writing)}"


def _pausing(
    method: Callable[..., Any], entered: threading.Event, resume: threading.Event
) -> Callable[..., Any]:
    """``method``, stopping (under the caller's locks) until ``resume`` is set."""

    def paused(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert resume.wait(10)
        return method(*args, **kwargs)

    return paused


def test_a_withdraw_in_progress_holds_off_the_buy_view(
    users: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice_id = users["alice"]
    item, price = listing_of(alice_id)
    entered, resume = threading.Event(), threading.Event()
    monkeypatch.setattr(MARKET, "price", _pausing(MARKET.price, entered, resume))
    withdrawn = []
    thread = threading.Thread(target=lambda: withdrawn.append(MARKET.withdraw(item, alice_id)))
    thread.start()
    try:
        assert entered.wait(10)
        assert RedisLock(item_lock(item, alice_id)).locked()
        bob = login("bob")
        busy = bob.post(f"/market/buy/{item}/{alice_id}/", {"price": price}, follow=True)
        assert flash(busy) == [f"Someone else is buying {item} right now. Try again in a moment."]
    finally:
        resume.set()
        thread.join()
    assert withdrawn == [True]
    late = bob.post(f"/market/buy/{item}/{alice_id}/", {"price": price}, follow=True)
    assert flash(late) == [f"{item} is not for sale: it was sold or withdrawn, or never listed."]
    assert item in MARKET.inventory(alice_id)
    assert MARKET.check() == []


@pytest.mark.django_db(transaction=True)  # the buying thread has its own connection
def test_a_purchase_in_progress_in_the_buy_view_holds_off_a_withdraw(
    users: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice_id, bob_id = users["alice"], users["bob"]
    item, price = listing_of(alice_id)
    entered, resume = threading.Event(), threading.Event()
    monkeypatch.setattr(
        MARKET, "purchase_under_lock", _pausing(MARKET.purchase_under_lock, entered, resume)
    )
    monkeypatch.setattr("demo_project.marketplace.market.BUSY_TIMEOUT", 0.2)
    bob = login("bob")
    bought = []

    def buy() -> None:
        try:
            bought.append(bob.post(f"/market/buy/{item}/{alice_id}/", {"price": price}))
        finally:
            connections.close_all()

    thread = threading.Thread(target=buy)
    thread.start()
    try:
        assert entered.wait(10)
        assert RedisLock(item_lock(item, alice_id)).locked()
        alice = login("alice")
        busy = alice.post("/inventory/withdraw/", {"item": item}, follow=True)
        assert flash(busy) == [f"Someone is buying {item} right now; try again."]
    finally:
        resume.set()
        thread.join()
    assert bought[0].status_code == 302
    late = alice.post("/inventory/withdraw/", {"item": item}, follow=True)
    assert flash(late) == [f"{item} is not for sale any more: it was sold."]
    assert item in MARKET.inventory(bob_id)
    assert MARKET.check() == []


def test_a_bulk_listing_is_a_task_whose_progress_the_page_reads(
    users: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_tasks, "BULK_PACE", 0.0)  # (a pause per item, for visitors)
    alice_id = users["alice"]
    items = MARKET.inventory(alice_id)
    assert items
    alice = login("alice")
    progress = "/inventory/list-all/progress/"
    assert alice.get(progress).status_code == 404

    def start(price: str) -> Any:
        return alice.post("/inventory/list-all/", {"price": price}, HTTP_ACCEPT="application/json")

    for bad in ("0", "ten", "", "2.5", "9" * 50):
        refused = start(bad)
        assert refused.status_code == 400
        assert refused.json() == {"error": "A price is a whole number from 1 to 1,000,000."}
    form = alice.post("/inventory/list-all/", {"price": "-5"}, follow=True)  # no JavaScript
    assert flash(form) == ["A price is a whole number from 1 to 1,000,000."]
    started = start("7")
    assert started.status_code == 202
    queued = alice.get(progress).json()
    assert queued["task_id"] == started.json()["task_id"]
    assert (queued["status"], queued["finished"], queued["done"]) == ("READY", False, 0)
    assert queued["started_by"] == "alice"  # the task's metadata
    assert start("8").status_code == 409  # one at a time
    assert Worker(["market"], burst=True).run() == 1
    done = alice.get(progress).json()
    assert done["status"] == "SUCCESSFUL"
    assert (done["done"], done["total"]) == (len(items), len(items))
    assert done["note"] == f"{len(items)} listed"
    assert MARKET.inventory(alice_id) == []
    assert {(item, alice_id, 7) for item in items} <= set(MARKET.listings())
    assert MARKET.check() == []
    page = alice.get("/inventory/").content.decode()
    assert f'<progress max="{len(items)}" value="{len(items)}"' in page
    assert start("9").json() == {"error": "You have no items to list."}
    # alice is staff: the task's admin page shows its progress and who started it.
    admin = alice.get("/admin/redis_components/taskqueues/task/", {"id": done["task_id"]})
    shown = admin.content.decode()
    assert "&quot;started_by&quot;: &quot;alice&quot;" in shown
    assert f"{len(items)} listed" in shown
