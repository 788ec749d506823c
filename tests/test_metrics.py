"""The Prometheus endpoint: off by default, behind a token, fed from Redis."""

from __future__ import annotations

import re
import sys
import threading
import time

import pytest
import redis
from django.test import Client, override_settings

from redis_components import RedisLock, RedisSemaphore, chain, metrics, redis_lock
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import queue_names
from redis_components.tasks.store import TaskStore, new_task_id
from redis_components.tasks.worker import Worker
from redis_components.testing import ScriptedWorker, drain
from tests.commands import tasks_added
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
        tasks.fail_slowly.enqueue("m")  # fails; its retry waits a minute
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


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def test_tasks_added_and_their_waits_are_counted(client: Client, r: redis.Redis) -> None:
    """Tasks added, counted where they are enqueued (by enqueue, a workflow's steps as it
    is made, a schedule's tick), and the histogram of first attempts' waits in their
    queues, from when each was due: a delayed task's wait starts at its delay's end."""
    with override_settings(REDIS_COMPONENTS=ON):
        tasks.add.enqueue(1, 2)
        tasks.record.enqueue_in(0.5, "later")
        chain(tasks.add.si(1, 1), tasks.add.si(2, 2)).enqueue()
        tasks.fail.enqueue("m")  # retried: its later attempts are not first ones
        assert drain(["test"], fail_fast=False) == 7
        text = scrape(client)
    assert sample(text, 'redis_components_tasks_added_total{queue="test"}') == 5
    waits = "redis_components_task_queue_wait_seconds"
    assert sample(text, f'{waits}_count{{queue="test"}}') == 5
    assert sample(text, f'{waits}_bucket{{le="+Inf",queue="test"}}') == 5
    assert sample(text, f'{waits}_bucket{{le="3600",queue="test"}}') == 5
    # Five waits of tasks taken as soon as they were due; "later" waited 0.5 s after
    # its enqueue, which its wait does not count.
    assert 0 <= sample(text, f'{waits}_sum{{queue="test"}}') < 0.5
    assert tasks_added("test") == 5


def test_tasks_set_aside_on_their_limits_are_counted(client: Client) -> None:
    with override_settings(REDIS_COMPONENTS=ON):
        for i in range(2):
            tasks.one_at_a_time.enqueue(f"g{i}")
        worker = ScriptedWorker(["test"])
        assert worker.take() is not None
        assert worker.take() is None  # the second waits on the limit
        for i in range(10):
            tasks.rated.enqueue(f"r{i}")
        ran = 0
        while worker.take() is not None:  # six start at once, the rest are spaced out
            ran += 1
        text = scrape(client)
    assert 'redis_components_tasks_limited_total{limit="concurrency",queue="test"} 1.0' in text
    # Each task the rate did not let start was set aside once (fewer than four if the
    # takes took longer than the rate's 50 ms interval).
    assert f'redis_components_tasks_limited_total{{limit="rate",queue="test"}} {10 - ran}.0' in text
    assert ran < 10


def test_metrics_off_keeps_no_totals(r: redis.Redis) -> None:
    tasks.one_at_a_time.enqueue("a")
    tasks.one_at_a_time.enqueue("b")
    assert ScriptedWorker(["test"]).take() is not None
    tasks.add.enqueue(1, 2)
    chain(tasks.add.si(1, 1), tasks.add.si(2, 2)).enqueue()
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
        permit = semaphore.acquire(blocking=False)
        assert semaphore.acquire(blocking=False) is None
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


@pytest.fixture
def without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the [metrics] extra were not installed (and no counter made yet)."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setattr(metrics, "_counters", None, raising=False)


@pytest.mark.usefixtures("without_prometheus_client")
def test_without_prometheus_client_locks_and_semaphores_still_work(
    caplog: pytest.LogCaptureFixture, r: redis.Redis
) -> None:
    with override_settings(REDIS_COMPONENTS=ON):
        for _ in range(2):
            with redis_lock("uncounted", timeout=30):
                pass
            with redis_lock("uncounted", "and-another", timeout=30):
                pass
            permit = RedisSemaphore("uncounted", 1, timeout=30).acquire(blocking=False)
            assert permit is not None
            permit.release()
    assert r.exists("rc:lock:{uncounted}", "rc:lock:{and-another}", "rc:sem:{uncounted}") == 0
    [logged] = [record for record in caplog.records if "prometheus-client" in record.message]
    assert logged.levelname == "ERROR"


def test_the_token_is_sent_with_the_bearer_scheme_in_any_case(client: Client) -> None:
    with override_settings(REDIS_COMPONENTS=ON):
        for header in ("bearer s3cret", "BEARER s3cret", "Bearer  s3cret "):
            assert client.get(URL, HTTP_AUTHORIZATION=header).status_code == 200, header
        for header in ("s3cret", "Basic s3cret", "Bearer", "Bearer ", "Bearers3cret"):
            assert client.get(URL, HTTP_AUTHORIZATION=header).status_code == 401, header


def test_a_token_that_is_not_ascii_matches(client: Client) -> None:
    # A server hands Django the header's bytes decoded as Latin-1; a client sends UTF-8.
    sent = "Bearer clé-ключ".encode().decode("latin-1")
    with override_settings(REDIS_COMPONENTS={"METRICS": True, "METRICS_TOKEN": "clé-ключ"}):
        assert client.get(URL, HTTP_AUTHORIZATION=sent).status_code == 200
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer cle-ключ").status_code == 401


def test_an_empty_token_lets_nobody_in(client: Client) -> None:
    with override_settings(REDIS_COMPONENTS={"METRICS": True, "METRICS_TOKEN": ""}):
        assert client.get(URL).status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION="Bearer ").status_code == 401
        assert client.get(URL, HTTP_AUTHORIZATION="").status_code == 401


@override_settings(MIDDLEWARE=[])  # the view's own answer, not the demo's 503 page
def test_redis_down_is_a_503(client: Client) -> None:
    gone = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    with override_settings(REDIS_COMPONENTS=ON, CACHES={"default": gone}):
        response = client.get(URL, HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 503
    assert "Redis cannot be reached" in response.json()["error"]


def test_a_scrape_forgets_the_queues_nobody_uses_any_more(client: Client) -> None:
    def send(queue: str) -> None:
        message = TaskMessage(
            id=new_task_id(queue),
            task="tests.testapp.tasks.record",
            queue=queue,
            args=[],
            kwargs={},
            priority=0,
            backend=None,
        )
        TaskStore().enqueue(message, message.encode())

    idle = [f"old-{number}" for number in range(200)]
    send("finished")
    Worker(["finished", "waiting", *idle], burst=True).run()  # served, then it stopped
    send("waiting")
    assert {"finished", "waiting", *idle} <= set(queue_names())
    with override_settings(REDIS_COMPONENTS=ON):
        first = scrape(client)
        assert 'queue="old-7"' in first  # shown until a scrape found them unused
        second = scrape(client)
    assert 'queue="old-7"' not in second
    known = set(queue_names())
    assert not known & set(idle)
    assert {"finished", "waiting"} <= known  # a task finished lately; a task waits
