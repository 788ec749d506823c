"""The Prometheus endpoint: off by default, behind a token, fed from Redis."""

from __future__ import annotations

import re
import threading
import time

import pytest
import redis
from django.test import Client, override_settings

from redis_components import RedisLock, RedisSemaphore
from redis_components.tasks.worker import Worker
from tests.testapp import tasks

URL = "/rc/metrics/"
ON = {"METRICS": True, "METRICS_TOKEN": "s3cret"}

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def scrape(client: Client, token: str = "s3cret") -> str:
    response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


def test_off_by_default_and_a_token_guards_it(client: Client) -> None:
    assert client.get(URL).status_code == 404
    with override_settings(REDIS_COMPONENTS=ON):
        assert client.get(URL).status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        assert client.post(URL, HTTP_AUTHORIZATION="Bearer s3cret").status_code == 405
        scrape(client)
    with override_settings(REDIS_COMPONENTS={"METRICS": True}):
        assert client.get(URL).status_code == 200  # no token set: open (protect it otherwise)


def test_task_metrics_come_from_redis(client: Client, r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS=ON):
        tasks.add.enqueue(1, 2)
        tasks.fail.enqueue("m")  # fails, is retried twice, then dead-lettered
        tasks.record.enqueue_in(60, "later")
        Worker(["test"], burst=True).run()
        text = scrape(client)
    # "later", and the retry of "m", wait
    assert 'redis_components_queue_tasks{queue="test",state="delayed"} 2.0' in text
    assert 'redis_components_tasks_processed_total{queue="test"} 1.0' in text
    assert 'redis_components_tasks_retried_total{queue="test"} 1.0' in text
    assert 'redis_components_task_duration_seconds_count{queue="test"} 2.0' in text
    assert 'redis_components_task_duration_seconds_bucket{le="+Inf",queue="test"} 2.0' in text
    spent = re.search(r'redis_components_task_duration_seconds_sum\{queue="test"\} (\S+)', text)
    assert spent
    assert 0 < float(spent.group(1)) < 5  # two attempts of tasks that do next to nothing
    assert "redis_components_workers 0.0" in text


def test_metrics_off_keeps_no_totals(r: redis.Redis) -> None:
    tasks.add.enqueue(1, 2)
    Worker(["test"], burst=True).run()
    assert r.exists("rc:queue:{tasks}:totals") == 0


def test_lock_and_semaphore_events_are_counted_in_the_process(client: Client) -> None:
    def counts(text: str) -> dict[str, float]:
        found = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.endswith("_total") and ("_lock_" in name or "_semaphore_" in name):
                found[name.removeprefix("redis_components_").removesuffix("_total")] = float(value)
        return found

    with override_settings(REDIS_COMPONENTS=ON):
        before = counts(scrape(client))
        held = RedisLock("counted", timeout=5).acquire()
        waiter: list[object] = []

        def other_thread() -> None:
            lock = RedisLock("counted", timeout=5)
            waiter.append(lock.acquire(blocking=False))  # refused
            waiter.append(lock.acquire(blocking_timeout=5))  # waits, then granted

        thread = threading.Thread(target=other_thread)
        thread.start()
        time.sleep(0.2)
        held.release()  # handed to the waiter
        thread.join()
        semaphore = RedisSemaphore("counted", 1, timeout=5)
        permit = semaphore.acquire()
        assert semaphore.acquire() is None
        after = counts(scrape(client))
    assert permit is not None
    assert waiter[0] is None
    assert waiter[1] is not None
    moved = {name: after[name] - before.get(name, 0) for name in after}
    assert moved == {
        "lock_waits": 1,
        "lock_grants": 2,
        "lock_refusals": 1,
        "semaphore_grants": 1,
        "semaphore_refusals": 1,
    }
