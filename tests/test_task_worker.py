"""The worker loop, run in the test process (worker processes: test_rc_worker.py)."""

from __future__ import annotations

import datetime
import logging
import random
import signal
import time
from collections.abc import Callable

import pytest
import redis
from django.test import override_settings
from redis.cluster import RedisCluster

from conftest import single_server_only
from redis_components import RedisLock, RedisTask, defer, get_result, redis_lock, redis_task
from redis_components.conf import conf
from redis_components.connection import OneConnection
from redis_components.exceptions import TaskResultDoesNotExist
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.lease import description
from redis_components.tasks.messages import TaskMessage, task_id_of
from redis_components.tasks.status import (
    dead_letters,
    queue_stats,
    running_tasks,
    waiting_tasks,
    workers,
)
from redis_components.tasks.store import TaskStore, WorkerStore, new_task_id
from redis_components.tasks.store.layout import leases_key, ready_key, result_key, tasks_client
from redis_components.tasks.worker import Worker
from redis_components.testing import crashed_worker
from tests.commands import commands_per_task
from tests.processes import WorkerProcess, run_processes, running_worker, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def record_in(queue: str) -> RedisTask[[str], None]:
    def record(label: str) -> None:
        tasks.record.call(label)

    return redis_task(name=f"tests.test_task_worker.record_{queue}", queue=queue)(record)


high, low = record_in("high"), record_in("low")


def order(r: redis.Redis) -> list[str]:
    return [label.decode() for label in r.lrange("{test}:order", 0, -1)]


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def subscribed(r: redis.Redis, queue: str) -> bool:
    """Whether a worker listens for ``queue`` (on a cluster, on any node)."""
    nodes = [r]
    if isinstance(r, RedisCluster):
        nodes = [r.get_redis_connection(node) for node in r.get_primaries()]
    return any(int(node.pubsub_numsub(ready_key(queue))[0][1]) for node in nodes)


def test_fifo_within_a_queue(redis_mode: str, r: redis.Redis) -> None:
    labels = [f"t{i}" for i in range(30)]
    for label in labels:
        tasks.record.enqueue(label)
    assert Worker(["test"], burst=True).run() == 30
    assert order(r) == labels
    assert r.keys("rc:queue:{tasks}:running:*") == []


def test_priority_order_across_queues(r: redis.Redis) -> None:
    for i in range(5):
        low.enqueue(f"low{i}")
    for i in range(5):
        high.enqueue(f"high{i}")
    Worker(["high", "low"], burst=True).run()
    assert order(r) == [f"high{i}" for i in range(5)] + [f"low{i}" for i in range(5)]


def test_a_due_delayed_task_in_a_higher_queue_runs_first(r: redis.Redis) -> None:
    low.enqueue("low")
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    high.enqueue_at(past, "high (was delayed)")
    Worker(["high", "low"], burst=True).run()
    assert order(r) == ["high (was delayed)", "low"]


def test_delayed_tasks_run_at_their_time_not_before(r: redis.Redis) -> None:
    labels = ["a", "b", "c"]
    for i, label in enumerate(labels):
        tasks.record_time.enqueue_in(0.1 + 0.1 * i, label)
    total, delayed = waiting_tasks("test", "delayed")
    assert total == len(labels)
    due = {}
    for waiting in delayed:
        assert waiting.message is not None, waiting.shown
        assert waiting.due_ms is not None
        due[waiting.message.args[0]] = waiting.due_ms
    with running_worker(["test"]):
        wait_until(lambda: r.hlen("test:started") == 3)
    started = {label.decode(): int(ms) for label, ms in r.hgetall("test:started").items()}
    assert all(started[label] >= due[label] for label in labels), (started, due)


def test_a_busy_worker_moves_a_delayed_task_when_it_falls_due(r: redis.Redis) -> None:
    # Its takes look at the delayed tasks every 100 ms, not only once its queues are empty
    # (it cannot know of a task delayed by another client after its last look).
    for i in range(300):
        tasks.record.enqueue(f"t{i}", 0.002)  # 300 tasks of 2 ms and more: 0.6 s at least
    with running_worker(["high", "test"]):
        wait_until(lambda: r.llen("{test}:order") >= 10)
        high.enqueue_in(0.01, "delayed")
        then = r.llen("{test}:order")
        wait_until(lambda: r.llen("{test}:order") == 301)
    assert order(r).index("delayed") - then < 150  # within 0.3 s, not after the queue


