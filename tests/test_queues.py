from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass

import pytest
import redis
from django.db import transaction
from django.test import override_settings

from redis_components import QueueFull, Retry, TaskSerializationError, defer, task
from redis_components.exceptions import (
    InvalidInput,
    LockNotAcquired,
    TaskError,
    TaskNotDurable,
    TaskNotRegistered,
)
from redis_components.queues import (
    RunningTask,
    TaskMessage,
    _current,
    backoff,
    dead_key,
    dead_letters,
    delayed_key,
    get_task,
    purge,
    queue_names,
    queue_stats,
    ready_key,
    requeue_dead,
)
from tests.testapp import tasks


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_keys_share_one_hash_tag() -> None:
    for key in (ready_key("a:b"), delayed_key("x"), dead_key("{odd}")):
        assert key.startswith("rc:queue:{tasks}:")


def test_enqueue_puts_a_json_task_on_its_queue(r: redis.Redis) -> None:
    task_id = tasks.record.enqueue("one", pause=0)
    [raw] = r.lrange(ready_key("test"), 0, -1)
    message = TaskMessage.decode(raw)
    assert message == TaskMessage(
        task_id, "tests.testapp.tasks.record", "test", ["one"], {"pause": 0}, 0
    )


def test_a_plain_call_runs_inline(r: redis.Redis) -> None:
    tasks.record("inline")
    assert r.hgetall("{test}:runs") == {b"inline": b"1"}
    assert r.llen(ready_key("test")) == 0


@pytest.mark.parametrize("bad", [object(), {1, 2}, math.nan, b"bytes"])
def test_arguments_json_cannot_carry_are_refused_in_the_caller(r: redis.Redis, bad: object) -> None:
    with pytest.raises(TaskSerializationError, match=r"tests\.testapp\.tasks\.record"):
        tasks.record.enqueue(bad)  # type: ignore[arg-type]
    with pytest.raises(TaskSerializationError):
        tasks.record.enqueue_in(5, "label", pause=bad)  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_enqueue_in_scores_by_the_servers_clock(r: redis.Redis) -> None:
    before = server_ms(r)
    task_id = tasks.record.enqueue_in(30, "later")
    after = server_ms(r)
    [(raw, score)] = r.zrange(delayed_key("test"), 0, -1, withscores=True)
    assert TaskMessage.decode(raw).id == task_id
    assert before + 30_000 <= score <= after + 30_000
    assert r.llen(ready_key("test")) == 0


def test_enqueue_at_takes_an_aware_datetime(r: redis.Redis) -> None:
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)
    tasks.record.enqueue_at(when, "then")
    [(_, score)] = r.zrange(delayed_key("test"), 0, -1, withscores=True)
    assert score == when.timestamp() * 1000
    with pytest.raises(InvalidInput, match="aware"):
        tasks.record.enqueue_at(datetime.datetime(2030, 1, 1), "naive")
    with pytest.raises(InvalidInput, match="when"):
        tasks.record.enqueue_at("2030-01-01", "text")  # type: ignore[arg-type]
    assert r.zcard(delayed_key("test")) == 1


@pytest.mark.parametrize("seconds", [-1, math.inf, math.nan, "5", True])
def test_enqueue_in_refuses_bad_delays(r: redis.Redis, seconds: object) -> None:
    with pytest.raises(InvalidInput, match="seconds"):
        tasks.record.enqueue_in(seconds, "x")  # type: ignore[arg-type]
    assert r.keys("*") == []


def test_bad_task_definitions_are_refused() -> None:
    with pytest.raises(InvalidInput, match="queue"):
        task(queue="")(lambda: None)
    with pytest.raises(InvalidInput, match="max_retries"):
        task(max_retries=-1)(lambda: None)
    with pytest.raises(InvalidInput, match="retry_backoff"):
        task(retry_backoff=-0.5)(lambda: None)
    with pytest.raises(InvalidInput, match="name"):
        task(name="bad\nname")(lambda: None)


