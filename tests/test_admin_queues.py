"""The task queues' admin pages (redis_components.admin.queues)."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission
from django.test import Client
from django.test.utils import override_settings
from django.utils.http import urlencode

from conftest import bytes_sent, cancelled
from redis_components import chain, get_result, group
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import dead_letters, queue_stats, waiting_tasks
from redis_components.tasks.store import dead_entry, new_task_id
from redis_components.tasks.store.layout import dead_key, ready_key
from redis_components.tasks.worker import Worker
from redis_components.testing import ScriptedWorker
from tests.processes import running_worker, wait_until
from tests.testapp import tasks

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("worker_may_check_db_connections")]

ADMIN = "/admin/redis_components/taskqueues/"


def user_with(django_user_model: Any, name: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(name, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def manager(django_user_model: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with(django_user_model, "operator", "manage_task_queues"))
    return client


def dead_letter(r: redis.Redis, label: str, error: str = "ValueError: boom") -> TaskMessage:
    message = TaskMessage(
        id=new_task_id("test", label),
        task="tests.testapp.tasks.record",
        queue="test",
        args=[label],
        kwargs={},
    )
    entry = dead_entry(message.encode(), "test", "failed 3 times", error, f"Traceback of {label}")
    r.rpush(dead_key("test"), entry)
    return message


def csrf_token(page: Any) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert found, "the page has no CSRF token"
    return found.group(1)


def confirm(client: Client, url: str) -> tuple[Any, dict[str, str]]:
    """GET the confirmation page of ``url``; the form's fields, as the browser would post."""
    page = client.get(url)
    assert page.status_code == 200, page.content[:500]
    form = re.search(r'<form method="post">(.*?)</form>', page.content.decode(), re.S)
    assert form, "no confirmation form"
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(1)))
    del fields["csrfmiddlewaretoken"]  # the tests post it, or not, on purpose
    return page, fields


def test_the_admin_lists_task_queues_for_those_allowed(
    client: Client, django_user_model: Any
) -> None:
    client.force_login(user_with(django_user_model, "staff-only"))
    assert "Task queues" not in client.get("/admin/").content.decode()
    refused = client.get(ADMIN)
    assert refused.status_code == 403
    assert "the permission redis_components.view_task_queues" in refused.content.decode()
    client.force_login(user_with(django_user_model, "watcher", "view_task_queues"))
    index = client.get("/admin/").content.decode()
    assert "Task queues" in index
    assert ADMIN in index
    client.logout()
    response = client.get(ADMIN)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_the_breadcrumbs_are_marked_up_as_on_djangos_own_admin_pages(
    viewer: Client, r: redis.Redis
) -> None:
    def breadcrumbs(url: str) -> tuple[str, str]:
        """The breadcrumbs' tag (<div> before Django 6.1, <ol> since) and what they hold."""
        page = viewer.get(url).content.decode()
        found = re.search(r'<(\w+) class="breadcrumbs">(.*?)</\1>', page, re.S)
        assert found, page
        return found.group(1), found.group(2)

    djangos_tag, _ = breadcrumbs("/admin/redis_components/")  # the app's index, Django's own
    dead_letter(r, "a")
    for page, title in (
        ("", "Task queues"),
        ("queue/?name=test&state=dead", "Queue test"),
        ("dead/?queue=test&index=0", "Dead letter"),
        ("workflows/", "Workflows"),
    ):
        tag, crumbs = breadcrumbs(ADMIN + page)
        assert tag == djangos_tag, page
        assert 'href="/admin/redis_components/"' in crumbs
        assert title in crumbs