def test_an_idle_worker_is_woken_for_each_task(r: redis.Redis) -> None:
    # A lost wake-up would leave a task waiting for the 60 s safety net.
    with (
        override_settings(REDIS_COMPONENTS={"TASK_HEARTBEAT_INTERVAL": 60.0}),
        running_worker(["test"]),
    ):
        wait_until(lambda: subscribed(r, "test"))
        for i in range(20):
            tasks.record.enqueue(f"t{i}")
            wait_until(lambda i=i: r.llen("{test}:order") == i + 1)
        # A delayed task added while the worker sleeps with no due time wakes it too.
        tasks.record.enqueue_in(0.05, "delayed")
        wait_until(lambda: r.llen("{test}:order") == 21)


def test_concurrent_schedulers_move_each_due_task_exactly_once(r: redis.Redis) -> None:
    past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    labels = [f"t{i}" for i in range(400)]
    for label in labels:
        tasks.record.enqueue_at(past, label)

    def burst() -> None:
        Worker(["test"], burst=True).run()

    run_processes(burst, [()] * 4)
    assert runs(r) == dict.fromkeys(labels, 1)
    assert queue_stats(["test"])[0].delayed == 0


def test_failures_retry_with_backoff_then_dead_letter_with_traceback(r: redis.Redis) -> None:
    tasks.fail.enqueue("f")
    with running_worker(["test"]):
        wait_until(lambda: queue_stats(["test"])[0].dead == 1)
    assert runs(r) == {"f": 3}  # the first run and fail's max_retries=2 retries
    [letter] = dead_letters("test")
    assert letter.reason == "failed"
    assert letter.error == "ValueError: f failed on purpose"
    assert "Traceback" in letter.traceback
    assert 'raise ValueError(f"{label} failed on purpose")' in letter.traceback
    assert TaskMessage.decode(letter.task).retries == 2

    assert TaskStore().requeue_dead("test") == (1, 0)
    with running_worker(["test"]):
        wait_until(lambda: queue_stats(["test"])[0].dead == 1)
    assert runs(r) == {"f": 6}


def test_retry_exception_reschedules_without_dead_letter(r: redis.Redis) -> None:
    tasks.retry_once.enqueue("r")
    with running_worker(["test"]):
        # The worker is registered: its tasks in progress are counted.
        wait_until(lambda: runs(r).get("r") == 2 and queue_stats(["test"])[0].in_progress == 0)
    [stats] = queue_stats(["test"])
    assert (stats.dead, stats.delayed) == (0, 0)


def test_unknown_tasks_are_dead_lettered_and_the_worker_goes_on(
    redis_mode: str, r: redis.Redis
) -> None:
    stranger = TaskMessage(id="ab1", task="nobody.knows", queue="test", args=[], kwargs={}).encode()
    r.zadd(ready_key("test"), {stranger: 1})
    tasks.record.enqueue("after")
    assert Worker(["test"], burst=True).run() == 1
    assert order(r) == ["after"]
    [unknown] = dead_letters("test")
    assert (unknown.reason, unknown.task) == ("unknown task", stranger)
    assert "nobody.knows" in unknown.error
    assert "each installed app's tasks module" in unknown.error  # where workers look


def deployed(label: str) -> None:
    tasks.record.call(label)


