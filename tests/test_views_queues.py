"""The task queues' status page (redis_components.views, task queues section)."""

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

from redis_components.tasks.engine import dead_key, leases_key, queues_key, workers_key
from tests.testapp import tasks

URL = "/rc/queues/"


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
    manager = django_user_model.objects.create_user("operator", is_staff=True)
    manager.user_permissions.add(Permission.objects.get(codename="manage_task_queues"))
    client.force_login(manager)  # who may act on the queues may see them, as in the admin
    assert "secret" in str(client.get(URL, {"format": "json"}).json()["dead_letters"])


@pytest.mark.django_db
def test_staff_see_the_counts_on_a_refreshing_page(staff: Client, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue_in(60, "b")
    entry = {"task": "{}", "queue": "test", "reason": "failed", "error": "ValueError: <boom>"}
    r.rpush(dead_key("test"), json.dumps({**entry, "failed_at": 1.0}))
    response = staff.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<meta http-equiv="refresh"' in html
    assert "<td>test</td>" in html
    assert "ValueError: &lt;boom&gt;" in html  # escaped
    assert "No worker is running" in html
    assert 'href="/admin/redis_components/taskqueues/"' in html  # where to act on it
    assert response["Cache-Control"].startswith("max-age=0")


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
        page = staff.get(URL)
    assert response.status_code == 503
    assert "Redis cannot be reached" in response.json()["error"]
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
    r.hset(workers_key(), "w.1", json.dumps({"host": 1, "pid": "x", "queues": "test"}))
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
    assert workers["w.1"]["problem"] == "unreadable queues, pid, start time"
    assert workers["w.2"]["problem"] == "unreadable description"
    assert "w.\\xff" in workers
    assert len(data["dead_letters"]) == 4
    assert sum(letter["readable"] is False for letter in data["dead_letters"]) == 3
    html = staff.get(URL).content.decode()
    assert "unreadable description" in html
    assert "(unreadable)" in html


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
