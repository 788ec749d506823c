"""The demo's chats and listings in real browsers (headless Chromium): live, in every tab."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from demo_project.marketplace.views import MARKET
from redis_components import GroupChat
from tests.pages import page_width, resize
from tests.test_market_browser import buy_button, flash, listing_by, log_in, user_id

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def site(live_server: Any) -> Iterator[str]:
    from demo_project.marketplace.seed import seed

    with override_settings(REDIS_COMPONENTS={"CHAT_KEEP_READ": True}):  # as the demo has it
        seed(MARKET, guild_size=100)
        yield str(live_server.url)


def shown_messages(browser: Any) -> list[str]:
    # Read in one script: the page redraws the log as messages arrive.
    return list(
        browser.execute_script(
            "return [...document.querySelectorAll('[data-log] li span')].map(e => e.textContent)"
        )
    )


def send(browser: Any, text: str) -> None:
    from selenium.webdriver.common.by import By

    field = browser.find_element(By.ID, "message")
    field.send_keys(text)
    browser.find_element(By.CSS_SELECTOR, "[data-send] button").click()


def appears(browser: Any, text: str, within: float) -> float:
    """Seconds until ``text`` is in the chat's log (fails past ``within``)."""
    started = time.monotonic()
    while text not in shown_messages(browser):
        assert time.monotonic() - started < within, (
            f"{text!r} did not appear: {shown_messages(browser)}"
        )
        time.sleep(0.02)
    return time.monotonic() - started


def open_chat(browser: Any, site: str, name: str, chat_id: str) -> None:
    from selenium.webdriver.support.wait import WebDriverWait

    log_in(browser, site, name)
    browser.get(f"{site}/chats/{chat_id}/")
    WebDriverWait(browser, 10).until(lambda b: shown_messages(b), "the history did not load")


def test_messages_appear_live_in_every_tab_of_every_member_and_a_reload_keeps_them(
    site: str, browser: Any, new_browser: Callable[[], Any]
) -> None:
    [chat_id] = GroupChat().chats_of(user_id("alice"))
    alice, bob, bob_again = browser, new_browser(), new_browser()
    for name, tab in (("alice", alice), ("bob", bob), ("bob", bob_again)):
        open_chat(tab, site, name, chat_id)
    time.sleep(0.5)  # every tab is following the chat
    send(alice, "hello bob")
    delays = [appears(tab, "hello bob", within=5) for tab in (bob, bob_again)]
    send(bob, "hi alice")
    delays.append(appears(alice, "hi alice", within=5))
    assert max(delays) < 1.0, delays  # live: well within a second
    assert appears(bob_again, "hi alice", within=5) >= 0
    bob.refresh()  # a reload shows the conversation, read or not
    assert appears(bob, "hello bob", within=10) >= 0
    assert shown_messages(bob)[-2:] == ["hello bob", "hi alice"]
    assert shown_messages(bob).count("hello bob") == 1