def test_a_task_a_worker_does_not_know_yet_waits_for_one_that_does(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A rolling deploy: new web processes enqueue a task that only the new code has. A
    worker still on the old code puts it back (no retry charged, its result still
    READY) for TASK_UNREGISTERED_GRACE, so that a worker with the new code runs it."""
    new_task = redis_task(name="tests.test_task_worker.deployed", queue="test")(deployed)
    old = start_worker("test", TASK_UNREGISTERED_GRACE=60)
    wait_until(lambda: workers(), old.output)
    result = new_task.enqueue("new")
    wait_until(lambda: "is not registered here" in old.output(), old.output)
    time.sleep(0.3)  # more takes by the old worker, if it took it again at once
    assert get_result(result.id).status == TaskResultStatus.READY
    assert dead_letters("test") == []
    old.signal(signal.SIGTERM)
    assert old.wait() == 0
    with running_worker(["test"]):  # the new code: this process registered the task
        wait_until(lambda: order(r) == ["new"])
    ran = get_result(result.id)
    assert ran.status == TaskResultStatus.SUCCESSFUL
    assert ran.errors == []


def test_a_task_no_worker_knows_is_dead_lettered_after_the_grace(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    new_task = redis_task(name="tests.test_task_worker.deployed", queue="test")(deployed)
    old = start_worker("test", TASK_UNREGISTERED_GRACE=2.0)
    wait_until(lambda: workers(), old.output)  # (its start may take longer than the grace)
    result = new_task.enqueue("never")
    wait_until(lambda: dead_letters("test"), old.output)
    old.signal(signal.SIGTERM)
    assert old.wait() == 0
    [letter] = dead_letters("test")
    assert letter.reason == "unknown task"
    assert "tests.test_task_worker.deployed" in letter.error
    failed = get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[-1].exception_class_path == "redis_components.exceptions.TaskNotRegistered"
    assert "put back" in old.output()


DEEP = b"[" * 100_000 + b"]" * 100_000
MALFORMED = [
    b"not json",
    b"\xff\xfe not utf-8 at all",
    b'{"id": "\xc3\x28", "task": "x"}',
    DEEP,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b"[1, 2, 3]",
    b'"just a string"',
    b"",
    b'{"id": 3}',
    b'{"id": "ab", "task": "t", "queue": "test", "args": {}, "kwargs": {}}',
    b'{"id": "ab", "task": "t", "queue": "test", "args": [], "kwargs": {}, "retries": "0"}',
    b'{"id":"abcdef","priority":0,"task":"t"',  # cut short: an id the scripts can read
]


@pytest.mark.parametrize("payload", MALFORMED)
def test_a_payload_that_is_not_a_task_is_dead_lettered_on_the_first_take(
    redis_mode: str, r: redis.Redis, payload: bytes
) -> None:
    r.zadd(ready_key("test"), {payload: 1})
    tasks.record.enqueue("behind it")
    assert Worker(["test"], burst=True).run() == 1
    assert order(r) == ["behind it"]
    [letter] = dead_letters("test")
    assert letter.reason == "undecodable"
    assert letter.error.startswith("not a task")
    assert queue_stats(["test"])[0].ready == 0
    assert r.keys("rc:queue:{tasks}:running*") == []  # nothing held, no attempt left open


def test_defer_moves_the_running_task_to_the_delayed_queue(r: redis.Redis) -> None:
    class Busy:
        names = ("item:1",)
        retry_after = 0.01

    @redis_task(name="tests.test_task_worker.deferring", queue="test")
    def deferring() -> None:
        if r.hincrby("{test}:runs", "deferring", 1) < 3:
            defer()(Busy())

    deferring.enqueue()
    with running_worker(["test"]):
        wait_until(lambda: runs(r).get("deferring") == 3)
    assert dead_letters("test") == []
    with running_worker(["test"], burst=True):
        pass
    assert runs(r) == {"deferring": 3}


def test_a_dead_workers_tasks_are_recovered_by_a_live_one(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_HEARTBEAT_INTERVAL": 0.2}):
        result = tasks.record.enqueue("orphan")
        dead = crashed_worker(["test"], worker_id="ghost.1.1.abc")
        assert dead.task_ids == [result.id]
        assert [w.id for w in workers()] == [dead.id]
        with running_worker(["test"]) as live:
            wait_until(lambda: runs(r) == {"orphan": 1})
            assert [w.id for w in workers()] == [live.id]


def test_an_unregistered_worker_is_given_nothing(r: redis.Redis) -> None:
    tasks.record.enqueue("x")
    ghost = "ghost.2.2.abc"
    fetched = WorkerStore(ghost, ["test"]).take()
    assert (fetched.position, fetched.payload) == (-1, None)
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.in_progress) == (1, 0)


def test_a_worker_taken_for_dead_registers_again_and_goes_on(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with running_worker(["test"]) as worker:
        wait_until(lambda: [w.id for w in workers()] == [worker.id])
        # Recovered by another worker (its lease had run out): no longer registered.
        assert TaskStore().recover_worker(
            worker.id, ["test"], only_if_expired=False, max_crashes=0
        ) == (0, 0)
        assert workers() == []
        tasks.record.enqueue("after")
        wait_until(lambda: runs(r) == {"after": 1})
        assert [w.id for w in workers()] == [worker.id]
    assert "was taken for dead (its lease ran out) and registers again" in caplog.text


def test_in_progress_counts_and_live_workers(redis_mode: str, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue("b")
    worker = crashed_worker(["test", "other"])
    [other, test] = queue_stats(["other", "test"])
    assert (test.ready, test.in_progress, other.in_progress) == (1, 1, 0)
    [info] = workers()
    assert (info.id, info.queues) == (worker.id, ["test", "other"])
    assert 0 < info.lease_left <= 1.5 * conf.TASK_HEARTBEAT_INTERVAL


def test_bad_worker_options_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one queue"):
        Worker([])
    with pytest.raises(ValueError, match="not a string"):
        Worker("test")
    with pytest.raises(ValueError, match="max_tasks"):
        Worker(["test"], max_tasks=0)


@pytest.mark.parametrize("threads", [1, 4])
def test_a_task_whose_lock_is_busy_is_deferred_then_runs_once(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, threads: int
) -> None:
    @redis_task(name="tests.test_task_worker.sell", queue="test")
    @redis_lock("item:{item_id}", blocking=False, on_busy=defer(0.05))
    def sell(item_id: int) -> None:
        r.hincrby("{test}:runs", f"sell {item_id}", 1)

    holder = RedisLock("item:7", timeout=30).acquire()
    assert holder is not None
    caplog.set_level(logging.INFO, "redis_components.worker")
    sell.enqueue(7)
    with running_worker(["test"], threads=threads):
        # While the lock is held the task goes back to the delayed queue, again and again.
        wait_until(lambda: caplog.text.count("deferred for 0.05 s") >= 3)
        assert runs(r) == {}
        holder.release()
        wait_until(lambda: runs(r) == {"sell 7": 1})
    assert dead_letters("test") == []
    assert queue_stats(["test"])[0].delayed == 0
    # Deferrals do not count as retries: the task ran with its retries untouched.
    assert "retry" not in caplog.text


@pytest.mark.parametrize("threads", [1, 2])
def test_each_run_is_logged_once(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, threads: int
) -> None:
    """How a run ended is logged once (written while its outcome is recorded), for
    sync and async tasks, ended done or retried."""
    caplog.set_level(logging.INFO, "redis_components.worker")
    handles = [tasks.add.enqueue(i, 1) for i in range(5)]
    handles += [tasks.async_add.enqueue(i, 2) for i in range(3)]
    handles.append(tasks.retry_once.enqueue("once"))
    with running_worker(["test"], threads=threads):
        wait_until(lambda: all(get_result(h.id).is_finished for h in handles))
    ended = [m for m in caplog.messages if m.startswith("Task ")]
    assert sum(" done in " in m for m in ended) == 9, ended
    assert sum(" retry 1 of 5 " in m for m in ended) == 1, ended
    for handle in handles:
        assert f"[{handle.id}] done in" in caplog.text
        assert caplog.text.count(f"[{handle.id}] done in") == 1


def loop_store(worker_id: str, queues: list[str]) -> tuple[WorkerStore, dict[str, OneConnection]]:
    """A registered worker's store as its loop has it: a connection held in each home."""
    WorkerStore(worker_id, queues).beat(60_000, description(queues))
    held: dict[str, OneConnection] = {}

    def client(head: str) -> OneConnection:
        return held.setdefault(head, OneConnection(tasks_client(head)))

    return WorkerStore(worker_id, queues, move_delayed=False, client=client), held


@pytest.mark.parametrize("started", [False, True])
def test_a_task_held_ahead_counts_a_crash_only_once_started(r: redis.Redis, started: bool) -> None:
    """A worker that dies holding a task ahead (taken, not started) gives it back with no
    crash counted, at its place in the queue; once a later call started it, its crash
    counts as any running task's."""
    first, second = tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    worker, connections = loop_store("ahead-w", ["test"])
    assert worker.take().payload is not None
    held = worker.receive(worker.take_ahead(None))
    assert held.payload is not None
    assert task_id_of(held.payload) == second.id
    if started:
        assert worker.record(None, start=held).recorded is False  # (nothing to record)
    assert queue_stats(["test"])[0].in_progress == 2
    assert TaskStore().recover_worker(
        "ahead-w", ["test"], only_if_expired=False, max_crashes=3
    ) == (2, 0)
    for connection in connections.values():
        connection.close()
    assert len(get_result(first.id).errors) == 1
    assert len(get_result(second.id).errors) == (1 if started else 0)
    # Both are back in the order they were enqueued.
    order = [task_id_of(p) for p in r.zrange(ready_key("test"), 0, -1)]
    assert order == [first.id, second.id]


def test_a_task_held_ahead_goes_back_by_itself() -> None:
    """A worker gives back the task it holds ahead, not started: first in its queue
    again, no longer running; once given back, giving it back again does nothing."""
    first, second = tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    worker, connections = loop_store("ahead-w", ["test"])
    worker.take()
    held = worker.receive(worker.take_ahead(None))
    assert {t.task_id for t in running_tasks()} == {first.id, second.id}
    assert worker.put_back_ahead(held, second.id) is True
    assert worker.put_back_ahead(held, second.id) is False
    assert [t.task_id for t in running_tasks()] == [first.id]
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.in_progress) == (1, 1)
    assert worker.take().payload == held.payload
    for connection in connections.values():
        connection.close()


