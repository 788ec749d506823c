"""Browser fixtures: headless Chromium driven through chromedriver (Selenium).

Chromium and chromedriver come from the system (``make test`` installs Debian's
``chromium`` and ``chromium-driver`` when it can); CHROME_BIN and CHROMEDRIVER name
others. Without them the browser tests are skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import missing
from tests.processes import WorkerProcess

# What each test module is for, and so which legs of `make test` run it (the Makefile
# selects them with -m; CONTRIBUTING.md, "The test suite", has the table):
#   static     no server's behaviour: packaging, docs, imports, translations
#   django     Django's integration: views, admin, commands, checks, the Tasks backend
#   client     our use of redis-py: connections, replies, the cluster client, scripts
#   server     the components' behaviour on a Redis server: scripts, keys, data
#   processes  proofs with real processes: workers, kill -9, SIGSTOP, failover
#   browser    headless Chromium
#   peers      other projects' own test suites against our code
# A test that takes the redis_mode fixture (bytes or str replies) is a client test too.
PURPOSE: dict[str, tuple[str, ...]] = {
    "test_admin_queues.py": ("django",),
    "test_admin_queues_browser.py": ("browser",),
    "test_architecture.py": ("static",),
    "test_async_twins.py": ("server",),
    "test_autocomplete.py": ("server",),
    "test_autocomplete_browser.py": ("browser",),
    "test_autocomplete_views.py": ("django",),
    "test_chat_browser.py": ("browser",),
    "test_checks.py": ("django",),
    "test_connection.py": ("client",),
    "test_contract.py": ("server", "client"),
    "test_demo_command.py": ("django", "processes"),
    "test_demo_imports.py": ("static",),
    "test_django_tasks_suite.py": ("peers", "django"),
    "test_docs.py": ("static",),
    "test_embedded.py": ("processes",),
    "test_failover.py": ("processes", "client"),
    "test_files.py": ("server",),
    "test_files_commands.py": ("django", "processes"),
    "test_import.py": ("static",),
    "test_keys.py": ("static",),
    "test_limits.py": ("server", "processes"),
    "test_locks.py": ("server",),
    "test_market.py": ("server", "processes"),
    "test_market_browser.py": ("browser",),
    "test_market_catalogue.py": ("django",),
    "test_market_views.py": ("django",),
    "test_market_visible.py": ("django",),
    "test_messaging.py": ("server",),
    "test_messaging_views.py": ("django",),
    "test_metrics.py": ("django",),
    "test_packaging.py": ("static",),
    "test_peer_lock_suites.py": ("peers", "client"),
    "test_queue_health.py": ("server", "django"),
    "test_rc_queues.py": ("django",),
    "test_rc_worker.py": ("processes",),
    "test_redispy.py": ("client",),
    "test_scripts.py": ("client", "server"),
    "test_semaphores.py": ("server",),
    "test_task_backend.py": ("django", "server"),
    "test_task_enqueue_many.py": ("server", "django", "processes"),
    "test_task_messages.py": ("static",),
    "test_task_metadata.py": ("server", "processes", "django", "smoke"),
    "test_task_progress.py": ("server", "processes", "django"),
    "test_task_registry.py": ("server",),
    "test_task_retries.py": ("server", "processes", "django", "smoke"),
    "test_task_schedules.py": ("server", "django"),
    "test_task_status.py": ("server",),
    "test_tracing.py": ("server", "processes", "django"),
    "test_tracing_metrics.py": ("server", "django"),
    "test_tracing_locks.py": ("server", "processes"),
    "test_task_homes.py": ("server",),
    "test_task_store.py": ("server",),
    "test_task_take_ahead.py": ("processes",),
    "test_task_threads.py": ("processes",),
    "test_task_worker.py": ("processes",),
    "test_templatetags.py": ("django",),
    "test_testing.py": ("server",),
    "test_translations.py": ("static",),
    "test_typing.py": ("static",),
    "test_upgrade.py": ("server",),
    "test_user_identity.py": ("django",),
    "test_value_types.py": ("django",),
    "test_views_queues.py": ("django",),
    "test_widgets.py": ("django",),
    "test_workflow_properties.py": ("server",),
    "test_workflows.py": ("server", "processes"),
}
# Single tests with a purpose of their own: "smoke" (a worker on the legs that run no
# process tests otherwise), "once" (a peers' suite that no other leg needs to repeat),
# "client" (a process test that depends on what redis-py's cluster client raises).
SINGLE_PURPOSE: dict[str, tuple[str, ...]] = {
    "test_rc_worker.py::test_kill_9_loses_no_task_and_duplicates_only_tasks_in_flight": ("smoke",),
    "test_rc_worker.py::test_a_worker_started_before_its_cluster_waits_for_it": ("client",),
    "test_task_threads.py::test_four_threads_run_four_tasks_at_once": ("smoke",),
    "test_peer_lock_suites.py::test_python_redis_locks_tests_pass_on_our_lock": ("once",),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its module's purposes; a module missing from PURPOSE fails."""
    unknown = set()
    for item in items:
        module = item.path.name
        if module not in PURPOSE:
            unknown.add(module)
            continue
        name = item.originalname if isinstance(item, pytest.Function) else item.name
        purposes = PURPOSE[module] + SINGLE_PURPOSE.get(f"{module}::{name}", ())
        if "redis_mode" in getattr(item, "fixturenames", ()):
            purposes += ("client",)
        for purpose in dict.fromkeys(purposes):
            item.add_marker(purpose)
    if unknown:
        raise pytest.UsageError(
            f"tests/conftest.py's PURPOSE does not say what {sorted(unknown)} test: add them"
        )


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
def _browser_binaries() -> tuple[str, str]:
    pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    chromium = _find("CHROME_BIN", ["chromium", "chromium-browser", "google-chrome"])
    driver = _find("CHROMEDRIVER", ["chromedriver"])
    if chromium is None or driver is None:
        missing(
            f"no browser for the browser tests (chromium: {chromium}, chromedriver: {driver}); "
            "install Debian's chromium and chromium-driver, or set CHROME_BIN and CHROMEDRIVER"
        )
    return chromium, driver