def test_the_overview_shows_queues_workers_running_tasks_schedules_and_throughput(
    viewer: Client, r: redis.Redis
) -> None:
    for i in range(3):
        tasks.record.enqueue(f"done{i}")
    Worker(["test"], burst=True).run()
    tasks.record.enqueue("waiting")
    tasks.record.enqueue_in(600, "later")
    page = viewer.get(ADMIN).content.decode()
    row = re.search(r"<tr>\s*<td><a [^>]*>test</a></td>(.*?)</tr>", page, re.S)
    assert row, page
    numbers = re.findall(r'<td class="n">(?:<a [^>]*>)?([\d.]+(?: s)?|-)', row.group(1))
    assert [numbers[0], *numbers[2:4]] == ["1", "1", "0"]  # ready, delayed, on limits
    assert re.fullmatch(r"\d+\.\d s", numbers[1])  # the oldest ready ("waiting") has waited
    assert "<svg" in page
    assert "<polyline" in page
    # Each colour sits with its own label.
    swatch = r'<span class="key"><span style="color: [^"]+" aria-hidden="true">&#9632;</span>'
    assert re.search(swatch + r" processed: 3</span>", page)
    assert "No worker is running" in page  # the burst worker has gone
    assert "Schedules (" in page


def test_the_overview_shows_the_concurrency_limits_in_use(viewer: Client) -> None:
    assert "Concurrency limits in use" not in viewer.get(ADMIN).content.decode()
    worker = ScriptedWorker(["test"])
    for i in range(4):
        tasks.per_customer.enqueue("X", f"t{i}")
    while worker.take() is not None:
        pass
    page = viewer.get(ADMIN).content.decode()
    assert "Concurrency limits in use (1)" in page
    row = re.search(r"<tr><td>customer:X</td>(.*?)</tr>", page, re.S)
    assert row, page
    assert re.findall(r'<td class="n">(\d+)</td>', row.group(1)) == ["3", "3", "1"]


def test_a_running_task_shows_with_its_worker_and_for_how_long(
    viewer: Client, r: redis.Redis, start_worker: Any
) -> None:
    worker = start_worker("test")
    tasks.slow.enqueue("long", 30)
    wait_until(lambda: r.get("test:long:started") is not None, worker.output)
    page = viewer.get(ADMIN).content.decode()
    assert "tests.testapp.tasks.slow" in page
    assert re.search(r"</code>, \d+ s", page), "how long it has run"
    assert "Terminate" not in page  # a viewer may not act


def test_a_queue_is_shown_page_by_page_with_its_tasks_arguments(viewer: Client) -> None:
    for i in range(120):
        tasks.record.enqueue(f"arg-{i}")
    first = viewer.get(ADMIN + "queue/", {"name": "test"}).content.decode()
    assert "120 ready tasks; 1 to 50 shown" in first
    assert "arg-0" in first
    assert "arg-49" in first
    assert "arg-50" not in first
    last = viewer.get(ADMIN + "queue/", {"name": "test", "page": 3}).content.decode()
    assert "101 to 120 shown" in last
    assert "arg-119" in last
    assert "Page 3 of 3" in last
    past = viewer.get(ADMIN + "queue/", {"name": "test", "page": 4}, follow=True)
    assert "Page 3 of 3" in past.content.decode()  # the list's last page
    assert "Cancel" not in last  # a viewer may not act