def test_a_long_task_does_not_hold_the_next_one_ahead(r: redis.Redis) -> None:
    """Behind a task that runs for seconds, the task a worker took ahead goes back to its
    queue at once, and another worker runs it meanwhile."""
    quick = tasks.record.enqueue("quick")
    long = tasks.slow.enqueue("long", 1.5)
    after = tasks.record.enqueue("after")
    with running_worker(["test"]) as first:
        wait_until(lambda: get_result(long.id).status is TaskResultStatus.RUNNING)
        with running_worker(["test"]) as second:
            wait_until(lambda: get_result(after.id).is_finished)
            assert not get_result(long.id).is_finished
        wait_until(lambda: get_result(long.id).is_finished)
    assert get_result(quick.id).worker_ids == get_result(long.id).worker_ids == [first.id]
    assert get_result(after.id).worker_ids == [second.id]
    assert runs(r) == {"quick": 1, "after": 1}


def test_a_result_follows_a_task_to_its_return_value(redis_mode: str, r: redis.Redis) -> None:
    result = tasks.add.enqueue(2, 3)
    Worker(["test"], burst=True).run()
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        1,
    )
    assert result.errors == []
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert running_tasks() == []


def test_an_async_task_runs_on_an_event_loop(r: redis.Redis) -> None:
    result = tasks.async_add.enqueue(20, 22)
    Worker(["test"], burst=True).run()
    assert get_result(result.id).return_value == 42


