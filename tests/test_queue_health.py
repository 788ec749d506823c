"""Queue health: how long each queue's oldest ready task has waited, read in one command
per queue (and per partition), and shown by the metrics, ``rc_queues`` and the admin."""

from __future__ import annotations

import datetime
import io
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings

from conftest import CommandCount
from redis_components import get_result
from redis_components.exceptions import InvalidInput
from redis_components.tasks.status import home_stats, oldest_ready
from redis_components.tasks.store.layout import delayed_key, ready_key, result_key, split_homes
from redis_components.testing import ScriptedWorker, crashed_worker
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def epoch_ms(when: datetime.datetime | None) -> int:
    assert when is not None
    return round(when.timestamp() * 1000)


def waited(r: redis.Redis, queue: str) -> tuple[float | None, int, int]:
    """The oldest ready task's wait in ``queue``, between two readings of the server's
    clock (ms), so that a test bounds it without trusting the speed of the machine."""
    before = server_ms(r)
    age = oldest_ready([queue])[queue]
    return age, before, server_ms(r)


def test_an_empty_queue_has_no_oldest_ready_task() -> None:
    assert oldest_ready(["test", "nothing-here"]) == {"test": None, "nothing-here": None}
    tasks.record.enqueue_in(60, "later")  # delayed, not due: not ready
    assert oldest_ready(["test"]) == {"test": None}


def test_the_oldest_across_priorities_is_found(r: redis.Redis) -> None:
    """A low priority's task waits behind newer tasks of higher priorities: it is the
    oldest, though it is not the first to run (nor the first of the ready set)."""
    old = tasks.at(-5).enqueue("old")
    time.sleep(0.05)  # (a later enqueue, by the server's clock in ms)
    for priority in (10, 0, 3):
        tasks.at(priority).enqueue(f"new {priority}")
    age, before, after = waited(r, "test")
    since = epoch_ms(old.enqueued_at)
    assert age is not None
    assert (before - since) / 1000 <= age <= (after - since) / 1000


def test_the_age_grows_with_the_servers_clock(r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    first = oldest_ready(["test"])["test"]
    time.sleep(0.3)
    second = oldest_ready(["test"])["test"]
    assert first is not None
    assert second is not None
    assert second - first >= 0.299  # (ms on the server's clock)


def test_a_delayed_task_counts_once_due_from_when_it_was_due(r: redis.Redis) -> None:
    """A delayed task is not ready until it is due; once due, it is ready since then,
    though it waits in the delayed set until a worker takes from the queue."""
    tasks.record.enqueue_in(60, "later")
    assert oldest_ready(["test"])["test"] is None
    due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)  # (whole ms)
    due -= datetime.timedelta(seconds=5)
    tasks.record.using(run_after=due).enqueue("overdue")
    age, before, after = waited(r, "test")
    assert age is not None
    assert (before - epoch_ms(due)) / 1000 <= age <= (after - epoch_ms(due)) / 1000


def test_a_delayed_tasks_payload_says_since_when_once_its_result_expired(
    r: redis.Redis,
) -> None:
    """Moved to the ready set once due, a task enqueued with a delay whose result has
    expired counts from when its payload says it was due, not from its enqueue."""
    result = tasks.record.enqueue_in(0.2, "moved")
    [(payload, due)] = r.zrange(delayed_key("test"), 0, -1, withscores=True)
    assert f',"due_at":{int(due)},"retries":0}}'.encode() in payload
    r.delete(result_key(result.id))
    time.sleep(0.3)  # then a worker's take moves it, once due (lua/lib/move.lua)
    r.zrem(delayed_key("test"), payload)
    r.zadd(ready_key("test"), {payload: 100 * 2**44 + 2**43})
    age, before, after = waited(r, "test")
    assert age is not None
    assert 0.1 <= (before - due) / 1000 <= age <= (after - due) / 1000


def test_a_task_waiting_to_run_again_counts_from_its_last_attempt(r: redis.Redis) -> None:
    """A retried task is ready again since its last attempt's start at the latest (its
    record keeps no later time): not since its first enqueue."""
    retried = tasks.record.enqueue("retried")
    time.sleep(0.05)
    worker = ScriptedWorker(["test"])
    taken = worker.take()
    assert taken is not None
    assert worker.retry(taken.id, delay=0)
    urgent = tasks.at(9).enqueue("urgent")
    taken = worker.take()  # moves the retry, due now, to the ready set; takes "urgent"
    assert taken is not None
    assert taken.id == urgent.id
    started = get_result(retried.id).last_attempted_at
    assert epoch_ms(started) - epoch_ms(retried.enqueued_at) >= 50
    age, before, after = waited(r, "test")
    assert age is not None
    assert (before - epoch_ms(started)) / 1000 <= age <= (after - epoch_ms(started)) / 1000


def test_a_task_recovered_from_a_dead_worker_does_not_hide_those_behind_it(
    r: redis.Redis,
) -> None:
    """A recovered task goes back where it was taken, ahead of tasks that waited longer
    than it has since its recovery: they are read too."""
    first = tasks.record.enqueue("first")
    second = tasks.record.enqueue("second")
    worker = ScriptedWorker(["test"])
    time.sleep(0.3)
    taken = worker.take()
    assert taken is not None
    assert taken.id == first.id
    assert worker.crash() == (1, 0)  # back at the head of its band, crash counted
    age, before, after = waited(r, "test")
    assert age is not None
    enqueued = epoch_ms(second.enqueued_at)
    assert (before - enqueued) / 1000 <= age <= (after - enqueued) / 1000