def test_unreadable_entries_are_marked_not_fatal(viewer: Client, r: redis.Redis) -> None:
    r.zadd(ready_key("test"), {b"\xff\xfe not a task": 1})
    r.rpush(dead_key("test"), b"{not json", b"\x80")
    ready = viewer.get(ADMIN + "queue/", {"name": "test"})
    assert ready.status_code == 200
    assert "(unreadable)" in ready.content.decode()
    dead = viewer.get(ADMIN + "queue/", {"name": "test", "state": "dead"})
    assert dead.status_code == 200
    assert dead.content.decode().count("(unreadable)") == 2
    assert viewer.get(ADMIN).status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        {"name": ""},
        {"name": "bad\x00name"},
        {"name": "test", "page": "0"},
        {"name": "test", "page": "x" * 5000},
    ],
)
def test_bad_parameters_say_what_is_wrong_and_go_back(viewer: Client, query: Any) -> None:
    response = viewer.get(ADMIN + "queue/", query, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    [message] = shown
    assert len(message) < 200  # the bad value is cut


def test_an_unknown_state_or_action_is_404(viewer: Client) -> None:
    assert viewer.get(ADMIN + "queue/", {"name": "test", "state": "lost"}).status_code == 404
    assert viewer.get(ADMIN + "do/explode/").status_code == 404


def test_a_dead_letter_shows_its_error_and_traceback(viewer: Client, r: redis.Redis) -> None:
    dead_letter(r, "old")
    dead_letter(r, "new", error="KeyError: 'x'")
    listing = viewer.get(ADMIN + "queue/", {"name": "test", "state": "dead"}).content.decode()
    assert listing.index("KeyError") < listing.index("ValueError")  # newest first
    page = viewer.get(ADMIN + "dead/", {"queue": "test", "index": 0}).content.decode()
    assert "KeyError: &#x27;x&#x27;" in page
    assert "Traceback of new" in page
    assert "Requeue" not in page  # a viewer may not act
    assert viewer.get(ADMIN + "dead/", {"queue": "test", "index": 5}).status_code == 404


def every_action(r: redis.Redis) -> list[tuple[str, dict[str, str]]]:
    """Each action with a target that exists (a dead letter, waiting and running tasks)."""
    dead_letter(r, "x")
    waiting = tasks.record.enqueue("waiting").id
    return [
        ("requeue", {"queue": "test", "index": "0"}),
        ("delete", {"queue": "test", "index": "0"}),
        ("requeue-all", {"queue": "test"}),
        ("purge", {"queue": "test"}),
        ("cancel", {"task": waiting}),
        ("terminate", {"task": waiting}),
    ]


def snapshot() -> list[Any]:
    """The ready tasks and dead letters of the test queue, each read whole."""
    return [waiting_tasks("test", "ready"), dead_letters("test")]


def test_no_action_is_done_without_the_permission_csrf_or_a_post(
    viewer: Client, manager: Client, r: redis.Redis
) -> None:
    actions = every_action(r)
    before = snapshot()
    for action, target in actions:
        url = f"{ADMIN}do/{action}/"
        refused = viewer.get(url, target)
        assert refused.status_code == 403, action
        assert "permission redis_components.manage_task_queues" in refused.content.decode()
        assert viewer.post(url, target).status_code == 403, action  # (the test client skips CSRF)
        _, fields = confirm(manager, f"{url}?{urlencode(target)}")  # a GET only asks
        assert manager.post(url, fields).status_code == 403, action  # no CSRF token
        assert snapshot() == before, action


@pytest.mark.parametrize(
    ("action", "target"),
    [
        ("requeue", {"queue": "test", "index": "3"}),
        ("delete", {"queue": "test", "index": "-1"}),
        ("requeue", {"queue": "test", "index": "x"}),
        ("cancel", {"task": "0123456789abcdef0123456789abcdef"}),
        ("terminate", {"task": "bad id\x00"}),
        ("cancel", {"task": ""}),
        ("delete", {"queue": "test"}),
        ("purge", {}),
    ],
)
def test_bad_ids_are_404(manager: Client, r: redis.Redis, action: str, target: Any) -> None:
    dead_letter(r, "x")
    assert manager.get(f"{ADMIN}do/{action}/", target).status_code == 404


def test_requeue_asks_first_needs_csrf_then_requeues_and_logs(
    manager: Client, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    message = dead_letter(r, "again")
    url = ADMIN + "do/requeue/?queue=test&index=0"
    page, fields = confirm(manager, url)
    assert "Yes, requeue a dead letter" in page.content.decode()
    assert queue_stats(["test"])[0].dead == 1  # asking changed nothing
    assert manager.post(ADMIN + "do/requeue/", fields).status_code == 403  # no CSRF token
    assert queue_stats(["test"])[0].dead == 1
    with caplog.at_level(logging.INFO, logger="redis_components.tasks"):
        done = manager.post(
            ADMIN + "do/requeue/", {**fields, "csrfmiddlewaretoken": csrf_token(page)}
        )
    assert done.status_code == 302
    [stats] = queue_stats(["test"])
    assert (stats.dead, stats.ready) == (0, 1)
    assert get_result(message.id).status is TaskResultStatus.READY
    assert "operator" in caplog.text
    assert "Requeued the dead letter" in caplog.text


def test_a_dead_letter_that_moved_is_not_acted_on(manager: Client, r: redis.Redis) -> None:
    dead_letter(r, "first")
    page, fields = confirm(manager, ADMIN + "do/delete/?queue=test&index=0")
    dead_letter(r, "second")  # index 0 is now another entry
    response = manager.post(
        ADMIN + "do/delete/", {**fields, "csrfmiddlewaretoken": csrf_token(page)}, follow=True
    )
    assert "no longer there" in str(next(iter(response.context["messages"])))
    assert queue_stats(["test"])[0].dead == 2


def test_delete_requeue_all_and_purge(manager: Client, r: redis.Redis) -> None:
    for label in "abc":
        dead_letter(r, label)
    r.rpush(dead_key("test"), b"junk")
    page, fields = confirm(manager, ADMIN + "do/delete/?queue=test&index=1")
    manager.post(ADMIN + "do/delete/", {**fields, "csrfmiddlewaretoken": csrf_token(page)})
    assert queue_stats(["test"])[0].dead == 3
    page, fields = confirm(manager, ADMIN + "do/requeue-all/?queue=test")
    done = manager.post(
        ADMIN + "do/requeue-all/",
        {**fields, "csrfmiddlewaretoken": csrf_token(page)},
        follow=True,
    )
    assert "Requeued 2 dead letters" in done.content.decode()
    assert "1 unreadable dead letter stays" in done.content.decode()
    assert queue_stats(["test"])[0].ready == 2
    page, fields = confirm(manager, ADMIN + "do/purge/?queue=test")
    manager.post(ADMIN + "do/purge/", {**fields, "csrfmiddlewaretoken": csrf_token(page)})
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.dead) == (0, 0)


def test_cancel_a_waiting_task_from_its_queue_page(manager: Client) -> None:
    waiting = tasks.record.enqueue("never")
    listing = manager.get(ADMIN + "queue/", {"name": "test"}).content.decode()
    link = re.search(r'href="([^"]*do/cancel/[^"]*)"', listing)
    assert link, listing
    page, fields = confirm(manager, link.group(1).replace("&amp;", "&"))
    manager.post(ADMIN + "do/cancel/", {**fields, "csrfmiddlewaretoken": csrf_token(page)})
    assert cancelled(get_result(waiting.id))
    again = manager.post(
        ADMIN + "do/cancel/", {**fields, "csrfmiddlewaretoken": csrf_token(page)}, follow=True
    )
    assert "already cancelled" in str(list(again.context["messages"])[-1])


def test_tasks_held_back_by_a_limit_show_the_key_and_can_be_cancelled(manager: Client) -> None:
    """The On limits tab lists the tasks the overview counts, each with the key whose
    permit it waits for and a Cancel; the Delayed tab names the rate a task was set
    aside on."""
    worker = ScriptedWorker(["test"])
    for i in range(3):
        tasks.per_customer.enqueue("X", f"run{i}")
    waiting = tasks.per_customer.enqueue("X", "waits")
    rated = [tasks.rated.enqueue(f"r{i}") for i in range(7)]
    while worker.take() is not None:
        pass
    listing = manager.get(ADMIN + "queue/", {"name": "test", "state": "on_limits"})
    page = listing.content.decode()
    assert "1 task waiting for a concurrency limit's permit; 1 to 1 shown" in page
    assert waiting.id in page
    assert "waiting for a permit of 'customer:X'" in page
    task_page = manager.get(ADMIN + "task/", {"id": waiting.id}).content.decode()
    assert "READY (waiting for a permit of 'customer:X')" in task_page
    delayed = manager.get(ADMIN + "queue/", {"name": "test", "state": "delayed"})
    assert delayed.content.decode().count("set aside on rate 'api'") == 1, rated
    shown = [manager.get(ADMIN + "task/", {"id": h.id}).content.decode() for h in rated]
    assert ["set aside on rate 'api'" in page for page in shown] == [False] * 6 + [True]
    link = re.search(r'href="([^"]*do/cancel/[^"]*)"', page)
    assert link, page
    confirmed, fields = confirm(manager, link.group(1).replace("&amp;", "&"))
    manager.post(ADMIN + "do/cancel/", {**fields, "csrfmiddlewaretoken": csrf_token(confirmed)})
    assert cancelled(get_result(waiting.id))
    assert waiting_tasks("test", "on_limits") == (0, [])


def test_a_workflow_step_waiting_on_a_limit_says_for_which_key(viewer: Client) -> None:
    flow = group(tasks.one_at_a_time.si(label) for label in ("a", "b")).enqueue()
    worker = ScriptedWorker(["test"])
    first = worker.take()
    assert first is not None
    assert worker.take() is None  # the second step waits on the limit
    page = viewer.get(ADMIN + "workflow/", {"id": flow.id}).content.decode()
    key = "task:tests.testapp.tasks.one_at_a_time"
    assert page.count(f"(waiting for a permit of '{key}')") == 1, page
    worker.succeed(first.id)
    assert worker.take() is not None
    page = viewer.get(ADMIN + "workflow/", {"id": flow.id}).content.decode()
    assert "waiting for a permit" not in page


def test_redis_down_is_a_503_page(viewer: Client) -> None:
    caches = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    with override_settings(CACHES=caches):
        response = viewer.get(ADMIN)
    assert response.status_code == 503
    assert "Redis cannot be reached" in response.content.decode()


HUGE = "9999999999999999999"  # past Redis's signed 64-bit integers


def test_huge_numbers_in_urls_are_404_or_the_pages_own_message(
    viewer: Client, manager: Client, r: redis.Redis
) -> None:
    dead_letter(r, "x")
    assert viewer.get(ADMIN + "dead/", {"queue": "test", "index": HUGE}).status_code == 404
    assert manager.get(ADMIN + "do/delete/", {"queue": "test", "index": HUGE}).status_code == 404
    for state in ("ready", "delayed", "dead"):
        for page in (HUGE, "9" * 23):  # past any list: its last page
            query = {"name": "test", "state": state, "page": page}
            response = viewer.get(ADMIN + "queue/", query, follow=True)
            assert response.status_code == 200, state
            assert response.redirect_chain[-1][0].endswith("&page=1"), state
            assert not list(response.context["messages"])


def output_bytes(r: redis.Redis) -> int:
    """What the server has sent to its clients so far."""
    return int(r.info("stats")["total_net_output_bytes"])


def test_list_pages_show_a_glimpse_of_long_arguments_and_the_tasks_page_all(
    viewer: Client, r: redis.Redis
) -> None:
    long = "é" + "x" * 1_100_000
    waiting = [tasks.record.enqueue(long).id for _ in range(3)]
    for i in range(3):
        message = TaskMessage(
            id=f"id{i}", task="tests.testapp.tasks.record", queue="test", args=[long], kwargs={}
        )
        r.rpush(dead_key("test"), dead_entry(message.encode(), "test", "failed", "E", "T" * 9000))
    for state in ("ready", "dead"):
        before = output_bytes(r)
        page = viewer.get(ADMIN + "queue/", {"name": "test", "state": state})
        assert output_bytes(r) - before < 300_000, state  # Redis never sent the whole entries
        assert len(page.content) < 100_000, state
        html = page.content.decode()
        assert "éxxx" in html, state
        assert "xxx…" in html, state  # cut, and says so
        assert re.search(r"\(of 1\.\d\xa0MB", html), state  # and how long the whole is
    assert "<td>failed</td>" in html  # a long dead letter's reason is read all the same
    ready = viewer.get(ADMIN + "queue/", {"name": "test"}).content.decode()
    assert f'href="{ADMIN}task/?id={waiting[0]}"' in ready
    assert "tests.testapp.tasks.record" in ready
    task_page = viewer.get(ADMIN + "task/", {"id": waiting[0]}).content.decode()
    assert long in task_page
    dead_page = viewer.get(ADMIN + "dead/", {"queue": "test", "index": "0"}).content.decode()
    assert long in dead_page
    assert viewer.get(ADMIN + "task/", {"id": "0" * 32}).status_code == 404
    assert viewer.get(ADMIN + "task/", {"id": "bad\x00"}).status_code == 404


def test_workflows_are_listed_with_each_steps_state_and_result(viewer: Client) -> None:
    done = chain(tasks.add.s(1, 2), tasks.add.s(10)).enqueue()
    with running_worker(["test"]):
        assert done.wait(30) == "SUCCESSFUL"
    waiting = group([tasks.record.s("a"), tasks.record.s("b")]).then(tasks.total.s()).enqueue()
    overview = viewer.get(ADMIN).content.decode()
    assert "1 workflow running" in overview
    listing = viewer.get(ADMIN + "workflows/").content.decode()
    assert done.id in listing
    assert waiting.id in listing
    assert "1 WAITING, 2 QUEUED" in listing.replace("\n", " ")
    page = viewer.get(ADMIN + "workflow/", {"id": done.id}).content.decode()
    assert "tests.testapp.tasks.add" in page
    assert "<pre>13</pre>" in page
    assert "Cancel the workflow" not in page  # finished; and a viewer may not act
    assert (
        "Cancel the workflow"
        not in viewer.get(ADMIN + "workflow/", {"id": waiting.id}).content.decode()
    )
    assert viewer.get(ADMIN + "workflow/", {"id": "f" * 32}).status_code == 404
    assert viewer.get(ADMIN + "workflow/", {"id": ""}).status_code == 404


def test_cancel_a_workflow_asks_first_needs_csrf_and_logs(
    manager: Client, caplog: pytest.LogCaptureFixture
) -> None:
    workflow = group([tasks.record.s("a"), tasks.record.s("b")]).then(tasks.total.s()).enqueue()
    page = manager.get(ADMIN + "workflow/", {"id": workflow.id}).content.decode()
    link = re.search(r'href="([^"]*do/cancel-workflow/[^"]*)"', page)
    assert link, page
    confirmation, fields = confirm(manager, link.group(1).replace("&amp;", "&"))
    assert "1 WAITING, 2 QUEUED" in confirmation.content.decode()
    assert manager.post(ADMIN + "do/cancel-workflow/", fields).status_code == 403  # no CSRF
    assert workflow.status == "RUNNING"
    token = {**fields, "csrfmiddlewaretoken": csrf_token(confirmation)}
    with caplog.at_level(logging.INFO, logger="redis_components.tasks"):
        done = manager.post(ADMIN + "do/cancel-workflow/", token)
    assert done.status_code == 302
    assert workflow.status == "CANCELLED"
    assert "operator" in caplog.text
    assert "3 steps dropped" in caplog.text
    again = manager.post(ADMIN + "do/cancel-workflow/", token, follow=True)
    assert "cancelled already" in str(list(again.context["messages"])[-1])
    assert manager.get(ADMIN + "do/cancel-workflow/", {"workflow": "f" * 32}).status_code == 404


def test_the_workflows_page_reads_how_each_stands_not_its_results(
    viewer: Client, r: redis.Redis
) -> None:
    big = "x" * 1_000_000
    finished = [tasks.echo.si(big).enqueue() for _ in range(3)]
    assert Worker(["test"], burst=True).run() == 3
    running = chain(tasks.echo.si(big), tasks.add.si(1, 2)).enqueue()
    viewer.get(ADMIN)  # the session and the user, read once
    before = bytes_sent(r)
    page = viewer.get(ADMIN + "workflows/").content.decode()
    assert bytes_sent(r) - before < 20_000
    assert all(workflow.id in page for workflow in [*finished, running])
    assert "1 WAITING, 1 QUEUED" in page.replace("\n", " ")
    assert page.count("1 SUCCESSFUL") == 3