def test_a_failing_task_keeps_the_traceback_of_each_attempt(r: redis.Redis) -> None:
    result = tasks.fail.enqueue("f")
    with running_worker(["test"]):
        wait_until(lambda: get_result(result.id).is_finished)
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (TaskResultStatus.FAILED, 3, 3)
    assert {error.exception_class_path for error in result.errors} == {"builtins.ValueError"}
    assert all("f failed on purpose" in error.traceback for error in result.errors)
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_a_retry_then_a_success_records_two_attempts(r: redis.Redis) -> None:
    result = tasks.retry_once.enqueue("r")
    with running_worker(["test"]):
        wait_until(lambda: get_result(result.id).is_finished)
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 2)
    [error] = result.errors
    assert error.exception_class_path == "redis_components.tasks.registry.Retry"


def test_a_return_value_that_is_not_json_fails_the_task_without_a_retry(r: redis.Redis) -> None:
    result = tasks.returns_object.enqueue("o")
    Worker(["test"], burst=True).run()
    result.refresh()
    assert (result.status, runs(r)) == (TaskResultStatus.FAILED, {"o": 1})
    assert "cannot be stored as JSON" in result.errors[0].traceback
    [letter] = dead_letters("test")
    assert letter.reason == "failed"


def test_a_running_task_reads_as_running(r: redis.Redis) -> None:
    result = tasks.slow.enqueue("s", 0.5)
    with running_worker(["test"]) as worker:
        wait_until(lambda: r.get("test:s:started") is not None)
        running = get_result(result.id)
        assert running.status is TaskResultStatus.RUNNING
        assert running.worker_ids == [worker.id]
        assert running.started_at is not None
        wait_until(lambda: get_result(result.id).status is TaskResultStatus.SUCCESSFUL)


