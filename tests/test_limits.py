"""Rate and concurrency limits, enforced where a worker takes a task (tasks/limits.py)."""

from __future__ import annotations

import datetime
import io
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from conftest import cancelled
from redis_components import (
    cancel,
    concurrency_limit,
    get_result,
    get_workflow,
    group,
    rate_limit,
    redis_task,
)
from redis_components.connection import get_client, is_cluster
from redis_components.exceptions import InvalidInput, QueueFull
from redis_components.tasks.backend import declared_tasks
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.limits import from_settings, split_by_queue, unmatched_settings
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import queue_stats, waiting_tasks, workers
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import home, ready_key, split_homes
from redis_components.tasks.worker import Worker
from redis_components.testing import ScriptedWorker
from tests.processes import WorkerProcess, running_worker, wait_until
from tests.test_rc_queues import QUEUES_HEADER
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def at(rest: str) -> str:
    """A key of the queue "test"'s home (on a cluster, each queue has its own)."""
    return home("test") + rest


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def most(r: redis.Redis) -> dict[str, int]:
    """The most tasks of each key that ran at once, as the tasks counted them."""
    return {key.decode(): int(count) for key, count in r.hgetall("{test}:most").items()}


def left_over(r: redis.Redis) -> list[bytes]:
    """The limits' keys still there, but for a rate's, which expire once it is idle."""
    head = home("test").encode()
    found = r.keys(at("limit:*"))
    rates = [key for key in found if key[len(head) :].split(b":")[1] in (b"tat", b"every")]
    assert all(r.pttl(key) > 0 for key in rates)
    return [key for key in found if key not in rates]


def run_on_two_workers(
    r: redis.Redis,
    start_worker: Callable[..., WorkerProcess],
    threads: int,
    count: int,
    timeout: float,
) -> None:
    """Two worker processes of ``threads`` threads, until ``count`` labels ran; then
    both stop with SIGTERM, cleanly."""
    started = [start_worker("test", "--threads", str(threads)) for _ in range(2)]
    wait_until(lambda: len(runs(r)) == count, lambda: "".join(w.output() for w in workers), timeout)
    for worker in started:
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0


def held(r: redis.Redis, key: str) -> set[bytes]:
    return r.smembers(at(f"limit:held:{key}"))


def with_settings(**changes: Any) -> Any:
    """The suite's REDIS_COMPONENTS with ``changes``."""
    return override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, **changes})


# -- definition and payload ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: concurrency_limit(0), "limit"),
        (lambda: concurrency_limit(-1), "limit"),
        (lambda: concurrency_limit(True), "limit"),
        (lambda: rate_limit(5, per=0), "per"),
        (lambda: rate_limit(5, per=-1.0), "per"),
        (lambda: rate_limit(5, burst=-1), "burst"),
        (lambda: rate_limit(0), "limit"),
        (lambda: concurrency_limit(3, key=""), "key"),
        (lambda: concurrency_limit(3, key="a:{"), "key"),
        (lambda: concurrency_limit(3, key="a:{0}"), "key"),
    ],
)
def test_a_bad_limit_is_refused_naming_its_argument(make: Callable[[], object], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        make()
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("c:{a:d}", "{a:d} may not have a format spec"),
        ("c:{a!r}", "{a!r} may not have a conversion"),
        ("c:{a:>{b}}", "{a:>{b}} may not have a format spec"),
    ],
)
def test_a_key_with_a_format_spec_or_conversion_is_refused_where_it_is_made(
    key: str, problem: str
) -> None:
    """A spec or conversion would fail (or change the key) only at enqueue, with a bare
    ValueError: the limit's constructor refuses it, as a partition key's is refused."""
    with pytest.raises(InvalidInput, match=re.escape(problem)) as refused:
        concurrency_limit(1, key=key)
    assert refused.value.field == "key"
    with pytest.raises(InvalidInput, match=re.escape(problem)) as refused:
        redis_task(name="tests.limits.spec", partition_key=key)(lambda a, b: None)
    assert refused.value.field == "partition_key"


def test_a_key_naming_no_argument_of_the_function_is_refused_when_the_task_is_defined() -> None:
    with pytest.raises(InvalidInput, match=r"names \{customer\}, which is no argument"):

        @redis_task(name="tests.limits.bad", limits=[concurrency_limit(2, key="c:{customer}")])
        def bad(client: str) -> None: ...

    with pytest.raises(InvalidInput, match="limits: must hold"):

        @redis_task(name="tests.limits.bad2", limits=[3])  # type: ignore[list-item]
        def bad2() -> None: ...


def test_a_limited_payload_carries_its_filled_limits_and_reads_back(r: redis.Redis) -> None:
    handle = tasks.per_customer.enqueue("acme [EU]", "one")
    payload = r.zrange(ready_key("test"), 0, 0)[0]
    head = f'{{"id":"{handle.id}","priority":0,"limits":'
    assert payload.decode().startswith(head)
    # No bracket inside a key: the scripts find the list's end by balancing brackets.
    assert payload.decode()[len(head) :].startswith('[["c","customer:acme \\u005bEU\\u005d",3]]')
    message = TaskMessage.decode(payload)
    assert message.limits == [["c", "customer:acme [EU]", 3]]
    assert message.encode().encode() == payload
    assert json.loads(payload)["kwargs"] == {}