def test_the_chat_list_counts_unread_messages_live(site: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    [chat_id] = GroupChat().chats_of(user_id("bob"))
    GroupChat().fetch_pending(user_id("bob"))  # nothing unread: no badge
    log_in(browser, site, "bob")
    browser.get(f"{site}/chats/")
    badge = browser.find_element(By.CSS_SELECTOR, f'[data-unread="{chat_id}"]')
    assert not badge.is_displayed()
    time.sleep(0.5)
    GroupChat().send(chat_id, user_id("carol"), "are you there?")
    WebDriverWait(browser, 5).until(lambda _: badge.is_displayed() and badge.text == "1")
    GroupChat().mark_read(chat_id, user_id("bob"))  # read elsewhere (another tab): no badge
    WebDriverWait(browser, 5).until(lambda _: not badge.is_displayed())


def test_a_withdraw_and_a_purchase_end_in_one_of_them_in_either_order(
    site: str, browser: Any, new_browser: Callable[[], Any]
) -> None:
    from selenium.webdriver.common.by import By

    alice, bob = browser, new_browser()
    log_in(alice, site, "alice")
    log_in(bob, site, "bob")
    first, second = listing_by("alice"), None
    # Withdrawn first: the buyer is told it is gone.
    bob.get(f"{site}/market/")
    late_buy = buy_button(bob, first)
    alice.get(f"{site}/inventory/")
    alice.find_element(By.CSS_SELECTOR, f"button[aria-label='Withdraw {first}']").click()
    assert flash(alice) == f"{first} is back in your items."
    late_buy.click()
    assert flash(bob) == f"{first} is not for sale: it was sold or withdrawn, or never listed."
    assert first in MARKET.inventory(user_id("alice"))
    # Bought first: the seller is told it was sold.
    second = listing_by("alice")
    alice.get(f"{site}/inventory/")
    late_withdraw = alice.find_element(By.CSS_SELECTOR, f"button[aria-label='Withdraw {second}']")
    bob.get(f"{site}/market/")
    buy_button(bob, second).click()
    assert flash(bob).startswith(f"You bought {second} from alice")
    late_withdraw.click()
    assert flash(alice) == f"{second} is not for sale any more: it was sold."
    assert second in MARKET.inventory(user_id("bob"))
    assert MARKET.check() == []


def test_a_new_chat_picks_a_recent_contact_from_the_autocomplete(site: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.wait import WebDriverWait

    log_in(browser, site, "alice")
    browser.get(f"{site}/chats/")
    field = browser.find_element(By.ID, "id_recipients")
    field.send_keys("ca")
    listbox = browser.find_element(By.ID, field.get_attribute("aria-controls"))
    WebDriverWait(browser, 10).until(
        lambda _: (
            [o.text for o in listbox.find_elements(By.CSS_SELECTOR, "[role=option]")] == ["carol"]
        ),
        "alice's recent contact carol was not offered",
    )
    field.send_keys(Keys.ARROW_DOWN, Keys.ENTER)
    assert field.get_attribute("value") == "carol"
    browser.find_element(By.ID, "first-message").send_keys("hello carol")
    browser.find_element(By.CSS_SELECTOR, "[data-new-chat] button").click()
    WebDriverWait(browser, 10).until(lambda b: "hello carol" in shown_messages(b))
    carol, bob = user_id("carol"), user_id("bob")
    [new_chat] = set(GroupChat().chats_of(carol)) - set(GroupChat().chats_of(bob))
    assert browser.current_url.endswith(f"/chats/{new_chat}/")
    assert GroupChat().members(new_chat) == sorted([str(user_id("alice")), str(carol)])


def test_the_market_pages_past_a_hundred_listings(site: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    alice = user_id("alice")
    for n in range(120):
        MARKET.make_item(alice, f"paged item {n:03}")
        MARKET.list_item(f"paged item {n:03}", alice, 5)
    total = len(MARKET.listings())
    log_in(browser, site, "bob")
    browser.get(f"{site}/market/?sort=item")
    assert f"{total} listings; 1 to 100 shown." in browser.page_source
    browser.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
    assert f"{total} listings; 101 to {min(total, 200)} shown." in browser.page_source
    assert browser.find_element(By.CSS_SELECTOR, "a[rel=prev]").is_displayed()


def test_a_long_url_in_a_message_wraps_for_every_member(
    site: str, browser: Any, new_browser: Callable[[], Any]
) -> None:
    from selenium.webdriver.common.by import By

    [chat_id] = GroupChat().chats_of(user_id("alice"))
    url = "https://example.com/" + "a" * 300
    GroupChat().send(chat_id, str(user_id("alice")), url)
    alice, bob = browser, new_browser()
    for tab, width in ((alice, 1280), (bob, 390)):
        resize(tab, width)
        open_chat(tab, site, "alice" if tab is alice else "bob", chat_id)
        appears(tab, url, within=5)
        assert page_width(tab) <= width
        send_button = tab.find_element(By.CSS_SELECTOR, "[data-send] button").rect
        assert send_button["x"] + send_button["width"] <= width