def _start(binaries: tuple[str, str]) -> Any:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = binaries[0]
    for argument in CHROMIUM_ARGUMENTS:
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(binaries[1]))


@pytest.fixture(scope="module")
def browser(_browser_binaries: tuple[str, str]) -> Iterator[Any]:
    """One headless Chromium for a test module."""
    browser = _start(_browser_binaries)
    yield browser
    browser.quit()


@pytest.fixture(autouse=True)
def _quiet_browser(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a browser test, leave the page (no script of it may call the server later)
    and give the window its own size back (see ``tests.pages.resize``)."""
    yield
    if "browser" in request.fixturenames:
        browser = request.getfixturevalue("browser")
        browser.get("about:blank")
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture
def new_browser(_browser_binaries: tuple[str, str]) -> Iterator[Callable[[], Any]]:
    """A function that starts another headless Chromium, closed after the test."""
    started: list[Any] = []

    def start() -> Any:
        started.append(_start(_browser_binaries))
        return started[-1]

    yield start
    for browser in started:
        browser.quit()


@pytest.fixture
def worker_may_check_db_connections(django_db_blocker: Any, monkeypatch: Any) -> Iterator[None]:
    """A worker in the test process calls close_old_connections() around each task, as
    Django does around requests; that looks at connections other tests may have left open,
    and would close the test's own, inside the transaction a non-transactional test runs in
    (the test database is a file: see tests/settings.py). Such a connection is kept."""
    from django.db.backends.base.base import BaseDatabaseWrapper

    close = BaseDatabaseWrapper.close_if_unusable_or_obsolete

    def unless_in_the_tests_transaction(self: BaseDatabaseWrapper) -> None:
        if not self.in_atomic_block:
            close(self)

    monkeypatch.setattr(
        BaseDatabaseWrapper, "close_if_unusable_or_obsolete", unless_in_the_tests_transaction
    )
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(
        *args: str, environment: dict[str, str] | None = None, **settings: object
    ) -> WorkerProcess:
        worker = WorkerProcess(tmp_path, list(args), settings, environment)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.kill_all()


@pytest.fixture
def viewer(client: Any, django_user_model: Any) -> Any:
    """A test client logged in as staff who may view the task queues' admin pages (not
    manage them)."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("watcher", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_task_queues"))
    client.force_login(user)
    return client


@pytest.fixture(scope="session")
def postgres() -> Iterator[dict[str, Any]]:
    """Django's ``DATABASES`` entry for a PostgreSQL server of the suite's own
    (``tests/postgres.py``); skipped, saying why, where it cannot run."""
    from tests.postgres import postgres_server, unavailable

    reason = unavailable()
    if reason is not None:
        missing(reason)
    with postgres_server() as database:
        yield database


@pytest.fixture(scope="session")
def live_server(django_db_setup: None) -> Iterator[Any]:
    """pytest-django's live server, started once the test database exists.

    Its own fixture starts before the database is set up, takes the settings' ``:memory:``
    for a database to share, and hands one SQLite connection to all the server's threads;
    the long polls of the chat pages then use it at once. Started here, every thread opens
    its own connection to the test database file (tests/settings.py).
    """
    from pytest_django.live_server_helper import LiveServer

    server = LiveServer(os.environ.get("DJANGO_LIVE_TEST_SERVER_ADDRESS", "localhost"))
    yield server
    server.stop()


@pytest.fixture
def exported() -> Iterator[Callable[[], list[Any]]]:
    """Tracing on (TRACING True) in this process, and the spans it finished (the SDK's
    in-memory exporter: tests/spans.py, imported here only by the tests that ask)."""
    from django.conf import settings
    from django.test import override_settings

    from tests import spans

    exporter = spans.in_memory()
    exporter.clear()
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": True}):
        yield lambda: list(exporter.get_finished_spans())
    exporter.clear()
