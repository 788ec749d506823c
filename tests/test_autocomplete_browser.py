"""The autocomplete widget in a real browser: headless Chromium against ``live_server``.

The browser comes from tests/conftest.py (skipped, saying why, when there is none).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from redis_components import Guild, RecentContacts

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(browser: webdriver.Chrome, live_server: object) -> webdriver.Chrome:
    """The test page, opened by the signed-in user "alice"."""
    alice = User.objects.create(username="alice")
    client = Client()
    client.force_login(alice)
    url = f"{live_server}/autocomplete-page/"
    browser.get(url)
    browser.delete_all_cookies()
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value})
    browser.get(url)
    return browser


def options(browser: webdriver.Chrome, field: WebElement) -> list[WebElement]:
    listbox = browser.find_element(By.ID, field.get_attribute("aria-controls") or "")
    return listbox.find_elements(By.CSS_SELECTOR, "[role=option]") if listbox.is_displayed() else []


def wait_for_suggestions(browser: webdriver.Chrome, field: WebElement, expected: list[str]) -> None:
    WebDriverWait(browser, 10).until(
        lambda _: [option.text for option in options(browser, field)] == expected,
        f"suggestions never became {expected}",
    )


def active_option(browser: webdriver.Chrome, field: WebElement) -> str:
    active = field.get_attribute("aria-activedescendant")
    assert active, "no option is active"
    option = browser.find_element(By.ID, active)
    assert option.get_attribute("aria-selected") == "true"
    return option.text


def test_type_see_suggestions_and_pick_one_with_the_keyboard(page: webdriver.Chrome) -> None:
    alice = User.objects.get(username="alice")
    for name in ["Zack", "Zoë Saldaña", "Zoe Adams", "Bob"]:
        RecentContacts().add(alice, name)
    field = page.find_element(By.ID, "id_to")
    assert field.get_attribute("role") == "combobox"
    assert field.get_attribute("aria-expanded") == "false"
    listbox = page.find_element(By.ID, field.get_attribute("aria-controls") or "")
    assert listbox.get_attribute("role") == "listbox"
    assert not listbox.is_displayed()

    field.send_keys("z")
    wait_for_suggestions(page, field, ["Zoe Adams", "Zoë Saldaña", "Zack"])
    field.send_keys("oe")  # a newer request replaces the older one
    wait_for_suggestions(page, field, ["Zoe Adams", "Zoë Saldaña"])
    assert field.get_attribute("aria-expanded") == "true"
    assert field.get_attribute("aria-activedescendant") is None

    field.send_keys(Keys.ARROW_DOWN)
    assert active_option(page, field) == "Zoe Adams"
    field.send_keys(Keys.ARROW_DOWN)
    assert active_option(page, field) == "Zoë Saldaña"
    field.send_keys(Keys.ARROW_DOWN)
    assert active_option(page, field) == "Zoe Adams"  # wraps around
    field.send_keys(Keys.ARROW_UP)
    assert active_option(page, field) == "Zoë Saldaña"
    field.send_keys(Keys.ENTER)

    assert field.get_attribute("value") == "Zoë Saldaña"
    assert field.get_attribute("aria-expanded") == "false"
    assert field.get_attribute("aria-activedescendant") is None
    assert not listbox.is_displayed()
    assert page.current_url.endswith("/autocomplete-page/")  # Enter picked, did not submit


def test_guild_members_escape_closes_and_tab_leaves_without_picking(
    page: webdriver.Chrome,
) -> None:
    Guild("knights").join_many(["alice", "Ærwyn", "Aeris", "Bors"])
    field = page.find_element(By.ID, "id_member")
    field.send_keys("ae")
    wait_for_suggestions(page, field, ["Aeris", "Ærwyn"])
    field.send_keys(Keys.ARROW_DOWN)
    field.send_keys(Keys.ESCAPE)
    assert options(page, field) == []
    assert field.get_attribute("aria-expanded") == "false"
    assert field.get_attribute("value") == "ae"

    field.send_keys(Keys.ARROW_DOWN)  # Down opens the closed list again
    assert active_option(page, field) == "Aeris"
    field.send_keys(Keys.TAB)
    assert options(page, field) == []
    assert field.get_attribute("value") == "ae"
    assert page.switch_to.active_element != field

    field.click()
    field.send_keys("r")
    wait_for_suggestions(page, field, ["Aeris", "Ærwyn"])
    field.send_keys(Keys.ARROW_UP, Keys.ENTER)
    assert field.get_attribute("value") == "Ærwyn"


def test_form_widgets_work_the_same_and_clicks_pick_too(page: webdriver.Chrome) -> None:
    alice = User.objects.get(username="alice")
    RecentContacts().add(alice, "Bob")
    RecentContacts().add(alice, "Bea")
    field = page.find_element(By.ID, "id_recipient")
    field.send_keys("b")
    wait_for_suggestions(page, field, ["Bea", "Bob"])
    options(page, field)[1].click()
    assert field.get_attribute("value") == "Bob"
    assert options(page, field) == []