def test_results_expire_on_their_own(r: redis.Redis) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_RESULT_TTL": 0.2}):
        result = tasks.add.enqueue(1, 1)
        assert 0 < r.pttl(result_key(result.id)) <= 200
        Worker(["test"], burst=True).run()
        assert get_result(result.id).return_value == 2
        wait_until(lambda: r.exists(result_key(result.id)) == 0)
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()


def test_a_first_attempt_whose_result_expired_while_it_waited_has_a_whole_result(
    r: redis.Redis,
) -> None:
    with override_settings(REDIS_COMPONENTS={"TASK_RESULT_TTL": 0.1}):
        result = tasks.add.enqueue(2, 3)
    wait_until(lambda: r.exists(result_key(result.id)) == 0)
    assert Worker(["test"], burst=True).run() == 1
    finished = get_result(result.id)
    assert (finished.status, finished.return_value) == (TaskResultStatus.SUCCESSFUL, 5)
    assert (finished.task.name, finished.args) == ("tests.testapp.tasks.add", [2, 3])
    assert finished.started_at is not None
    assert len(finished.worker_ids) == 1
    assert 0 < r.pttl(result_key(result.id)) <= 86_400_000


def test_priorities_run_highest_first_and_in_order_among_equals(r: redis.Redis) -> None:
    priorities = [-100, -3, 0, 5, 100]
    rng = random.Random(7)
    sent: list[tuple[int, int, str]] = []
    for n in range(200):
        priority = rng.choice(priorities)
        label = f"{priority}:{n}"
        tasks.at(priority).enqueue(label)
        sent.append((-priority, n, label))
    assert Worker(["test"], burst=True).run() == 200
    assert order(r) == [label for _, _, label in sorted(sent)]


def test_worker_ids_that_could_collide_in_key_names_are_refused() -> None:
    for bad in ["a:b", "a b", "", "x" * 101, "é", "a\\n"]:
        with pytest.raises(ValueError, match="worker_id"):
            Worker(["test"], worker_id=bad)


def test_expired_leases_that_are_not_workers_are_dropped(r: redis.Redis) -> None:
    # Ten of them would otherwise fill every heartbeat's list of expired workers.
    for i in range(12):
        r.zadd(leases_key(), {b"junk\\xff" + bytes([i]): 1})
    with override_settings(REDIS_COMPONENTS={"TASK_HEARTBEAT_INTERVAL": 0.1}):
        tasks.record.enqueue("orphan")
        dead = crashed_worker(["test"], worker_id="ghost.9.9.abc")
        assert len(dead.task_ids) == 1
        r.zadd(leases_key(), {dead.id: 1})  # its lease ran out long ago
        with running_worker(["test"]) as live:
            wait_until(lambda: runs(r) == {"orphan": 1})
            wait_until(lambda: r.zrange(leases_key(), 0, -1) == [live.id.encode()])
    assert [w.id for w in workers()] == []


@single_server_only
def test_a_finished_task_costs_the_server_ten_commands(r: redis.Redis) -> None:
    """One script call per task: its finish (result, counts), the start of the task held
    ahead and the next take inside.

    The finish reads the task's current attempt once (the fence: an execution that was
    recovered and taken again records nothing); a first attempt's result holds no
    earlier attempt to read; a worker that has just recorded a task it held still has
    its lease, so the take does not check it; a busy worker's take looks at the delayed
    tasks every 100 ms, not each time, and reads the server's clock then (the fetches
    between reckon it); the start of the task held ahead (its score turns positive)
    and the next take ahead are one ZADD."""

    def enqueue(count: int) -> None:
        for i in range(count):
            tasks.add.enqueue(i, 1)

    assert commands_per_task(r, enqueue, lambda: Worker(["test"], burst=True).run()) == 10