def test_an_entry_that_is_not_a_task_is_passed_over(r: redis.Redis) -> None:
    """Data another client wrote is not aged (nothing says since when it waits) and
    breaks nothing: the task in the next band still is."""
    r.zadd(ready_key("test"), {b"\xff junk": 1, b'{"id":"zz"}': 2**50, b"x": float("inf")})
    assert oldest_ready(["test"])["test"] is None
    task = tasks.at(-100).enqueue("last band")
    age, before, after = waited(r, "test")
    since = epoch_ms(task.enqueued_at)
    assert age is not None
    assert (before - since) / 1000 <= age <= (after - since) / 1000


def test_a_bad_queue_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match="queue"):
        oldest_ready(["bad\nname"])


@pytest.fixture
def hot() -> Iterator[str]:
    """The queue ``hot`` in 3 partitions (on a cluster, one per master)."""
    changed = {**settings.REDIS_COMPONENTS, "QUEUE_PARTITIONS": {"hot": 3}}
    with split_homes(), override_settings(REDIS_COMPONENTS=changed):
        yield "hot"


def test_a_partitioned_queue_reports_each_partition_and_the_oldest(
    r: redis.Redis, hot: str
) -> None:
    first = tasks.record.using(queue_name=hot).enqueue("first")
    time.sleep(0.05)
    for i in range(40):
        tasks.record.using(queue_name=hot).enqueue(str(i))
    homes = home_stats(hot)
    ages = [home.oldest_ready for home in homes]
    assert len(homes) == 3
    assert None not in ages  # (40 tasks: each partition has some)
    age, before, after = waited(r, hot)
    since = epoch_ms(first.enqueued_at)
    assert age is not None
    assert (before - since) / 1000 <= age <= (after - since) / 1000
    assert max(a for a in ages if a is not None) <= age


def test_one_command_per_queue(r: redis.Redis, count_commands: CommandCount) -> None:
    names = [f"q{i}" for i in range(10)]
    for name in names:
        tasks.record.using(queue_name=name).enqueue(name)
        tasks.at(7).using(queue_name=name).enqueue(name)
    oldest_ready(names)  # (loads the script)
    with count_commands as counted:
        ages = oldest_ready(names)
    assert None not in ages.values()
    assert counted.sent == len(names)
    assert {command.split()[0].strip('"').lower() for command in counted.commands} == {"evalsha"}


ON = {"METRICS": True, "METRICS_TOKEN": "s3cret"}
GAUGE = "redis_components_task_oldest_ready_age_seconds"


def test_the_metrics_have_a_gauge_per_queue_with_a_ready_task(client: Client) -> None:
    tasks.record.using(queue_name="idle").enqueue_in(60, "later")
    tasks.record.enqueue("a")
    crashed_worker(["test", "idle"], take=0)  # (a queue is known once a worker serves it)
    with override_settings(REDIS_COMPONENTS=ON):
        response = client.get("/rc/metrics/", HTTP_AUTHORIZATION="Bearer s3cret")
    text = response.content.decode()
    assert response.status_code == 200, text
    assert re.search(rf'^{GAUGE}{{queue="test"}} \d+\.\d+', text, re.M), text
    assert f'{GAUGE}{{queue="idle"}}' not in text  # no ready task: no sample
    assert 'redis_components_queue_tasks{queue="idle",state="delayed"} 1.0' in text


def test_the_metrics_count_the_live_workers_thread_slots(client: Client) -> None:
    def slots() -> str:
        with override_settings(REDIS_COMPONENTS=ON):
            text = client.get("/rc/metrics/", HTTP_AUTHORIZATION="Bearer s3cret").content
        found = re.search(r"^redis_components_worker_slots (\S+)$", text.decode(), re.M)
        assert found, text
        return found.group(1)

    assert slots() == "0.0"
    ScriptedWorker(["test"])
    ScriptedWorker(["test", "other"])
    assert slots() == "2.0"


def rc_queues() -> dict[str, list[str]]:
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:4] == ["queue", "ready", "oldest", "ready"]
    return {line.split()[0]: line.split()[1:] for line in lines[1 : lines.index("")]}


def test_rc_queues_shows_the_oldest_ready_beside_the_counts() -> None:
    tasks.record.enqueue("a")
    tasks.record.using(queue_name="idle").enqueue_in(60, "later")
    crashed_worker(["test", "idle"], take=0)  # (a queue is known once a worker serves it)
    rows = rc_queues()
    assert re.fullmatch(r"\d+\.\ds", rows["test"][1])
    assert rows["idle"][:3] == ["0", "-", "1"]


@pytest.mark.django_db
def test_the_admin_shows_the_oldest_ready_beside_the_counts(admin_client: Any) -> None:
    tasks.record.enqueue("a")
    tasks.record.using(queue_name="idle").enqueue_in(60, "later")
    crashed_worker(["test", "idle"], take=0)  # (a queue is known once a worker serves it)
    page = admin_client.get("/admin/redis_components/taskqueues/").content.decode()
    assert "Oldest ready" in page
    rows = dict(
        re.findall(
            r'<td><a href="[^"]*">([^<]+)</a></td>\s*<td class="n">\d+</td>\s*'
            r'<td class="n">([^<]*)</td>',
            page,
        )
    )
    assert re.fullmatch(r"\d+\.\d s", rows["test"]), rows
    assert rows["idle"] == "-"
    queue_page = admin_client.get("/admin/redis_components/taskqueues/queue/?name=test")
    found = queue_page.content.decode()
    assert re.search(r"1 ready task; 1 to 1 shown\. The oldest has waited \d+\.\d s\.", found)