def test_two_functions_cannot_share_a_task_name() -> None:
    def record(label: str) -> None: ...

    with pytest.raises(TaskError, match=r"two tasks are named 'tests\.testapp\.tasks\.record'"):
        task(name="tests.testapp.tasks.record")(record)
    assert get_task("tests.testapp.tasks.record") is tasks.record


def test_bare_decorator_names_the_task_after_its_function() -> None:
    @task
    def bare() -> str:
        return "ran"

    assert (
        bare.name
        == "tests.test_queues.test_bare_decorator_names_the_task_after_its_function.<locals>.bare"
    )
    assert bare.queue == "default"
    assert bare() == "ran"


def test_unknown_task_names_raise() -> None:
    with pytest.raises(TaskNotRegistered, match="nope"):
        get_task("nope")


def test_bounded_queue_raises_queue_full_and_changes_nothing(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": {"test": 2}}):
        tasks.record.enqueue("a")
        tasks.record.enqueue_in(60, "b")  # delayed tasks count too
        before = r.lrange(ready_key("test"), 0, -1), r.zrange(delayed_key("test"), 0, -1)
        with pytest.raises(QueueFull) as caught:
            tasks.record.enqueue("c")
        with pytest.raises(QueueFull):
            tasks.record.enqueue_in(1, "d")
        after = r.lrange(ready_key("test"), 0, -1), r.zrange(delayed_key("test"), 0, -1)
    assert (caught.value.queue, caught.value.limit) == ("test", 2)
    assert "full" in str(caught.value)
    assert before == after


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_waits_for_the_commit(r: redis.Redis) -> None:
    with transaction.atomic():
        task_id = tasks.record.enqueue_on_commit("committed")
        assert r.llen(ready_key("test")) == 0
    [raw] = r.lrange(ready_key("test"), 0, -1)
    assert TaskMessage.decode(raw).id == task_id


@pytest.mark.django_db(transaction=True)
def test_enqueue_on_commit_enqueues_nothing_on_rollback(r: redis.Redis) -> None:
    def enqueue_then_fail() -> None:
        with transaction.atomic():
            tasks.record.enqueue_on_commit("rolled back")
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    with pytest.raises(TaskSerializationError), transaction.atomic():
        tasks.record.enqueue_on_commit(object())  # type: ignore[arg-type]
    assert r.keys("*") == []


@pytest.mark.django_db(transaction=True)
def test_a_failed_enqueue_on_commit_is_logged_after_the_commit_and_raises_outside(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_QUEUE_LIMITS": {"test": 1}}):
        tasks.record.enqueue("fills the queue")
        with transaction.atomic():
            task_id = tasks.record.enqueue_on_commit("no room")
        assert f"Task {task_id} (tests.testapp.tasks.record) was not enqueued" in caplog.text
        assert "QueueFull" in caplog.text
        with pytest.raises(QueueFull):
            tasks.record.enqueue_on_commit("no room, no transaction")
    assert r.llen(ready_key("test")) == 1


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ("not json", "Expecting value"),
        ("[1, 2]", "JSON object"),
        ('{"id": 1, "task": "t", "queue": "q", "args": [], "kwargs": {}}', "'id'"),
        ('{"id": "1", "task": "t", "queue": "q", "args": {}, "kwargs": {}}', "'args'"),
        (
            '{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "retries": -1}',
            "retries",
        ),
    ],
)
def test_malformed_payloads_are_described(payload: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        TaskMessage.decode(payload)


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    with override_settings(
        REDIS_COMPONENTS={"TASK_RETRY_BACKOFF": 1.0, "TASK_RETRY_BACKOFF_MAX": 100.0}
    ):
        delays = [backoff(3) for _ in range(200)]
        assert all(4.0 <= delay <= 12.0 for delay in delays)
        assert len(set(delays)) > 1
        assert all(backoff(30) <= 100.0 for _ in range(50))
        assert 0.5 <= backoff(0, base=1.0) <= 1.5


def test_retry_refuses_a_negative_delay() -> None:
    with pytest.raises(InvalidInput, match="delay"):
        Retry(delay=-1)


@dataclass
class FakeBusy:
    names: tuple[str, ...]
    retry_after: float
    args: tuple[object, ...] = ()
    kwargs: dict[str, object] | None = None


def test_defer_outside_a_worker_raises_lock_not_acquired() -> None:
    with pytest.raises(LockNotAcquired, match="item:7 is busy") as caught:
        defer(5)(FakeBusy(("item:7",), 1.0))
    assert caught.value.name == "item:7"


def test_defer_inside_a_worker_marks_the_running_task() -> None:
    running = RunningTask(TaskMessage("id", "t", "q", [], {}))
    token = _current.set(running)
    try:
        assert defer(5)(FakeBusy(("a",), 1.0)) is None
        assert running.deferred_for == 5
        defer()(FakeBusy(("a",), 0.25))
        assert running.deferred_for == 0.25
    finally:
        _current.reset(token)
    with pytest.raises(InvalidInput):
        defer(-1)


def test_counts_and_dead_letters_in_both_client_modes(redis_mode: str, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue_in(60, "b")
    entry = {"task": "payload", "queue": "test", "reason": "failed", "error": "E: x"}
    r.rpush(dead_key("test"), json.dumps({**entry, "traceback": "tb", "failed_at": 1.5}))
    r.rpush(dead_key("test"), "garbage")
    assert "test" in queue_names()
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.delayed, stats.in_progress, stats.dead) == (1, 1, 0, 2)
    letter, garbage = dead_letters("test")
    assert (letter.task, letter.reason, letter.error, letter.traceback) == (
        "payload",
        "failed",
        "E: x",
        "tb",
    )
    assert letter.failed_at == 1.5
    assert garbage.reason == "unreadable dead letter"


def test_requeue_dead_gives_fresh_retries(redis_mode: str, r: redis.Redis) -> None:
    tired = TaskMessage("abc", "tests.testapp.tasks.record", "test", ["x"], {}, retries=3).encode()
    r.rpush(dead_key("test"), json.dumps({"task": tired, "queue": "test", "reason": "failed"}))
    r.rpush(dead_key("test"), json.dumps({"task": "undecodable", "reason": "undecodable"}))
    assert requeue_dead("test") == 2
    assert r.llen(dead_key("test")) == 0
    first, second = r.lrange(ready_key("test"), 0, -1)
    assert TaskMessage.decode(first) == TaskMessage(
        "abc", "tests.testapp.tasks.record", "test", ["x"], {}, 0
    )
    assert second == b"undecodable"
    assert requeue_dead("test") == 0


def test_purge_deletes_waiting_and_dead_tasks(redis_mode: str, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue_in(60, "b")
    r.rpush(dead_key("test"), "{}")
    r.rpush(ready_key("other"), "{}")
    assert purge("test") == 3
    assert r.exists(ready_key("test"), delayed_key("test"), dead_key("test")) == 0
    assert r.llen(ready_key("other")) == 1


def test_an_enqueue_that_no_replica_acknowledged_says_so(r: redis.Redis) -> None:
    # The test server has no replica, so WAIT times out with 0 acknowledgements.
    settings = {"QUEUE_WAIT_REPLICAS": 1, "QUEUE_WAIT_TIMEOUT": 0.05}
    with override_settings(REDIS_COMPONENTS=settings), pytest.raises(TaskNotDurable) as info:
        tasks.record.enqueue("not durable")
    assert "0 of 1 replicas" in str(info.value)
    [payload] = r.lrange(ready_key("test"), 0, -1)
    assert json.loads(payload)["id"] == info.value.task_id  # enqueued all the same