def test_djangos_task_takes_limits_as_our_own_does(r: redis.Redis) -> None:
    from tests.testapp import framework_tasks

    handle = framework_tasks.ship.enqueue(7, "shipped")
    message = TaskMessage.decode(r.zrange(ready_key("test"), 0, 0)[0])
    assert message.limits == [["c", "order:7", 1]]
    assert Worker(["test"], burst=True).run() == 1
    assert get_result(handle.id).status == "SUCCESSFUL"
    assert held(r, "order:7") == set()


def test_a_schedule_of_a_limited_task_carries_its_limits() -> None:
    from redis_components.tasks.schedules import build

    schedule = build(
        "tests.limits.every",
        task_name="tests.testapp.tasks.per_customer",
        queue="test",
        priority=0,
        backend=None,
        task=tasks.per_customer,
        every=60,
        args=["acme", "tick"],
    )
    message, _ = schedule.message(0)
    assert message.limits == [["c", "customer:acme", 3]]


# -- enforced where a task is taken --------------------------------------------------


def test_a_task_over_its_limit_waits_unattempted_and_the_next_task_runs(r: redis.Redis) -> None:
    """One worker, two threads, a limit of one: the second task of the limit is not
    taken (no attempt, no slot) while the first runs; an unlimited task behind it is."""
    first = tasks.one_at_a_time.enqueue("a")
    second = tasks.one_at_a_time.enqueue("b")
    tasks.record.enqueue("free")
    with running_worker(["test"], threads=2):
        wait_until(lambda: r.exists("test:a:started") and runs(r) == {"free": 1})
        assert get_result(second.id).status == "READY"
        assert get_result(second.id).worker_ids == []
        assert r.zcard(ready_key("test")) == 0  # it waits on its limit, not in the queue
        assert not r.exists("test:b:started")
        r.set("test:a:open", 1)
        r.set("test:b:open", 1)
        wait_until(lambda: get_result(second.id).status == "SUCCESSFUL")
    assert get_result(first.id).status == "SUCCESSFUL"
    assert len(get_result(second.id).worker_ids) == 1  # one attempt, no retry
    assert held(r, "task:tests.testapp.tasks.one_at_a_time") == set()


def test_a_workflows_step_over_its_limit_waits_and_its_workflow_succeeds(r: redis.Redis) -> None:
    for label in ("a", "b", "c"):
        r.set(f"test:{label}:open", 1)
    flow = group(tasks.one_at_a_time.si(label) for label in ("a", "b", "c")).enqueue()
    with running_worker(["test"], threads=3):
        wait_until(lambda: get_workflow(flow.id).status == "SUCCESSFUL")
    assert held(r, "task:tests.testapp.tasks.one_at_a_time") == set()
    assert left_over(r) == []


def test_a_cancelled_workflows_step_waiting_on_its_limit_never_runs(r: redis.Redis) -> None:
    flow = group(tasks.one_at_a_time.si(label) for label in ("a", "b")).enqueue()
    worker = ScriptedWorker(["test"])
    first = worker.take()
    assert first is not None
    assert worker.take() is None  # the second step waits on the limit
    assert get_workflow(flow.id).cancel(terminate=False) == (1, 1)
    worker.succeed(first.id)
    assert worker.take() is None
    waiting = [step for step in get_workflow(flow.id).steps() if step.task_id != first.id]
    assert cancelled(get_result(waiting[0].task_id))
    assert left_over(r) == []


def test_a_task_waiting_on_its_limit_can_be_cancelled(r: redis.Redis) -> None:
    tasks.one_at_a_time.enqueue("a")
    waiting = tasks.one_at_a_time.enqueue("b")
    third = tasks.one_at_a_time.enqueue("c")
    with running_worker(["test"], threads=2):
        wait_until(lambda: r.exists("test:a:started"))
        wait_until(lambda: r.zcard(ready_key("test")) == 0)
        assert cancel(waiting.id) == "cancelled"
        assert cancelled(get_result(waiting.id))
        r.set("test:a:open", 1)
        r.set("test:c:open", 1)
        wait_until(lambda: get_result(third.id).status == "SUCCESSFUL")
    assert not r.exists("test:b:started")
    assert left_over(r) == []


@pytest.fixture
def one_home() -> Iterator[None]:
    """Every queue in one home, as on a single server: tasks of two queues share a limit
    only there (on a cluster, each queue's home counts its own)."""
    with split_homes(False):
        yield


