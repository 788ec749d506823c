"""What the queues hold, read for the operations pages: paged, and robust to bad data."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import (
    dead_letter_entry,
    dead_letter_page,
    queue_stats,
    running_tasks,
    throughput,
    waiting_tasks,
)
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import dead_key, delayed_key, ready_key
from redis_components.tasks.worker import Worker
from redis_components.testing import crashed_worker
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def test_waiting_tasks_are_paged_in_the_order_they_will_run(r: redis.Redis) -> None:
    for i in range(30):
        tasks.record.enqueue(f"t{i}")
    r.zadd(ready_key("test"), {b"\xff junk": 1})  # runs first: the lowest score
    total, page = waiting_tasks("test", "ready", offset=0, count=3)
    assert total == 31
    assert page[0].message is None
    assert page[0].shown == "\\xff junk"
    assert [w.message.args[0] for w in page[1:] if w.message] == ["t0", "t1"]
    total, page = waiting_tasks("test", "ready", offset=29, count=5)
    assert [w.message.args[0] for w in page if w.message] == ["t28", "t29"]
    tasks.record.enqueue_in(60, "later")
    total, [delayed] = waiting_tasks("test", "delayed")
    assert total == 1
    assert delayed.due is not None


@pytest.mark.django_db
def test_a_due_time_past_year_9999_is_read_and_shown_not_a_server_error(
    r: redis.Redis, admin_client: Any
) -> None:
    # As an older release could store it: a delayed task due in year 10000 or later.
    message = TaskMessage(
        id="ab12", task="tests.testapp.tasks.record", queue="test", args=["far"], kwargs={}
    )
    r.zadd(delayed_key("test"), {message.encode(): 253_402_300_800_000})
    total, [delayed] = waiting_tasks("test", "delayed")
    assert (total, delayed.message, delayed.due, delayed.due_ms) == (
        1,
        message,
        None,
        253_402_300_800_000,
    )
    page = admin_client.get("/admin/redis_components/taskqueues/queue/?name=test&state=delayed")
    assert page.status_code == 200
    assert "epoch ms 253402300800000 (outside the years 1 to 9999)" in page.content.decode()


def test_dead_letters_are_paged_newest_first_and_acted_on_one_by_one(r: redis.Redis) -> None:
    entries = []
    for i in range(5):
        message = TaskMessage(
            id=f"ab{i}", task="tests.testapp.tasks.record", queue="test", args=[f"d{i}"], kwargs={}
        )
        entry = json.dumps({"task": message.encode(), "reason": "failed"}).encode()
        r.rpush(dead_key("test"), entry)
        entries.append(entry)
    total, page = dead_letter_page("test", offset=1, count=2)
    assert total == 5
    assert [json.loads(letter.task)["args"] for letter in page] == [["d3"], ["d2"]]
    assert dead_letter_entry("test", 0) == entries[4]
    assert dead_letter_entry("test", 9) is None
    assert TaskStore().requeue_dead_entry("test", entries[4])
    assert not TaskStore().requeue_dead_entry("test", entries[4])  # gone already
    assert TaskStore().delete_dead_entry("test", entries[0])
    [stats] = queue_stats(["test"])
    assert stats.dead == 3
    total, [ready] = waiting_tasks("test", "ready")
    assert total == 1
    assert ready.message is not None, ready.shown
    assert ready.message.args == ["d4"]


def test_running_tasks_and_throughput(r: redis.Redis) -> None:
    result = tasks.record.enqueue("running")
    tasks.record.enqueue("done")
    worker = crashed_worker(["test"])
    assert worker.task_ids == [result.id]
    [running] = running_tasks()
    assert (running.task_id, running.worker_id, running.task) == (
        result.id,
        worker.id,
        "tests.testapp.tasks.record",
    )
    Worker(["test"], burst=True).run()
    minutes = throughput(["test"], hours=1)["test"]
    assert len(minutes) == 60
    assert sum(m.processed for m in minutes) == 1
    assert minutes[-1].processed == 1 or minutes[-2].processed == 1
