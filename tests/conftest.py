"""Browser fixtures: headless Chromium driven through chromedriver (Selenium).

Chromium and chromedriver come from the system (``make test`` installs Debian's
``chromium`` and ``chromium-driver`` when it can); CHROME_BIN and CHROMEDRIVER name
others. Without them the browser tests are skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CHROMIUM_ARGUMENTS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1024,768",
]


def _find(env: str, names: list[str]) -> str | None:
    explicit = os.environ.get(env)
    if explicit:
        return explicit
    return next((path for name in names if (path := shutil.which(name))), None)


@pytest.fixture(scope="session")
def new_browser() -> Iterator[Callable[[], Any]]:
    """A function that starts a headless Chromium (all are closed at the end)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    chromium = _find("CHROME_BIN", ["chromium", "chromium-browser", "google-chrome"])
    driver = _find("CHROMEDRIVER", ["chromedriver"])
    if chromium is None or driver is None:
        pytest.skip(
            f"no browser for the browser tests (chromium: {chromium}, chromedriver: {driver}); "
            "install Debian's chromium and chromium-driver, or set CHROME_BIN and CHROMEDRIVER"
        )
    started: list[Any] = []

    def start() -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for argument in CHROMIUM_ARGUMENTS:
            options.add_argument(argument)
        browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
        started.append(browser)
        return browser

    yield start
    for browser in started:
        browser.quit()


@pytest.fixture(scope="module")
def browser(new_browser: Callable[[], Any]) -> Any:
    """One headless Chromium for a test module."""
    return new_browser()