@pytest.mark.usefixtures("one_home")
def test_a_purge_deletes_its_queues_waiting_tasks_and_hands_their_permits_on(
    r: redis.Redis,
) -> None:
    worker = ScriptedWorker(["test", "other"])
    running = [tasks.per_customer.enqueue("X", f"run{i}").id for i in range(3)]
    assert [worker.take().id for _ in running] == running  # type: ignore[union-attr]
    tasks.per_customer.enqueue("X", "waits1")
    tasks.per_customer.enqueue("X", "waits2")
    elsewhere = tasks.per_customer.using(queue_name="other").enqueue("X", "elsewhere")
    assert worker.take() is None  # all three set aside on the limit
    assert r.zcard(at("limit:wait:customer:X")) == 3
    worker.succeed(running[0])  # its permit goes to "waits1", back in its queue
    assert r.zcard(ready_key("test")) == 1
    assert TaskStore().purge("test") == 2
    # The permit "waits1" held went on to the task waiting in the other queue.
    assert r.zcard(at("limit:wait:customer:X")) == 0
    assert held(r, "customer:X") == {
        running[1].encode(),
        running[2].encode(),
        elsewhere.id.encode(),
    }
    taken = worker.take()
    assert taken is not None
    assert taken.id == elsewhere.id
    for task_id in worker.held:
        worker.succeed(task_id)
    assert left_over(r) == []
    assert r.hgetall(at("limits")) == {}


def test_rc_queues_shows_each_concurrency_limit_in_use(r: redis.Redis) -> None:
    worker = ScriptedWorker(["test"])
    for i in range(4):
        tasks.per_customer.enqueue("X", f"t{i}")
    tasks.per_customer.enqueue("Y", "y")
    taken = [worker.take() for _ in range(5)]
    assert sum(1 for message in taken if message is not None) == 4  # one of X waits
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    lines = out.getvalue().splitlines()
    assert "Concurrency limits in use: 2" in lines
    assert lines[lines.index("Concurrency limits in use: 2") + 1 :][:3] == [
        "key         limit  holding  waiting",
        "customer:X      3        3        1",
        "customer:Y      3        1        0",
    ]


def test_tasks_waiting_on_a_limit_count_in_their_queue(r: redis.Redis) -> None:
    """Out of the ready ones, but counted: in the queue's stats and rc_queues, against
    TASK_QUEUE_LIMITS, and so the queue is not forgotten; a cancel and a purge count them
    out."""
    worker = ScriptedWorker(["test"])
    for i in range(3):
        tasks.per_customer.enqueue("X", f"run{i}")
    waiting = [tasks.per_customer.enqueue("X", f"waits{i}") for i in range(2)]
    assert sum(worker.take() is not None for _ in range(4)) == 3
    stats = queue_stats(["test"])[0]
    assert (stats.ready, stats.on_limits, stats.in_progress) == (0, 2, 3)
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == QUEUES_HEADER
    assert [line.split() for line in lines if line.startswith("test ")] == [
        ["test", "0", "-", "0", "2", "3", "0", "-"]
    ]
    with with_settings(TASK_QUEUE_LIMITS={"test": 2}), pytest.raises(QueueFull):
        tasks.record.enqueue("full")
    assert TaskStore().forget_queues(["test"]) == 0
    assert cancel(waiting[0].id) == "cancelled"
    assert queue_stats(["test"])[0].on_limits == 1
    assert TaskStore().purge("test") == 1
    assert queue_stats(["test"])[0].on_limits == 0
    assert not r.exists(at("limit:waiting"))


