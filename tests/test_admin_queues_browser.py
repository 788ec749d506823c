"""The task queues' admin pages in a real browser (headless Chromium), with a worker running."""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission

from redis_components import chain
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.store import dead_entry
from redis_components.tasks.store.layout import dead_key
from tests.pages import broken_words, page_width, resize
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "queues-on-call"


@pytest.fixture
def site(live_server: Any, browser: Any, django_user_model: Any) -> str:
    """The live server, with ``browser`` signed in to the admin as a queue manager."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    user = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="manage_task_queues"))
    browser.delete_all_cookies()
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.ID, "id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 10).until(
        lambda b: b.current_url == f"{live_server.url}/admin/", "the login did not go through"
    )
    return str(live_server.url)


def test_a_dead_task_requeued_from_the_page_runs(
    site: str, browser: Any, r: redis.Redis, start_worker: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    message = TaskMessage(
        id="deadbeef01",
        task="tests.testapp.tasks.record",
        queue="test",
        args=["revived"],
        kwargs={},
    )
    r.rpush(dead_key("test"), dead_entry(message.encode(), "test", "failed", "ValueError", "tb"))
    worker = start_worker("test")
    browser.get(f"{site}/admin/")
    browser.find_element(By.LINK_TEXT, "Task queues").click()
    browser.find_element(By.CSS_SELECTOR, "a.bad").click()  # the dead count of "test"
    browser.find_element(By.LINK_TEXT, "1").click()  # the newest dead letter
    assert "ValueError" in browser.page_source
    browser.find_element(By.LINK_TEXT, "Requeue").click()
    assert r.llen(dead_key("test")) == 1  # the confirmation page changed nothing
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 10).until(
        lambda b: "Requeued the dead letter" in b.page_source, "no message that it was requeued"
    )
    wait_until(lambda: r.hget("{test}:runs", "revived") == b"1", worker.output)


def test_the_overview_refreshes_itself(site: str, browser: Any) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    tasks.record.enqueue("first")
    browser.get(f"{site}/admin/redis_components/taskqueues/")
    assert browser.find_element(By.CSS_SELECTOR, ".rc-js-only").is_displayed()

    def ready_count(_: Any) -> str:
        row = browser.find_element(By.XPATH, "//tr[td/a[text()='test']]")
        return str(row.find_elements(By.CSS_SELECTOR, "td.n")[0].text)

    # The page redraws its tables as it refreshes: a row read at that moment is stale.
    waiting = WebDriverWait(browser, 30, ignored_exceptions=[StaleElementReferenceException])
    waiting.until(lambda b: ready_count(b) == "1", "the first task is not shown")
    tasks.record.enqueue("second")
    waiting.until(lambda b: ready_count(b) == "2", "no refresh")


def test_the_overview_shows_how_long_the_oldest_ready_task_waited(site: str, browser: Any) -> None:
    """Queue health beside the counts: the oldest ready task's wait in each queue that has
    one, "-" in one that has none. With RC_DOCS_SCREENSHOTS set to a folder, the page is
    saved there for the docs (docs/images/queue-health.png)."""
    from selenium.webdriver.common.by import By

    for label in ("a", "b", "c"):
        tasks.record.enqueue(label)
    tasks.record.using(queue_name="market").enqueue("d")
    tasks.record.using(queue_name="email").enqueue_in(3600, "later")
    time.sleep(1.2)  # (the ages shown are by the server's clock: a second has passed)
    browser.get(f"{site}/admin/redis_components/taskqueues/")
    table = browser.find_element(By.XPATH, "//table[.//td/a[text()='test']]")
    headers = [
        th.get_attribute("textContent").strip()
        for th in table.find_elements(By.CSS_SELECTOR, "thead th")
    ]
    column = headers.index("Oldest ready")
    assert headers[column - 1] == "Ready"

    def age(queue: str) -> str:
        row = table.find_element(By.XPATH, f".//tr[td/a[text()='{queue}']]")
        return str(row.find_elements(By.TAG_NAME, "td")[column].text)

    for queue in ("test", "market"):
        assert re.fullmatch(r"\d+\.\d s", age(queue)), age(queue)
        assert float(age(queue).split()[0]) >= 1.0
    assert age("email") == "-"  # (a delayed task is not ready)
    folder = os.environ.get("RC_DOCS_SCREENSHOTS")
    if folder:
        resize(browser, 1100)
        browser.save_screenshot(os.path.join(folder, "queue-health.png"))


def bury(r: redis.Redis, value: str) -> None:
    """A dead letter whose task's argument and error message both hold ``value``."""
    message = TaskMessage(
        id="deadbeef02", task="tests.testapp.tasks.record", queue="test", args=[value], kwargs={}
    )
    error = f"ValueError: {value}"
    r.rpush(dead_key("test"), dead_entry(message.encode(), "test", "failed", error, "tb"))


def test_long_values_wrap_in_the_lists(site: str, browser: Any, r: redis.Redis) -> None:
    from selenium.webdriver.common.by import By

    long = "x" * 1000
    bury(r, long)
    tasks.record.enqueue(long)
    resize(browser, 1280)
    queue = f"{site}/admin/redis_components/taskqueues/queue/?name=test"
    for state in ("ready", "dead"):
        browser.get(f"{queue}&state={state}")
        assert page_width(browser) <= 1280, state
        for cell in browser.find_elements(By.CSS_SELECTOR, ".rc-dash td"):
            assert cell.rect["x"] + cell.rect["width"] <= 1280, (state, cell.text[:40])
    task = browser.find_element(By.XPATH, "//tbody/tr/td[5]")  # the dead letter's task
    assert task.rect["width"] >= 200


def test_the_pages_fit_a_phone(site: str, browser: Any, r: redis.Redis, start_worker: Any) -> None:
    bury(r, "x" * 1000)
    done = chain(tasks.add.s(1, 2), tasks.add.s(10)).enqueue()
    task = tasks.record.enqueue("y" * 1000)
    start_worker("test")
    assert done.wait(30) == "SUCCESSFUL"
    resize(browser, 390)
    admin = f"{site}/admin/redis_components/taskqueues/"
    for page in (
        "",
        "queue/?name=test&state=dead",
        "dead/?queue=test&index=0",
        "workflows/",
        f"workflow/?id={done.id}",
        f"task/?id={task.id}",
    ):
        browser.get(admin + page)
        assert page_width(browser) <= 390, page
        # Only the long values (ids, names, arguments, errors) break mid-word.
        assert broken_words(browser, ".rc-dash td:not(.long)") == [], page