def _server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_busy_worker_writes_the_servers_time_as_it_reckons_it(r: redis.Redis) -> None:
    """Between two readings of the server's clock, a worker's fetches write the time it
    reckons from the last one: each task's start and end lie within the run, as the
    server's clock saw it, a start never after its end, and the starts go forward."""
    handles = [tasks.add.enqueue(i, 1) for i in range(300)]
    before = _server_ms(r)
    assert Worker(["test"], burst=True).run() == 300
    after = _server_ms(r)
    found = [get_result(handle.id) for handle in handles]
    starts = [_ms(result.started_at) for result in found]
    ends = [_ms(result.finished_at) for result in found]
    wrong = [
        (before, start, end, after)
        for start, end in zip(starts, ends, strict=True)
        if not before <= start <= end <= after
    ]
    assert wrong == []
    assert starts == sorted(starts)


def _ms(moment: datetime.datetime | None) -> int:
    assert moment is not None
    return round(moment.timestamp() * 1000)


# -- queued arguments that do not fit the task's function -------------------------------


def queued_by_hand(
    task: str, args: list[object], kwargs: dict[str, object], backend: str | None = None
) -> str:
    """Enqueue a task past the checks of ``enqueue``, as an older release or a hand may
    have: its id."""
    message = TaskMessage(
        id=new_task_id("test"), task=task, queue="test", args=args, kwargs=kwargs, backend=backend
    )
    TaskStore().enqueue(message, message.encode())
    return message.id


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "problem"),
    [
        ("tests.testapp.tasks.fail", [1, 2, 3], {}, "too many positional arguments"),
        ("tests.testapp.tasks.fail", [], {"other": 1}, "missing a required argument: 'label'"),
        ("tests.testapp.tasks.async_add", [1], {}, "missing a required argument: 'b'"),
    ],
)
def test_a_queued_task_whose_arguments_do_not_fit_is_dead_lettered_at_once(
    r: redis.Redis, task: str, args: list[object], kwargs: dict[str, object], problem: str
) -> None:
    task_id = queued_by_hand(task, args, kwargs)
    tasks.record.enqueue("behind it")
    # fail and async_add allow retries: a call that cannot bind is never retried.
    assert Worker(["test"], burst=True).run() == 2
    assert runs(r) == {"behind it": 1}  # the function was never called
    result = get_result(task_id)
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
    [error] = result.errors
    assert error.exception_class_path == "redis_components.exceptions.TaskArgumentsMismatch"
    assert problem in error.traceback
    [letter] = dead_letters("test")
    assert letter.reason == "invalid arguments"
    assert f"task {task!r} cannot take these arguments: {problem}" in letter.error
    assert TaskMessage.decode(letter.task).retries == 0
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.delayed, stats.in_progress, stats.dead) == (0, 0, 0, 1)


@pytest.mark.parametrize(
    "task",
    [
        "tests.testapp.framework_tasks.explode_with_one_retry",  # allows a retry
        "tests.testapp.framework_tasks.attempt_number",  # takes the context, then one argument
    ],
)
def test_a_queued_django_task_whose_arguments_do_not_fit_is_dead_lettered_at_once(
    r: redis.Redis, task: str
) -> None:
    task_id = queued_by_hand(task, ["x", "y"], {}, backend="default")
    assert Worker(["test"], burst=True).run() == 1
    result = get_result(task_id)
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
    assert (runs(r), r.hgetall("{test}:context")) == ({}, {})  # never called
    [letter] = dead_letters("test")
    assert (letter.reason, TaskMessage.decode(letter.task).retries) == ("invalid arguments", 0)
    assert "too many positional arguments" in letter.error


def test_a_type_error_inside_a_task_is_retried_as_any_error(r: redis.Redis) -> None:
    result = tasks.add.enqueue("text", 1)  # fits the signature; fails in the function
    Worker(["test"], burst=True).run()
    result.refresh()
    assert result.status == TaskResultStatus.READY  # waiting for its first retry
    assert [error.exception_class_path for error in result.errors] == ["builtins.TypeError"]
    assert queue_stats(["test"])[0].delayed == 1