def test_tasks_waiting_on_a_limit_are_listed_with_the_key_each_waits_on(
    r: redis.Redis,
) -> None:
    """The tasks a queue's count says are on limits, by id, page by page, each with its
    key (what the admin's On limits tab and rc_queues --on-limits show): a cancel takes
    one out; a task of another queue waiting on the same key is not listed (on a
    cluster, each queue counts the key apart: docs/limits.md)."""
    worker = ScriptedWorker(["test", "other"])
    for i in range(3):
        tasks.per_customer.enqueue("X", f"run{i}")
    waiting = [tasks.per_customer.enqueue("X", f"waits{i}") for i in range(3)]
    elsewhere = tasks.per_customer.using(queue_name="other").enqueue("X", "other")
    tasks.per_customer.enqueue("Y", "runs")
    apart = is_cluster(get_client())
    assert sum(worker.take() is not None for _ in range(8)) == 4 + apart
    assert waiting_tasks("test", "ready") == (0, [])
    total, listed = waiting_tasks("test", "on_limits")
    assert total == 3
    assert [t.task_id for t in listed] == [h.id for h in waiting]
    assert {(t.task, t.waits_on, t.waits_for) for t in listed} == {
        ("tests.testapp.tasks.per_customer", "customer:X", "concurrency")
    }
    assert [t.task_id for t in waiting_tasks("test", "on_limits", 1, 1)[1]] == [waiting[1].id]
    on_other = [t.task_id for t in waiting_tasks("other", "on_limits")[1]]
    assert on_other == ([] if apart else [elsewhere.id])
    out = io.StringIO()
    call_command("rc_queues", "--on-limits", "test", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "test: 3 tasks wait on concurrency limits"
    assert lines[1].split() == ["id", "task", "waits", "on"]
    assert [line.split() for line in lines[2:]] == [
        [h.id, "tests.testapp.tasks.per_customer", "customer:X"] for h in waiting
    ]
    assert cancel(waiting[0].id) == "cancelled"
    total, listed = waiting_tasks("test", "on_limits")
    assert (total, [t.task_id for t in listed]) == (2, [h.id for h in waiting[1:]])
    out = io.StringIO()
    call_command("rc_queues", "--on-limits", "test2", stdout=out)
    assert out.getvalue() == "No task of queue 'test2' waits on a concurrency limit.\n"


def test_a_delayed_task_set_aside_on_a_rate_says_which(r: redis.Redis) -> None:
    """Under 20 a second with a burst of 5, 6 of 10 tasks start and 4 are set aside on
    the rate: the Delayed list names it for them, not for a task of the same rate
    delayed by its caller."""
    worker = ScriptedWorker(["test"])
    set_aside = [tasks.rated.enqueue(f"r{i}") for i in range(10)]
    an_hour = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    later = tasks.rated.using(run_after=an_hour).enqueue("later")
    assert sum(worker.take() is not None for _ in range(7)) == 6
    total, delayed = waiting_tasks("test", "delayed")
    assert total == 5
    reasons = {t.task_id: (t.waits_for, t.waits_on) for t in delayed}
    assert reasons == {
        **{h.id: ("rate", "api") for h in set_aside[6:]},
        later.id: ("", ""),
    }


def test_settings_replace_a_limit_for_the_next_worker(r: redis.Redis) -> None:
    """TASK_LIMITS, read when a worker starts, replaces the limits of the tasks it takes
    (already queued ones too): an exact key before a prefix, a concurrency limit's and a
    rate's numbers."""
    exact_and_prefix = {"customer:A": {"concurrency": 5}, "customer:*": {"concurrency": 1}}
    with with_settings(TASK_LIMITS=exact_and_prefix):
        worker = ScriptedWorker(["test"])
    for customer in "AB":
        for i in range(6):
            tasks.per_customer.enqueue(customer, f"{customer}{i}")
    taken = [worker.take() for _ in range(12)]
    assert sum(message is not None for message in taken) == 6  # A: 5 (not 3), B: 1
    assert (len(held(r, "customer:A")), len(held(r, "customer:B"))) == (5, 1)
    assert r.hgetall(at("limits")) == {b"customer:A": b"5", b"customer:B": b"1"}
    with with_settings(TASK_LIMITS={"api": {"rate": 1, "per": 60}}):
        rated = ScriptedWorker(["test"])
    for i in range(3):
        tasks.rated.enqueue(f"r{i}")  # its own rate would let 6 start at once
    assert [rated.take() is not None for _ in range(3)] == [True, False, False]
    assert r.zcard(at("delayed:test")) == 2


def test_a_limit_key_of_several_queues_is_named_with_its_queues() -> None:
    lines = split_by_queue(declared_tasks())
    assert (
        "The limit key 'account:{}' is named by tasks of the queues email, test: on a Redis "
        "Cluster each queue counts it apart, so up to 2 times its limit run or start at "
        "once (see the Limits page)"
    ) in lines
    assert not [line for line in lines if "'api'" in line or "'customer:{}'" in line]


def test_rc_worker_warns_of_a_limit_key_split_by_queue_on_a_cluster_only(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker("test", "--burst")
    assert worker.wait() == 0
    warned = "The limit key 'account:{}' is named by tasks of the queues email, test"
    assert (warned in worker.output()) == is_cluster(get_client())


def test_rc_worker_applies_and_logs_the_limits_of_its_settings(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    for i in range(6):
        tasks.per_customer.enqueue("A", f"a{i}", pause=0.1)
    limits = {"customer:*": {"concurrency": 1}, "customr:*": {"concurrency": 1}}
    worker = start_worker("test", "--threads", "4", TASK_LIMITS=limits)
    wait_until(lambda: len(runs(r)) == 6, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert most(r) == {"A": 1}  # not the task's own 3
    assert "replacing the tasks' own: customer:*: at most 1 at once" in worker.output()
    warned = re.escape(
        "TASK_LIMITS['customr:*'] matches no known task's limit "
        "(did you mean 'customer:*'?): it changes nothing."
    )
    assert re.search(rf"WARNING \[.*\] redis_components.worker: {warned}", worker.output())


def test_a_lowered_limit_holds_its_permits_back_until_under_it(r: redis.Redis) -> None:
    """A worker started with a lower limit than the running tasks took: the permits they
    give back go to no waiting task until fewer than the new limit run."""
    old = ScriptedWorker(["test"])
    running = [tasks.per_customer.enqueue("X", f"run{i}").id for i in range(3)]
    assert [old.take().id for _ in running] == running  # type: ignore[union-attr]
    with with_settings(TASK_LIMITS={"customer:X": {"concurrency": 1}}):
        new = ScriptedWorker(["test"])
    tasks.per_customer.enqueue("X", "waits1")
    tasks.per_customer.enqueue("X", "waits2")
    assert new.take() is None
    assert r.hget(at("limits"), "customer:X") == b"1"
    old.succeed(running[0])
    old.succeed(running[1])
    assert r.zcard(at("limit:wait:customer:X")) == 2  # 1 runs: none handed
    old.succeed(running[2])
    assert r.zcard(at("limit:wait:customer:X")) == 1  # one handed on
    taken = new.take()
    assert taken is not None
    assert new.take() is None
    new.succeed(taken.id)
    last = new.take()
    assert last is not None
    new.succeed(last.id)
    assert left_over(r) == []


def test_tasks_handed_permits_under_an_old_limit_keep_to_a_lowered_one(
    r: redis.Redis,
) -> None:
    """A worker stopping under the task's own limit (3) hands its permits to 3 waiting
    tasks as its tasks end; a worker started with a lower one (1) runs one of them at a
    time: the others give their permits back and wait again."""
    old = ScriptedWorker(["test"])
    running = [tasks.per_customer.enqueue("X", f"run{i}").id for i in range(3)]
    assert [old.take().id for _ in running] == running  # type: ignore[union-attr]
    for i in range(3):
        tasks.per_customer.enqueue("X", f"waits{i}")
    assert old.take() is None
    for task_id in running:
        old.succeed(task_id)
    assert r.zcard(at("limit:wait:customer:X")) == 0  # all three handed a permit
    with with_settings(TASK_LIMITS={"customer:X": {"concurrency": 1}}):
        new = ScriptedWorker(["test"])
    for _ in range(3):
        taken = new.take()
        assert taken is not None
        assert new.take() is None  # one at a time, as the new limit says
        assert len(held(r, "customer:X")) == 1
        new.succeed(taken.id)
    assert new.take() is None
    assert left_over(r) == []


def test_tasks_naming_one_key_with_different_numbers_each_keep_their_own(
    r: redis.Redis,
) -> None:
    """mix_high (4 at once) and mix_low (1 at once) name one key: a mix_low starts only
    while fewer than 1 others run (alone), a mix_high while fewer than 4 do."""
    for i in range(6):
        tasks.mix_high.enqueue(f"h{i}", 0.2)
    for i in range(3):
        tasks.mix_low.enqueue(f"l{i}", 0.05)
    for i in range(6, 12):
        tasks.mix_high.enqueue(f"h{i}", 0.2)
    with running_worker(["test"], threads=6):
        wait_until(lambda: r.llen("{test}:mix") == 15)
    starts = [line.decode().split() for line in r.lrange("{test}:mix", 0, -1)]
    assert [int(seen) for label, seen in starts if label[0] == "l"] == [1, 1, 1], starts
    assert most(r) == {"mix": 4}
    assert left_over(r) == []


def test_a_limit_raised_by_settings_falls_back_once_a_worker_without_them_takes(
    r: redis.Redis,
) -> None:
    """Workers restarted without the setting apply the task's own limit again, and the
    permits handed on follow it: not the raised number the last setting wrote."""
    with with_settings(TASK_LIMITS={"customer:X": {"concurrency": 5}}):
        raised = ScriptedWorker(["test"])
    running = [tasks.per_customer.enqueue("X", f"run{i}").id for i in range(5)]
    assert [raised.take().id for _ in running] == running  # type: ignore[union-attr]
    plain = ScriptedWorker(["test"])
    tasks.per_customer.enqueue("X", "waits1")
    tasks.per_customer.enqueue("X", "waits2")
    assert plain.take() is None
    assert r.hget(at("limits"), "customer:X") == b"3"
    for task_id in running[:2]:
        raised.succeed(task_id)
    assert r.zcard(at("limit:wait:customer:X")) == 2  # 3 run: none handed
    raised.succeed(running[2])
    assert r.zcard(at("limit:wait:customer:X")) == 1
    for task_id in running[3:]:
        raised.succeed(task_id)
    for _ in range(2):
        taken = plain.take()
        assert taken is not None
        plain.succeed(taken.id)
    assert left_over(r) == []


def test_two_processes_never_run_more_than_a_keys_limit_and_other_tasks_go_by(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Two worker processes with 8 threads each: 60 tasks of 0.2 s for customer A and
    60 for B under a limit of 3 per customer, and 60 unlimited tasks enqueued after
    them. No more than 3 of A (or B) run at once; each limit is reached; the unlimited
    tasks do not wait for the limited ones."""
    for i in range(60):
        tasks.per_customer.enqueue("A", f"a{i}", pause=0.2)
    for i in range(60):
        tasks.per_customer.enqueue("B", f"b{i}", pause=0.2)
    for i in range(60):
        tasks.record.enqueue(f"u{i}", pause=0.05)
    run_on_two_workers(r, start_worker, 8, 180, timeout=120)
    assert set(runs(r).values()) == {1}
    assert most(r) == {"A": 3, "B": 3}
    order = [label.decode() for label in r.lrange("{test}:order", 0, -1)]
    # 60 x 0.2 s at 3 at once is 4 s per customer; the unlimited tasks take 0.3 s on ten
    # free threads: they all ran before half of A's did.
    assert order.index("u59") < order.index("a29"), order
    assert held(r, "customer:A") == held(r, "customer:B") == set()
    assert left_over(r) == []


def test_a_killed_workers_permits_come_back_and_its_tasks_run_again(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    settings = {"TASK_HEARTBEAT_INTERVAL": 1.0, "TASK_MAX_CRASHES": 100}
    labels = [f"a{i}" for i in range(12)]
    for label in labels:
        tasks.per_customer.enqueue("A", label, pause=0.5)
    worker = start_worker("test", "--threads", "6", **settings)
    wait_until(lambda: r.hget("{test}:now", "A") == b"3", worker.output)
    killed = {w.id for w in workers()}
    worker.kill_all()
    assert len(held(r, "customer:A")) == 3  # held by the dead worker's tasks
    # Those three died with it: the count of those running starts again from none.
    r.delete("{test}:now", "{test}:most")
    worker = start_worker("test", "--threads", "6", **settings)

    def done() -> bool:
        return not killed & {w.id for w in workers()} and set(runs(r)) == set(labels)

    wait_until(done, worker.output, 60)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    counts = runs(r)
    assert sum(counts.values()) - len(labels) <= 3  # only the killed ones ran twice
    assert most(r) == {"A": 3}
    assert held(r, "customer:A") == set()
    assert left_over(r) == []


def test_a_rate_limit_spreads_starts_exactly_and_charges_no_retry(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """100 tasks under 20 a second with a burst of 5, on two processes: no window of a
    second holds more than 25 starts (by the server's clock, where the limit is kept),
    and every task ran on its first attempt."""
    handles = [tasks.rated.enqueue(f"r{i}") for i in range(100)]
    run_on_two_workers(r, start_worker, 4, 100, timeout=60)
    results = [get_result(handle.id) for handle in handles]
    assert all(len(result.worker_ids) == 1 and not result.errors for result in results)
    assert starts_in_a_second(handles) <= 25
    starts = sorted(result.started_at.timestamp() for result in results)
    # 6 at once (the burst and the first), then one every 50 ms.
    assert starts[-1] - starts[0] >= 94 * 0.05 - 0.005, starts
    assert set(runs(r).values()) == {1}


def test_a_rates_bound_holds_for_the_starts_the_tasks_code_sees(r: redis.Redis) -> None:
    """20 tasks under 4 a second, on 2 threads: the starts of their code (not only their
    takes) never number more than 4 in any second, given up to 10 ms between a take and
    its code's start (the window is shortened by any longer gap this machine had)."""
    handles = {f"f{i}": tasks.four_a_second.enqueue(f"f{i}") for i in range(20)}
    with running_worker(["test"], threads=2):
        wait_until(lambda: r.llen("{test}:code_starts") == 20, timeout=30)
    starts = {
        label: float(at)
        for label, at in (entry.decode().split() for entry in r.lrange("{test}:code_starts", 0, -1))
    }
    taken = {label: get_result(h.id).started_at.timestamp() for label, h in handles.items()}
    late = max(starts[label] - taken[label] for label in starts)
    window = 1.0 - max(0.0, late - 0.010)
    times = sorted(starts.values())
    most_in_a_window = max(
        sum(1 for later in times[i:] if later <= start + window) for i, start in enumerate(times)
    )
    assert most_in_a_window <= 4, (times, late)


def starts_in_a_second(handles: list[Any]) -> int:
    """The most starts (by the server's clock, as the results say) in any second."""
    starts = sorted(get_result(handle.id).started_at.timestamp() for handle in handles)
    return max(
        sum(1 for later in starts[i:] if later < start + 1.0) for i, start in enumerate(starts)
    )


def test_tasks_that_waited_on_a_rate_then_on_a_permit_keep_to_the_rate(r: redis.Redis) -> None:
    """Five tasks hold a key's five permits while twenty more wait, first on the key's
    rate, then (their turn come) on a permit; when the five end at once and hand their
    permits on, the rate still holds: never more than 5 starts in a second."""
    gated = [tasks.both_limits.enqueue(f"g{i}", gate=True) for i in range(5)]
    rest = [tasks.both_limits.enqueue(f"t{i}") for i in range(20)]
    with running_worker(["test"], threads=8):
        wait_until(lambda: all(r.exists(f"test:g{i}:started") for i in range(5)))
        # The turns of the first tasks set aside on the rate come while all permits are
        # held: those tasks wait on the concurrency limit.
        wait_until(lambda: r.zcard(at("limit:wait:both")) >= 3)
        for i in range(5):
            r.set(f"test:g{i}:open", 1)
        wait_until(lambda: len(runs(r)) == 25, timeout=60)
    assert starts_in_a_second(gated + rest) <= 5
    assert left_over(r) == []


def test_a_key_with_few_tasks_is_not_starved_by_one_with_many(r: redis.Redis) -> None:
    """1,000 waiting tasks of one account and 10 of another, enqueued after them, under
    the same limit (2 per account): the 10 finish among the first runs, not after the
    1,000."""
    for i in range(1000):
        tasks.per_account.enqueue("big", f"big{i}")
    for i in range(10):
        tasks.per_account.enqueue("small", f"small{i}")
    with running_worker(["test"], threads=4):
        wait_until(lambda: all(f"small{i}" in runs(r) for i in range(10)), timeout=60)
    order = [label.decode() for label in r.lrange("{test}:order", 0, -1)]
    assert max(order.index(f"small{i}") for i in range(10)) < 100, order[:120]
    assert most(r)["small"] <= 2
    assert most(r)["big"] <= 2


def test_keys_take_turns_when_their_permits_are_handed_on(r: redis.Redis) -> None:
    """Three keys of 20 tasks each under one at a time, enqueued key by key, on one
    worker with 2 threads: a permit that a task of a frees goes to a's next task behind
    the tasks of c already ready, not ahead of them, so c runs beside a and b, not after
    them (with a steady backlog of a and b, c would never run)."""
    for key in "abc":
        for i in range(20):
            tasks.one_per_key.enqueue(key, f"{key}{i}", pause=0.05)
    with running_worker(["test"], threads=2):
        wait_until(lambda: len(runs(r)) == 60, timeout=60)
    order = [label.decode()[0] for label in r.lrange("{test}:order", 0, -1)]
    # Turns: each key has a share of every stretch of starts, not abab...ab then c (a
    # third, but for the jitter of which of the 2 threads ends first: a fifth at least).
    for start in range(0, 45, 15):
        stretch = order[start : start + 15]
        assert all(stretch.count(key) >= 3 for key in "abc"), "".join(order)
    assert most(r) == {"a": 1, "b": 1, "c": 1}
    assert left_over(r) == []


def test_a_permit_stays_held_until_code_past_its_hard_limit_really_ends(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Three tasks of one key under one at a time, each 2.5 s in one call, past their hard
    limit of 1 s, on 4 threads: each is settled at 1 s (FAILED), but its code runs on
    until 2.5 s, and the key's next task waits for that, not for the settle."""
    handles = [tasks.past_its_limit.enqueue(f"p{i}", 2.5) for i in range(3)]
    worker = start_worker("test", "--threads", "4")

    def all_ended() -> bool:
        finished = all(get_result(handle.id).is_finished for handle in handles)
        return finished and r.hget("{test}:now", "past") == b"0" and not held(r, "past")

    wait_until(all_ended, worker.output)
    assert most(r) == {"past": 1}
    for handle in handles:
        [error] = get_result(handle.id).errors
        assert error.exception_class_path == "redis_components.exceptions.TimeLimitExceeded"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert left_over(r) == []


def test_a_terminated_tasks_permit_stays_held_until_its_code_ends(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """cancel(terminate=True) settles a task at once; its permit goes only when its code,
    stuck 2 s in one call, ends: the key's next task never runs beside it."""
    first = tasks.stuck_on_key.enqueue("s0", 2.0)
    second = tasks.stuck_on_key.enqueue("s1", 0.1)
    worker = start_worker("test", "--threads", "2")
    wait_until(lambda: r.hget("{test}:now", "stuck") == b"1", worker.output)
    cancel(first.id, terminate=True)
    wait_until(lambda: get_result(first.id).is_finished, worker.output)
    wait_until(lambda: get_result(second.id).is_finished, worker.output)
    assert get_result(second.id).status == TaskResultStatus.SUCCESSFUL
    assert most(r) == {"stuck": 1}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert left_over(r) == []


def test_a_worker_taken_for_dead_holds_the_permits_of_what_it_still_runs(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Worker A runs t1 (5 s) under one at a time; A stops (SIGSTOP) past its lease;
    worker B recovers t1, runs it again and the key's next tasks; A resumes and its t1
    runs on: from A's next heartbeat until t1 ends there, B starts no task of the key."""
    settings = {"TASK_HEARTBEAT_INTERVAL": 0.5}
    tasks.key_spans.enqueue("t1", 5.0)
    a = start_worker("test", **settings)
    wait_until(lambda: r.hexists("{test}:first", "t1"), a.output)
    os.killpg(a.process.pid, signal.SIGSTOP)
    for i in range(2, 10):
        tasks.key_spans.enqueue(f"t{i}", 0.8)
    b = start_worker("test", **settings)
    try:
        wait_until(lambda: r.llen("{test}:spans") >= 2, b.output)  # t1 again, and t2
    finally:
        os.killpg(a.process.pid, signal.SIGCONT)
    resumed = time.time()
    wait_until(lambda: r.llen("{test}:spans") == 10, b.output)
    spans = [line.decode().split() for line in r.lrange("{test}:spans", 0, -1)]
    [first_end] = [float(end) for label, start, end in spans if float(end) - float(start) > 4]
    noticed = resumed + 2 * 0.5  # A's next heartbeat, with room for a busy machine
    late = [label for label, start, _ in spans if noticed < float(start) < first_end]
    assert late == [], (spans, resumed, first_end)
    for worker in (a, b):
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert left_over(r) == []


def latest_due_in(queue: str) -> float:
    """Seconds until the last delayed task of ``queue`` is due (by the server's clock)."""
    count, delayed = waiting_tasks(queue, "delayed", count=1000)
    assert count == len(delayed)
    last = max((task.due_ms or 0 for task in delayed), default=0)
    return last / 1000 - time.time()  # (the server runs on this machine)


@pytest.mark.parametrize("how", ["cancel", "purge"])
def test_tasks_set_aside_on_a_rate_give_their_turns_back_when_cancelled(
    r: redis.Redis, how: str
) -> None:
    """100 tasks under 20 a second (burst 5): 6 start, 94 are set aside on turns up to
    4.7 s away. Cancelling the last 93 (or purging the queue) gives their turns back:
    tasks enqueued next are due within a few turns, not after 4.7 s."""
    worker = ScriptedWorker(["test"])
    handles = [tasks.rated.enqueue(f"r{i}") for i in range(100)]
    started = [worker.take() for _ in range(6)]
    assert None not in started
    assert worker.take() is None
    assert latest_due_in("test") > 4.0
    if how == "cancel":
        for handle in handles[7:]:
            cancel(handle.id)
    else:
        call_command("rc_queues", "--purge", "test", "--yes", stdout=io.StringIO())
    for i in range(3):
        tasks.rated.enqueue(f"new{i}")
    while worker.take() is not None:  # (after a purge, the rate may let one start now)
        pass
    assert latest_due_in("test") < 0.6


def test_a_rate_raised_by_settings_speeds_up_the_tasks_set_aside_before(
    r: redis.Redis,
) -> None:
    """40 tasks under 20 a second (burst 5) set aside up to 1.7 s away; a worker started
    with the rate at 1,000 a second moves them, and the next ones, to its turns."""
    old = ScriptedWorker(["test"])
    for i in range(40):
        tasks.rated.enqueue(f"r{i}")
    assert None not in [old.take() for _ in range(6)]
    assert old.take() is None
    assert latest_due_in("test") > 1.5
    with with_settings(TASK_LIMITS={"api": {"rate": 1000, "per": 1.0, "burst": 5}}):
        new = ScriptedWorker(["test"])
    tasks.rated.enqueue("next")
    new.take()
    assert latest_due_in("test") < 0.8


def test_a_burst_worker_leaves_tasks_waiting_on_a_rate_for_later(r: redis.Redis) -> None:
    """A worker in burst mode stops when nothing may start now; the tasks set aside on
    the rate wait in their queue's delayed tasks, due at the starts they booked."""
    for i in range(10):
        tasks.rated.enqueue(f"r{i}")
    ran = Worker(["test"], burst=True).run()
    assert 6 <= ran < 10  # the burst and the first run at once; the rest are spaced out
    assert r.zcard(at("delayed:test")) == 10 - ran
    assert len(runs(r)) == ran


@pytest.mark.parametrize(
    "limits",
    ['[["c","k"]]', '[["c","k",0]]', '[["x","k",1]]', '[["r","k",1,0,0]]', "[1]", '{"a":1}'],
)
def test_a_payload_with_limits_it_cannot_read_is_dead_lettered_not_stuck(
    r: redis.Redis, limits: str
) -> None:
    """A hand-made payload whose limits are not what a task's are: taken as any task
    (nothing is held for it), then dead-lettered as malformed; the next task runs."""
    payload = '{"id":"' + "ab" * 16 + '","priority":0,"limits":' + limits + ',"task":"x"}'
    r.zadd(ready_key("test"), {payload: 1})
    tasks.record.enqueue("after")
    Worker(["test"], burst=True).run()
    assert runs(r) == {"after": 1}
    assert r.llen(at("dead:test")) == 1
    assert left_over(r) == []


def test_task_limits_that_no_registered_task_can_match_are_named() -> None:
    """A typo, or an override of another kind than the key's limits, changes nothing:
    rc_worker warns of each (tests.testapp's tasks limit customer:{customer} and turn:{key}
    by concurrency, api by rate; a Django @task of framework_tasks order:{order})."""
    settings = from_settings(
        {
            "customr:*": {"concurrency": 2},
            "customer:*": {"concurrency": 2},
            "customer:7": {"concurrency": 2},
            "turn:a": {"rate": 5},
            "api": {"rate": 10},
            "apj": {"rate": 10},
            "order:*": {"concurrency": 3},  # a Django @task's (framework_tasks)
        }
    )
    assert declared_tasks()[framework_tasks.ship.module_path].limits  # (declared at import)
    warnings = unmatched_settings(settings, declared_tasks())
    assert warnings == [
        "TASK_LIMITS['customr:*'] matches no known task's limit (did you mean 'customer:*'?)",
        "TASK_LIMITS['turn:a'] is a rate limit, but the tasks' limits of its keys are "
        "concurrency limits",
        "TASK_LIMITS['apj'] matches no known task's limit (did you mean 'api'?)",
    ]
