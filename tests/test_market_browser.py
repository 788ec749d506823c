"""The demo market in real browsers (headless Chromium) against the live server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from demo_project.marketplace.seed import DEMO_PASSWORD, seed
from demo_project.marketplace.views import MARKET
from redis_components.tasks.worker import Worker
from tests.pages import page_width, resize

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def site(live_server: Any) -> str:
    seed(MARKET, guild_size=100)
    return str(live_server.url)


def user_id(name: str) -> int:
    return int(get_user_model()._default_manager.get(username=name).pk)


def listing_by(name: str) -> str:
    """One of ``name``'s items for sale."""
    return next(item for item, seller, _ in MARKET.listings() if seller == user_id(name))


def log_in(browser: Any, site: str, name: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    browser.delete_all_cookies()
    browser.get(f"{site}/login/")
    browser.find_element(By.ID, "id_username").send_keys(name)
    browser.find_element(By.ID, "id_password").send_keys(DEMO_PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form.stacked button[type=submit]").click()
    WebDriverWait(browser, 10).until(
        lambda _: browser.current_url == f"{site}/market/",
        f"{name} did not get to the market: {browser.current_url}",
    )


def funds_shown(browser: Any) -> int:
    from selenium.webdriver.common.by import By

    return int(browser.find_element(By.CSS_SELECTOR, ".balance strong").text)


def buy_button(browser: Any, item: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_element(
        By.CSS_SELECTOR, f"button[aria-label='Buy {item} for {price_of(item)}']"
    )


def price_of(item: str) -> int:
    return next(price for name, _, price in MARKET.listings() if name == item)


def flash(browser: Any) -> str:
    """The message the page shows after a purchase (waiting for the page to arrive)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(browser, 10).until(
        lambda _: browser.find_elements(By.CSS_SELECTOR, ".messages li"), "no message appeared"
    )
    return str(browser.find_element(By.CSS_SELECTOR, ".messages li").text)


def test_buy_see_the_balance_and_the_sellers_notice(
    site: str, browser: Any, new_browser: Callable[[], Any]
) -> None:
    item = listing_by("bob")
    price = price_of(item)
    log_in(browser, site, "alice")
    assert funds_shown(browser) == 1000
    buy_button(browser, item).click()
    assert (
        flash(browser) == f"You bought {item} from bob for {price}. Your balance is {1000 - price}."
    )
    assert funds_shown(browser) == 1000 - price
    assert item not in browser.page_source.split("<tbody>")[1]  # no longer listed

    assert Worker(["market", "email"], burst=True).run() == 2  # the sale's workflow: record, notify
    bob = new_browser()
    log_in(bob, site, "bob")
    bob.get(f"{site}/notices/")
    assert f"Your {item} sold to alice for {price}." in bob.page_source
    assert MARKET.check() == []


def test_two_buyers_at_once_one_gets_it_the_other_sees_why(
    site: str, browser: Any, new_browser: Callable[[], Any]
) -> None:
    item = listing_by("carol")
    buyers = {"alice": browser, "dave": new_browser()}
    for name, buyer in buyers.items():
        log_in(buyer, site, name)
    buttons = {name: buy_button(buyer, item) for name, buyer in buyers.items()}
    start = threading.Barrier(len(buyers))

    def click(name: str) -> None:
        start.wait()
        buttons[name].click()

    clicks = [threading.Thread(target=click, args=(name,)) for name in buyers]
    for thread in clicks:
        thread.start()
    for thread in clicks:
        thread.join()
    said = sorted(flash(buyer) for buyer in buyers.values())
    winners = [text for text in said if text.startswith("You bought")]
    losers = [text for text in said if not text.startswith("You bought")]
    assert len(winners) == 1, said
    assert losers[0] in (
        f"{item} is not for sale: it was sold or withdrawn, or never listed.",
        f"Someone else is buying {item} right now. Try again in a moment.",
    )
    owners = [name for name in buyers if item in MARKET.inventory(user_id(name))]
    assert len(owners) == 1
    assert MARKET.check() == []


def test_no_page_is_wider_than_a_phone(site: str, browser: Any) -> None:
    log_in(browser, site, "alice")
    resize(browser, 390)
    pages = ("/", "/market/", "/inventory/", "/notices/", "/chats/", "/contacts/", "/guild/")
    for page in (*pages, "/checkouts/", "/catalogue/"):
        browser.get(site + page)
        assert page_width(browser) <= 390, page


def test_a_listings_text_is_centred_on_its_buy_button(site: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    log_in(browser, site, "alice")
    item = listing_by("bob")
    button = buy_button(browser, item).rect
    name = browser.find_element(By.XPATH, f"//table[@class='listings']//td[text()='{item}']")
    # The text's own box, not the cell's (which is as tall as the row).
    text = browser.execute_script(
        "const range = document.createRange(); range.selectNodeContents(arguments[0]);"
        "const box = range.getBoundingClientRect(); return {y: box.y, height: box.height};",
        name,
    )
    middle = text["y"] + text["height"] / 2
    assert abs(middle - (button["y"] + button["height"] / 2)) <= 2


def test_the_checkouts_page_shows_the_slots_held_live(
    site: str, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start a load from the page: the slots fill, live, never past the semaphore's limit,
    and all come free once every checkout has paid."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    from demo_project.marketplace import checkouts

    monkeypatch.setattr(checkouts, "PAY_SECONDS", 0.5)
    monkeypatch.setattr(checkouts, "LOAD", 9)
    log_in(browser, site, "bob")
    browser.get(f"{site}/checkouts/")

    def held() -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, "ol.slots li.held"))

    assert held() == 0
    browser.find_element(By.CSS_SELECTOR, "[data-start-load]").click()
    seen: list[int] = []

    def full(_: Any) -> bool:
        seen.append(held())
        return seen[-1] == checkouts.SLOTS

    WebDriverWait(browser, 10, poll_frequency=0.05).until(full, "the slots never filled")
    done = '[data-slot="done"]'
    WebDriverWait(browser, 20, poll_frequency=0.05).until(
        lambda _: seen.append(held()) or browser.find_element(By.CSS_SELECTOR, done).text == "9",
        "the load did not finish",
    )
    WebDriverWait(browser, 5).until(lambda _: held() == 0, "the slots did not come free")
    assert max(seen) == checkouts.SLOTS
    assert browser.find_element(By.CSS_SELECTOR, '[data-slot="peak"]').text == "3"


def test_the_catalogue_page_shows_the_readers_progress_and_the_download(
    site: str, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish from the page: the sender's and readers' bars fill, live, and the link to
    the visitor's copy appears once every reader has the file."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    from demo_project.marketplace import catalogues

    monkeypatch.setattr(catalogues, "PACE", dict.fromkeys(catalogues.PACE, 0.05))
    log_in(browser, site, "bob")
    browser.get(f"{site}/catalogue/")
    link = browser.find_element(By.CSS_SELECTOR, "[data-download]")
    assert not link.is_displayed()
    browser.find_element(By.CSS_SELECTOR, "[data-publish]").click()

    def cell(who: str, field: str) -> str:
        selector = f'tr[data-who="{who}"] [data-field="{field}"]'
        return str(browser.find_element(By.CSS_SELECTOR, selector).text)

    WebDriverWait(browser, 10, poll_frequency=0.05).until(
        lambda _: cell("sender", "bytes") != "0", "the sender's progress never showed"
    )
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda _: link.is_displayed(), "the download never appeared"
    )
    total = browser.find_element(By.CSS_SELECTOR, '[data-run="bytes_total"]').text
    for who in ("sender", *catalogues.READERS):
        assert (cell(who, "bytes"), cell(who, "state")) == (total, "done")
    assert link.get_attribute("href") == f"{site}/catalogue/download/"
