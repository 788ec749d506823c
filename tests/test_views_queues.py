"""The task queues' status page (redis_components.views, task queues section)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from django.test import Client
from django.test.utils import override_settings

from redis_components.tasks.engine import dead_key
from tests.testapp import tasks

URL = "/rc/queues/"


@pytest.fixture
def staff(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("boss", is_staff=True))
    return client


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    with override_settings(LOGIN_URL="/login/"):
        response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/rc/queues/"


@pytest.mark.django_db
def test_users_who_are_not_staff_are_refused(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("someone"))
    assert client.get(URL).status_code == 403


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
def test_the_demo_links_staff_to_the_page(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("someone"))
    assert URL not in client.get("/").content.decode()
    client.force_login(django_user_model.objects.create_user("boss", is_staff=True))
    assert f'href="{URL}"' in client.get("/").content.decode()
