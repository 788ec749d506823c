"""rc/queues/ (redis_components.views, task queues section): the numbers as JSON, and a way
to the task queues' pages in the admin."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.test.utils import modify_settings, override_settings
from django.urls import include, path

from redis_components.tasks.store.layout import dead_key, leases_key, queues_key, workers_key
from tests.testapp import tasks

URL = "/rc/queues/"
ADMIN = "/admin/redis_components/taskqueues/"

# A site that includes the app's URLs but not the admin's (ROOT_URLCONF=__name__).
urlpatterns = [path("rc/", include("redis_components.urls"))]


@pytest.fixture
def staff(client: Client, django_user_model: Any) -> Client:
    """Staff allowed to see the task queues (as on the admin pages)."""
    boss = django_user_model.objects.create_user("boss", is_staff=True)
    boss.user_permissions.add(Permission.objects.get(codename="view_task_queues"))
    client.force_login(boss)
    return client


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    response = client.get(URL)  # through the admin's login page, when the admin is installed
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/rc/queues/"
    with (
        modify_settings(INSTALLED_APPS={"remove": "django.contrib.admin"}),
        override_settings(LOGIN_URL="/login/"),
    ):
        response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/rc/queues/"


@pytest.mark.django_db
def test_users_who_are_not_staff_are_refused(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("someone"))
    assert client.get(URL).status_code == 403
    outsider = django_user_model.objects.create_user("outsider")
    outsider.user_permissions.add(Permission.objects.get(codename="view_task_queues"))
    client.force_login(outsider)  # the admin does not let them in either: one rule
    for query in ({}, {"format": "json"}):
        assert client.get(URL, query).status_code == 403, query


@pytest.mark.django_db
def test_staff_without_the_task_queues_permission_are_refused(
    client: Client, django_user_model: Any, r: redis.Redis
) -> None:
    r.rpush(dead_key("test"), json.dumps({"task": '{"args":["secret"]}', "reason": "failed"}))
    client.force_login(django_user_model.objects.create_user("intern", is_staff=True))
    for query in ({}, {"format": "json"}):
        response = client.get(URL, query)
        assert response.status_code == 403, query
        assert b"secret" not in response.content
    # JSON, for the monitoring scripts, naming what would let them in
    assert "redis_components.view_task_queues" in response.json()["error"]
    manager = django_user_model.objects.create_user("operator", is_staff=True)
    manager.user_permissions.add(Permission.objects.get(codename="manage_task_queues"))
    client.force_login(manager)  # who may act on the queues may see them, as in the admin
    assert "secret" in str(client.get(URL, {"format": "json"}).json()["dead_letters"])


@pytest.mark.django_db
def test_those_allowed_are_sent_to_the_admin_pages(staff: Client) -> None:
    tasks.record.enqueue("a")
    response = staff.get(URL)
    assert response.status_code == 302
    assert response["Location"] == ADMIN
    assert response["Cache-Control"].startswith("max-age=0")
    page = staff.get(URL, follow=True)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/admin/redis_components/taskqueues/queue/?name=test"' in html  # the counts
    assert "No worker is running" in html


@pytest.mark.django_db
def test_without_the_admin_the_page_says_where_the_numbers_are(staff: Client) -> None:
    with modify_settings(INSTALLED_APPS={"remove": "django.contrib.admin"}):
        response = staff.get(URL)
    assert response.status_code == 404
    assert "Django's admin" in response.json()["error"]
    assert "?format=json" in response.json()["error"]
    with override_settings(ROOT_URLCONF=__name__):
        response = staff.get(URL)  # installed, but its pages are not routed
    assert response.status_code == 404
    assert "?format=json" in response.json()["error"]


@pytest.mark.django_db
def test_the_same_numbers_as_json(staff: Client, redis_mode: str) -> None:
    tasks.record.enqueue("a")
    data = staff.get(URL, {"format": "json"}).json()
    [queue] = [q for q in data["queues"] if q["name"] == "test"]
    assert (queue["ready"], queue["delayed"], queue["in_progress"], queue["dead"]) == (1, 0, 0, 0)
    assert data["workers"] == []
    assert data["dead_letters"] == []


@pytest.mark.django_db
def test_an_unreachable_redis_is_reported(staff: Client) -> None:
    caches = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    with override_settings(CACHES=caches):
        response = staff.get(URL, {"format": "json"})
        page = staff.get(URL, follow=True)  # the admin's overview
    assert response.status_code == 503
    assert "Redis cannot be reached" in response.json()["error"]
    assert page.status_code == 503
    assert "Redis cannot be reached" in page.content.decode()


@pytest.mark.django_db
def test_the_demo_links_those_allowed_to_the_admin_pages(
    client: Client, django_user_model: Any
) -> None:
    dashboard = 'href="/admin/redis_components/taskqueues/"'
    client.force_login(django_user_model.objects.create_user("someone", is_staff=True))
    assert dashboard not in client.get("/").content.decode()
    boss = django_user_model.objects.create_user("boss", is_staff=True)
    boss.user_permissions.add(Permission.objects.get(codename="view_task_queues"))
    client.force_login(boss)
    assert dashboard in client.get("/").content.decode()


def write_hostile_data(r: redis.Redis) -> None:
    """What a client with write access to Redis could leave in the task system's keys."""
    r.rpush(dead_key("test"), b"\xff\xfe not utf-8", b"[" * 50_000, b'{"task": 3}', b"{}")
    w1 = {"host": 1, "pid": "x", "queues": "test", "threads": 0}
    r.hset(workers_key(), "w.1", json.dumps(w1))
    r.hset(workers_key(), "w.2", b"\xff not json")
    r.hset(workers_key(), b"w.\xff", json.dumps({"pid": 1, "started_at": "yesterday"}))
    r.zadd(leases_key(), {"w.1": 1, "w.2": 2**60})
    r.sadd(queues_key(), b"\xff\xfe", "ok")


@pytest.mark.django_db
def test_undecodable_data_never_breaks_the_page(
    staff: Client, r: redis.Redis, redis_mode: str
) -> None:
    write_hostile_data(r)
    data = staff.get(URL, {"format": "json"}).json()
    assert {q["name"] for q in data["queues"]} >= {"test", "ok"}
    workers = {w["id"]: w for w in data["workers"]}
    assert workers["w.1"]["problem"] == "unreadable queues, pid, start time, threads"
    assert workers["w.1"]["threads"] == 1
    assert workers["w.2"]["problem"] == "unreadable description"
    assert "w.\\xff" in workers
    assert len(data["dead_letters"]) == 4
    assert sum(letter["readable"] is False for letter in data["dead_letters"]) == 3
    overview = staff.get(URL, follow=True).content.decode()  # the HTML is the admin's
    assert "unreadable description" in overview
    dead = staff.get(ADMIN + "queue/", {"name": "test", "state": "dead"}).content.decode()
    assert "(unreadable)" in dead


def test_rc_queues_shows_and_requeues_around_undecodable_data(
    r: redis.Redis, redis_mode: str
) -> None:
    write_hostile_data(r)
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    assert "unreadable description" in out.getvalue()
    out = io.StringIO()
    call_command("rc_queues", "--requeue-dead", "test", stdout=out)
    assert (
        out.getvalue()
        == "test: requeued 0 dead tasks; left 4 that are not tasks this app can run\n"
    )
    assert r.llen(dead_key("test")) == 4
