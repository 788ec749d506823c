"""The task store and its scripts: enqueue ranks, recovery, requeueing and purging."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
import re
from collections.abc import Callable

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from conftest import cancelled
from redis_components import cancel, chain, get_result, get_workflow, redis_task, scripts
from redis_components.connection import get_client, is_cluster
from redis_components.exceptions import InvalidInput, TaskNotCancellable, TaskNotDurable
from redis_components.scripts import load
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import FlowStep, TaskMessage, random_id
from redis_components.tasks.status import queue_stats
from redis_components.tasks.store import (
    NOW,
    Attempt,
    Delivery,
    Fetched,
    Flows,
    Inspection,
    Leases,
    Outcome,
    Queues,
    TaskStore,
    TickClaim,
    Ticks,
    WorkerStore,
    layout,
    replies,
    server_warnings,
)
from redis_components.tasks.store.calls import (
    cancel_call,
    claim_call,
    enqueue_call,
    enqueue_many_call,
    entry_heads_call,
    fetch_call,
    fetch_keys,
    forget_call,
    health_call,
    heartbeat_call,
    metadata_call,
    migrate_call,
    purge_call,
    put_back_call,
    recover_call,
    renew_call,
    requeue_dead_call,
)
from redis_components.tasks.store.layout import (
    BAND,
    FIRST,
    counter_key,
    dead_key,
    delayed_key,
    home,
    leases_key,
    rank,
    ready_key,
    result_key,
    running_key,
    running_tasks_key,
    split_homes,
    tasks_client,
    unique_key,
)
from redis_components.tasks.store.records import Adding, Move
from redis_components.tasks.store.replies import RESULT_FIELDS
from redis_components.tasks.worker import Worker
from tests.commands import tasks_added
from tests.processes import run_processes, running_worker, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def test_the_running_hash_attempts_are_read_in_one_place() -> None:
    held = b"12 host.1.1.a|x host.2.2.b|7 " + b"\xff"
    assert Attempt.all_of(held) == [
        Attempt(12, "host.1.1.a"),
        Attempt(None, "host.2.2.b"),  # (written by something else: its start unreadable)
        Attempt(7, "\ufffd"),
    ]


def test_keys_share_one_hash_tag_on_one_server_and_one_per_queue_on_a_cluster() -> None:
    with split_homes(False):
        for key in (ready_key("a:b"), delayed_key("x"), dead_key("{odd}"), result_key("ab")):
            assert key.startswith("rc:queue:{tasks}:")
        assert counter_key(home("x")) == "rc:queue:{tasks}:counter"
    with split_homes():
        assert ready_key("a:b").startswith(home("a:b"))
        assert home("a:b") != home("x")
        assert re.fullmatch(r"rc:queue:\{tasks:[0-9a-f]{4}\}:", home("x"))
        assert delayed_key("x") == f"{home('x')}delayed:x"
        assert result_key(layout.new_task_id("x")).startswith(home("x"))
        assert result_key("ab").startswith("rc:queue:{tasks}:")  # (an id of none of ours)
    # Without a choice: one home per queue on a cluster only.
    assert (home("x") != home("a:b")) == is_cluster(get_client())


def test_ready_scores_put_priorities_in_bands_and_stay_exact_in_a_double() -> None:
    assert rank(100) < rank(0) < rank(-100)
    assert rank(0) - rank(1) == BAND
    assert rank(-100) + FIRST < 2**53  # the largest score, with the counter, is exact


# What lib/queue.lua reads in a payload and what it writes, as one script returns it.
QUEUE_LIBRARY = scripts.compose(
    "queue_library",
    """-- KEYS: none
-- ARGV: 1) a payload  2) a time (epoch ms)
-- Returns: its id, its rank, it stamped with the time, it with one more crash
-- @include queue
local body, crashes = queue_crashes(ARGV[1])
return {queue_id(ARGV[1]) or false, queue_rank(ARGV[1]), queue_stamp(ARGV[1], ARGV[2]),
  body and queue_crashed(body, crashes + 1) or false}
""",
)


@pytest.mark.parametrize(
    "message",
    [
        TaskMessage(id=random_id(), task="t", queue="q", args=[], kwargs={}),
        TaskMessage(
            id=random_id(),
            task="a.b",
            queue="email",
            args=[1, "x", None],
            kwargs={"k": [{}]},
            priority=-100,
        ),
        TaskMessage(
            id=random_id(),
            task="t",
            queue="q",
            args=["é\u2028"],
            kwargs={},
            priority=100,
            backend="other",
        ),
        TaskMessage(
            id=random_id(),
            task="t",
            queue="q",
            args=[],
            kwargs={},
            priority=7,
            flow=FlowStep(workflow="f" * 32, step=2, kids=(), input=3),
        ),
        TaskMessage(
            id=random_id(),
            task="t",
            queue="q",
            args=[],
            kwargs={},
            priority=-3,
            scheduled_for=5,
            retries=2,
            crashes=1,
        ),
    ],
    ids=["plain", "lowest", "highest", "step", "retried"],
)
def test_the_queue_library_reads_and_writes_what_task_message_encodes(
    r: redis.Redis, message: TaskMessage
) -> None:
    """Every script that makes a task ready goes through lib/queue.lua: its reading of a
    payload's id and priority, and its writing of the enqueue time and of a crash, agree
    with TaskMessage's encoding for every shape a message can take."""
    task_id, ranked, stamped, crashed = QUEUE_LIBRARY(r, [], [message.encode(), 1234], raw=True)
    assert task_id.decode() == message.id
    assert ranked == rank(message.priority)
    first = not message.retries and not message.crashes
    expected = dataclasses.replace(message, enqueued_at=1234) if first else message
    assert TaskMessage.decode(stamped) == expected
    assert TaskMessage.decode(crashed) == dataclasses.replace(message, crashes=message.crashes + 1)


def test_the_queue_library_reads_no_id_or_priority_in_what_is_not_a_task(r: redis.Redis) -> None:
    task_id, ranked, stamped, crashed = QUEUE_LIBRARY(r, [], ["not a task", 1], raw=True)
    assert (task_id, ranked, stamped, crashed) == (None, rank(0), b"not a task", None)


def test_enqueue_ranks_by_priority_then_order(r: redis.Redis) -> None:
    urgent = redis_task(name="tests.test_task_store.urgent", queue="test", priority=10)(
        tasks.record.func
    )
    tasks.record.enqueue("first")
    urgent.enqueue("urgent")
    tasks.record.enqueue("second")
    order = [TaskMessage.decode(raw).args[0] for raw in r.zrange(ready_key("test"), 0, -1)]
    assert order == ["urgent", "first", "second"]
    assert int(r.get(counter_key(home("test"))) or 0) == 3


def take(worker_id: str, queues: list[str]) -> bytes | None:
    """Register a worker and take one task for it, as a worker's first fetch does."""
    worker = WorkerStore(worker_id, queues, move_delayed=False)
    worker.beat(60_000, json.dumps({"queues": queues}))
    return worker.take().payload


def test_an_enqueue_sends_the_settings_of_the_moment(r: redis.Redis) -> None:
    """queue_enqueue.lua's options are made once for the enqueues of a task: a setting
    changed since (here METRICS, which counts the tasks added) holds from the next one."""
    tasks.add.enqueue(1, 2)  # (its options made, METRICS off)
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "METRICS": True}):
        tasks.add.enqueue(1, 2)
    tasks.add.enqueue(1, 2)
    assert tasks_added("test") == 1


def test_an_execution_recovered_and_taken_again_records_nothing(r: redis.Redis) -> None:
    """The fence: a task put back without a crash counted (its payload unchanged) and
    taken again by the same worker; the first execution's late outcome changes nothing,
    the second's is recorded."""
    worker, queues = "paused.1.1.a", ["test"]
    store, side = TaskStore(tasks_client()), WorkerStore(worker, queues, move_delayed=False)
    handle = tasks.record.enqueue("once")

    def take_now() -> tuple[bytes, int]:
        side.beat(60_000, json.dumps({"queues": queues}))
        fetched = side.take()
        assert fetched.payload is not None
        return fetched.payload, fetched.now_ms

    def finish(payload: bytes, taken_ms: int, value: str) -> bool:
        delivery = Delivery(position=1, queue="test", payload=payload, attempt=taken_ms)
        outcome = Outcome(delivery=delivery, task_id=handle.id, kind="ok", data=json.dumps(value))
        return side.record(outcome).recorded

    payload, first_take = take_now()
    assert store.recover_worker(worker, queues, only_if_expired=False, max_crashes=0) == (1, 0)
    again, second_take = take_now()
    assert again == payload
    while second_take == first_take:  # two takes in one millisecond: take once more
        store.recover_worker(worker, queues, only_if_expired=False, max_crashes=0)
        again, second_take = take_now()
    assert not finish(payload, first_take, "late")
    assert get_result(handle.id).status is TaskResultStatus.RUNNING
    assert finish(again, second_take, "current")
    assert get_result(handle.id).return_value == "current"
    assert r.zcard(running_key(worker, "test")) == r.hlen(running_tasks_key(home("test"))) == 0


def test_recovery_puts_a_task_back_where_it_was_and_records_the_crash(r: redis.Redis) -> None:
    first = tasks.record.enqueue("first")
    tasks.record.enqueue("second")
    assert take("ghost.1.1.a", ["test"]) is not None
    assert get_result(first.id).status is TaskResultStatus.RUNNING
    tasks.record.enqueue("third")
    with override_settings(REDIS_COMPONENTS={"TASK_MAX_CRASHES": 3}):
        assert TaskStore(r).recover_worker(
            "ghost.1.1.a", ["test"], only_if_expired=False, max_crashes=3
        ) == (
            1,
            0,
        )
    order = [TaskMessage.decode(raw) for raw in r.zrange(ready_key("test"), 0, -1)]
    assert [(m.args[0], m.crashes) for m in order] == [("first", 1), ("second", 0), ("third", 0)]
    result = get_result(first.id)
    assert (result.status, result.worker_ids) == (TaskResultStatus.READY, ["ghost.1.1.a"])
    [error] = result.errors
    assert error.exception_class_path == "redis_components.exceptions.WorkerCrashed"
    assert "died while running it (1 of 3)" in error.traceback
    assert r.hlen(running_tasks_key(home("test"))) == 0


def test_a_task_found_after_too_many_crashes_is_dead_lettered_and_failed(r: redis.Redis) -> None:
    result = tasks.record.enqueue("poison")
    for attempt in range(2):
        worker_id = f"ghost.1.{attempt}.abc"
        assert take(worker_id, ["test"]) is not None
        counts = TaskStore(r).recover_worker(
            worker_id, ["test"], only_if_expired=False, max_crashes=2
        )
        assert counts == ((1, 0) if attempt == 0 else (0, 1))
    [entry] = r.lrange(dead_key("test"), 0, -1)
    letter = json.loads(entry)
    buried = TaskMessage.decode(letter["task"])
    assert (letter["reason"], buried.args, buried.crashes) == ("crashed", ["poison"], 1)
    assert "died while running it (2 of 2)" in letter["error"]
    assert r.zcard(ready_key("test")) == 0
    final = get_result(result.id)
    assert final.status is TaskResultStatus.FAILED
    assert final.worker_ids == ["ghost.1.0.abc", "ghost.1.1.abc"]
    assert final.finished_at is not None
    assert len(final.errors) == 2


@pytest.mark.parametrize("payload", [b"not a task", b"[1, 2, 3]", b'{"id":"ab"'])
def test_a_payload_that_is_not_a_task_is_dead_lettered_when_its_worker_dies(
    r: redis.Redis, payload: bytes
) -> None:
    r.zadd(ready_key("test"), {payload: 1})
    assert take("ghost.3.1.a", ["test"]) == payload
    assert TaskStore(r).recover_worker(
        "ghost.3.1.a", ["test"], only_if_expired=False, max_crashes=3
    ) == (
        0,
        1,
    )
    letter = json.loads(r.lindex(dead_key("test"), 0) or b"")
    assert letter["reason"] == "crashed"
    assert "not a task" in letter["error"]


def test_recovery_counts_crashes_in_the_payload_without_touching_the_arguments(
    r: redis.Redis,
) -> None:
    tricky = [',"crashes":9}', 1.0000000000000002, 12345678901234567890, "é"]
    tasks.record.enqueue(tricky)  # type: ignore[arg-type]
    for attempt in (1, 2):
        worker_id = f"ghost.2.{attempt}.abc"
        assert take(worker_id, ["test"]) is not None
        assert TaskStore(r).recover_worker(
            worker_id, ["test"], only_if_expired=False, max_crashes=5
        ) == (
            1,
            0,
        )
        [raw] = r.zrange(ready_key("test"), 0, 0)
        message = TaskMessage.decode(raw)
        assert (message.args, message.crashes) == ([tricky], attempt)


def test_recovery_skips_a_worker_whose_lease_is_alive(r: redis.Redis) -> None:
    tasks.record.enqueue("held")
    assert take("alive.1.1.a", ["test"]) is not None
    assert (
        TaskStore(r).recover_worker("alive.1.1.a", ["test"], only_if_expired=True, max_crashes=3)
        is None
    )
    assert r.zcard(running_key("alive.1.1.a", "test")) == 1
    assert r.zscore(leases_key(), "alive.1.1.a") is not None


def test_requeue_dead_gives_fresh_retries_and_leaves_what_is_not_a_task(
    redis_mode: str, r: redis.Redis
) -> None:
    result = tasks.record.enqueue("x")
    r.delete(ready_key("test"))
    tired = TaskMessage(
        id=result.id,
        task="tests.testapp.tasks.record",
        queue="test",
        args=["x"],
        kwargs={},
        retries=3,
    )
    r.hset(result_key(result.id), "status", "FAILED")
    r.rpush(dead_key("test"), json.dumps({"task": tired.encode(), "reason": "failed"}))
    r.rpush(dead_key("test"), json.dumps({"task": "undecodable", "reason": "undecodable"}))
    r.rpush(dead_key("test"), b"\xff not even json")
    assert TaskStore().requeue_dead("test") == (1, 2)
    [raw] = r.zrange(ready_key("test"), 0, -1)
    assert TaskMessage.decode(raw) == TaskMessage(
        id=result.id, task="tests.testapp.tasks.record", queue="test", args=["x"], kwargs={}
    )
    assert r.llen(dead_key("test")) == 2
    assert get_result(result.id).status is TaskResultStatus.READY
    assert TaskStore().requeue_dead("test") == (0, 2)


def test_purge_deletes_waiting_and_dead_tasks(redis_mode: str, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue_in(60, "b")
    r.rpush(dead_key("test"), "{}")
    r.zadd(ready_key("other"), {"{}": 1})
    assert TaskStore().purge("test") == 3
    assert r.exists(ready_key("test"), delayed_key("test"), dead_key("test")) == 0
    assert r.zcard(ready_key("other")) == 1


def test_an_enqueue_that_no_replica_acknowledged_says_so(r: redis.Redis) -> None:
    # The test server has no replica, so WAIT times out with 0 acknowledgements.
    settings = {"QUEUE_WAIT_REPLICAS": 1, "QUEUE_WAIT_TIMEOUT": 0.05}
    with override_settings(REDIS_COMPONENTS=settings), pytest.raises(TaskNotDurable) as info:
        tasks.record.enqueue("not durable")
    assert "0 of 1 replicas" in str(info.value)
    [payload] = r.zrange(ready_key("test"), 0, -1)
    assert json.loads(payload)["id"] == info.value.task_id  # enqueued all the same


def test_each_facet_serves_alone_and_the_store_is_all_of_them() -> None:
    handle = tasks.record.enqueue("alone")
    [record] = Inspection().task_records([handle.id])
    assert record is not None
    assert record.status.value == "READY"
    assert Queues().purge("test") == 1
    assert queue_stats(["test"])[0].ready == 0
    facets = (Queues, Leases, Inspection, Ticks, Flows)
    assert all(issubclass(TaskStore, facet) for facet in facets)
    # One owner per verb: no two facets define the same public method.
    owned = [name for facet in facets for name in vars(facet) if not name.startswith("_")]
    assert len(owned) == len(set(owned))
    assert not [name for name in vars(TaskStore) if not name.startswith("_")]
    # The package offers records and facets: a key or a script call is the store's own.
    from redis_components.tasks import store

    builders = [n for n in store.__all__ if n.endswith(("_key", "_call", "_keys"))]
    assert not builders, builders


def test_server_warnings_name_eviction_and_no_persistence(r: redis.Redis) -> None:
    assert any("keeps nothing on disk" in warning for warning in server_warnings(r))
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert any("'allkeys-lru'" in warning for warning in server_warnings(r))
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    r.config_set("appendonly", "yes")
    try:
        assert server_warnings(r) == []
    finally:
        r.config_set("appendonly", "no")


def test_cancel_removes_a_waiting_task_and_says_cancelled(r: redis.Redis) -> None:
    now = tasks.record.enqueue("now")
    later = tasks.record.enqueue_in(60, "later")
    assert cancel(now.id) == "cancelled"
    assert cancel(later.id) == "cancelled"
    assert r.zcard(ready_key("test")) == r.zcard(delayed_key("test")) == 0
    for result in (now, later):
        result.refresh()
        assert cancelled(result)
        assert result.is_finished
        with pytest.raises(ValueError, match="failed"):
            result.return_value  # noqa: B018
    with pytest.raises(TaskNotCancellable, match="already cancelled"):
        cancel(now.id)
    with pytest.raises(TaskNotCancellable, match="no such task"):
        cancel("0123abcd")
    with pytest.raises(InvalidInput):
        cancel("")


def test_cancel_finds_a_task_waiting_for_a_retry_or_after_a_crash(r: redis.Redis) -> None:
    result = tasks.record.enqueue("crashed")
    assert take("ghost.7.1.a", ["test"]) is not None
    TaskStore(r).recover_worker("ghost.7.1.a", ["test"], only_if_expired=False, max_crashes=3)
    [raw] = r.zrange(ready_key("test"), 0, -1)
    assert TaskMessage.decode(raw).crashes == 1  # its payload changed
    assert cancel(result.id) == "cancelled"
    assert r.zcard(ready_key("test")) == 0


def test_unique_tasks_are_enqueued_once_per_window_by_concurrent_enqueuers(
    r: redis.Redis,
) -> None:
    def enqueue_many() -> None:
        ids = {tasks.unique_record.enqueue("same").id for _ in range(20)}
        tasks.unique_record.enqueue("other")
        assert len(ids) == 1
        r.sadd("{test}:unique-ids", *ids)

    run_processes(enqueue_many, [()] * 8)
    assert r.zcard(ready_key("test")) == 2
    [first] = r.smembers("{test}:unique-ids")
    assert get_result(first.decode()).args == ["same"]
    assert tasks.record.enqueue("same").id != first.decode()  # other tasks are not unique


def test_a_finished_task_cannot_be_cancelled(r: redis.Redis) -> None:
    result = tasks.record.enqueue("done")
    Worker(["test"], burst=True).run()
    with pytest.raises(TaskNotCancellable, match="it has finished"):
        cancel(result.id)


def test_a_cancelled_unique_task_does_not_block_an_equal_enqueue(r: redis.Redis) -> None:
    first = tasks.unique_record.enqueue("once")
    assert cancel(first.id) == "cancelled"
    again = tasks.unique_record.enqueue("once")
    assert again.id != first.id
    assert again.status is TaskResultStatus.READY
    assert tasks.unique_record.enqueue("once").id == again.id  # unique again from then on
    assert r.zcard(ready_key("test")) == 1
    assert Worker(["test"], burst=True).run() == 1
    assert get_result(again.id).status is TaskResultStatus.SUCCESSFUL


def test_a_unique_task_being_terminated_does_not_block_an_equal_enqueue(r: redis.Redis) -> None:
    running = tasks.unique_record.enqueue("long")
    assert take("ghost.8.1.a", ["test"]) is not None
    assert tasks.unique_record.enqueue("long").id == running.id  # still unique while it runs
    assert cancel(running.id, terminate=True) == "terminating"
    assert tasks.unique_record.enqueue("long").id != running.id


def test_finished_tasks_are_counted_per_minute(r: redis.Redis) -> None:
    for label in ("a", "b"):
        tasks.record.enqueue(label)
    assert take("counter.1.1.a", ["test"]) is not None
    Worker(["test"], burst=True).run()
    [key] = r.keys(f"{home('test')}stats:*")
    counts = {field.decode().split(":")[1]: int(n) for field, n in r.hgetall(key).items()}
    assert counts == {"processed": 1}
    assert 0 < r.pttl(key) <= 25 * 3600 * 1000


# -- each script's builder against the script's header -------------------------------


def header_numbers(script: str, section: str) -> list[int]:
    """The numbers of the items a script's header lists in ``section`` (KEYS or ARGV):
    ``3)``, not the open-ended ``7...)`` of a repeated part."""
    header = itertools.takewhile(
        lambda line: line.startswith("--"), load(script).source.splitlines()
    )
    text, current = {"KEYS": "", "ARGV": ""}, ""
    for line in header:
        body = line[2:].strip()
        for name in ("KEYS:", "ARGV:", "Returns:"):
            if body.startswith(name):
                current, body = name[:-1], body.removeprefix(name)
        if current in text:
            text[current] += f" {body}"
    item = r"(?<![\w.])(?<!ARGV )(?<!KEYS )(\d+)\)"  # not "(ARGV 3)", a reference to one
    return [int(number) for number in re.findall(item, text[section])]


def _message(n: int) -> TaskMessage:
    return TaskMessage(id=f"{n:032x}", task="t", queue=f"q{n}", args=[n], kwargs={}, priority=n)


def _outcome() -> Outcome:
    delivery = Delivery(position=1, queue="q0", payload=b"{}", attempt=1000)
    return Outcome(delivery=delivery, task_id="ab", kind="ok", data="1", seconds=0.1)


def _claims(n: int) -> list[TickClaim]:
    return [
        TickClaim(
            schedule=f"s{i}", tick=1, following=2, run=True, message=_message(i), payload="{}"
        )
        for i in range(n)
    ]


def _adding(n: int) -> Adding:
    return Adding(
        message=_message(n), payload="{}", due=NOW, limit=0, shares=1, unique_key="", unique_ms=0
    )


# Each builder with one and with two of whatever its script repeats (queues, entries...).
BUILDERS: dict[str, Callable[[int], scripts.Call]] = {
    "queue_enqueue": lambda n: enqueue_call(_adding(n)),
    "queue_enqueue_many": lambda n: enqueue_many_call(home("q"), [_adding(i) for i in range(n)]),
    "queue_fetch": lambda n: fetch_call(
        worker_id="w",
        worker_keys=fetch_keys("w", [f"q{i}" for i in range(n)]),
        mode="take",
        outcome=_outcome(),
        hour=1,
    ),
    "queue_metadata": lambda n: metadata_call(task_id="ab", attempt="1 w", metadata="{}"),
    "queue_put_back": lambda n: put_back_call(
        worker_id="w",
        queue="q",
        held=Fetched(payload=b"{}", position=1, next_ms=0, recorded=True, now_ms=1),
        task_id="ab",
    ),
    "queue_heartbeat": lambda n: heartbeat_call(
        worker_id="w",
        lease_ms=1,
        info="{}",
        queues=[f"q{i}" for i in range(n)],
        lead=True,
        running_ids=[f"{i:032x}" for i in range(n)],
    ),
    "queue_renew": lambda n: renew_call(worker_ids=[f"w{i}" for i in range(n)], lease_ms=1),
    "queue_recover": lambda n: recover_call(
        worker_id="w",
        queues=[f"q{i}" for i in range(n)],
        tasks={f"{i:032x}": None for i in range(n)},
        only_if_expired=True,
        max_crashes=1,
    ),
    "queue_requeue_dead": lambda n: requeue_dead_call(
        queue="q", entries=[(b"{}", _message(i)) for i in range(n)], head=home("q")
    ),
    "queue_cancel": lambda n: cancel_call(
        task_id="ab", queue="q", payload=b"{}", unique=unique_key("d", home("q")), terminate=True
    ),
    "queue_purge": lambda n: purge_call(queue="q", head=home("q")),
    "queue_health": lambda n: health_call(queue="q", head=home("q")),
    "queue_forget": lambda n: forget_call(names=[f"q{i}" for i in range(n)], hours=[1, 2]),
    "entry_heads": lambda n: entry_heads_call(key="k", first=0, last=1, start_bytes=1, end_bytes=1),
    "schedule_claim": lambda n: claim_call(claims=_claims(n)),
    "queue_migrate": lambda n: migrate_call(
        move=Move(
            old_id="ab",
            old_entry=b"{}",
            task_id="ab",
            entry="{}",
            into=ready_key("q"),
            wakes=ready_key("q"),
            score=1.0,
            fields={},
            keep_ms=0,
            unique_key="",
            unique_ms=0,
        )
    ),
}


def test_every_script_of_the_task_system_has_a_builder() -> None:
    ours = {name for name in scripts.available() if name.startswith(("queue_", "schedule_"))}
    assert ours | {"entry_heads"} == set(BUILDERS)


@pytest.mark.parametrize("script", sorted(BUILDERS))
def test_each_builder_fills_the_keys_and_arguments_its_script_numbers(script: str) -> None:
    """The items a header numbers 1) to N) are exactly the fixed part of what its builder
    sends: what grows from one repeated item to two is the repeated part, the rest must
    be N long. (Its queues share one home: a script's keys are in one.)"""
    with split_homes(False):
        one, two = BUILDERS[script](1), BUILDERS[script](2)
    assert one[0] is two[0] is load(script)
    for section, index in (("KEYS", 1), ("ARGV", 2)):
        numbers = header_numbers(script, section)
        assert numbers == list(range(1, len(numbers) + 1)), (script, section, numbers)
        repeated = len(two[index]) - len(one[index])
        assert len(one[index]) - repeated == len(numbers), (script, section)


def test_workflows_and_requeued_dead_letters_wait_for_the_replicas(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Creating a workflow and requeueing dead letters WAIT for QUEUE_WAIT_REPLICAS as an
    enqueue does: with no replica to acknowledge, each says so, and its tasks are queued
    all the same."""
    tasks.fail_now.enqueue("dead")
    Worker(["test"], burst=True).run()
    settings = {"QUEUE_WAIT_REPLICAS": 1, "QUEUE_WAIT_TIMEOUT": 0.05}
    with override_settings(REDIS_COMPONENTS=settings):
        with pytest.raises(TaskNotDurable) as info:
            chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
        assert "0 of 1 replicas" in str(info.value)
        assert get_workflow(info.value.task_id).status == "RUNNING"  # enqueued all the same
        assert TaskStore().requeue_dead("test") == (1, 0)
    assert "1 dead letters of 'test' were requeued, but 0 of 1 replicas" in caplog.text
    # The workflow's first step, the requeued task.
    assert sum(r.zcard(ready_key("test", head)) for head in layout.queue_homes("test")) == 2


def test_lib_result_lists_the_fields_the_store_reads() -> None:
    """lua/lib/result.lua's header, the store's RESULT_FIELDS and the fields its
    readers (replies.py) ask for agree."""
    source = (scripts.LUA_DIR / "lib" / "result.lua").read_text("utf-8")
    header = source.split("-- The fields of the HASH:", 1)[1].split("\n\n", 1)[0]
    assert re.findall(r"^--   (\w+)", header, re.M) == list(RESULT_FIELDS)
    read = re.findall(r'fields(?:\.get)?[\[(]"(\w+)"', inspect.getsource(replies.task_record))
    assert read
    assert set(read) <= set(RESULT_FIELDS)


def test_every_way_a_task_goes_writes_only_the_result_fields(r: redis.Redis) -> None:
    """Enqueued now, later or unique; done, retried, failed, crashed, requeued from its
    dead letter, cancelled: each result hash holds RESULT_FIELDS only, and each field
    but "workflow" (a cross-home workflow cancel: test_workflows.py), "metadata"
    (saved by a task: test_task_metadata.py), "progress" (test_task_progress.py) and
    "trace" (kept with tracing on: test_tracing.py) is written."""
    handles = [
        tasks.record.enqueue("done"),
        tasks.retry_once.enqueue("retried"),
        tasks.fail.enqueue("failed"),
        tasks.unique_record.enqueue("unique"),
        tasks.add.enqueue(1, 2),
    ]
    later = tasks.record.enqueue_in(3600, "later")
    cancel(later.id)
    with running_worker(["test"]):
        wait_until(lambda: queue_stats(["test"])[0].dead == 1)
        wait_until(lambda: get_result(handles[1].id).status == TaskResultStatus.SUCCESSFUL)
    assert TaskStore().requeue_dead("test") == (1, 0)
    taken = take("gone.1.1.a", ["test"])  # the failed one again, then its worker dies
    assert taken is not None
    assert WorkerStore("gone.1.1.a", ["test"]).put_back(max_crashes=5) == (1, 0)
    written: set[str] = set()
    for handle in [*handles, later]:
        fields = {name.decode() for name in r.hkeys(result_key(handle.id))}
        assert fields <= set(RESULT_FIELDS), handle
        written |= fields
    assert written == set(RESULT_FIELDS) - {"workflow", "metadata", "progress", "trace"}


# The parts of queue_fetch.lua, each alone: lib/move.lua, lib/take.lua, lib/record.lua.
LIB = "{lib}:"
MOVE_LIBRARY = scripts.compose(
    "move_library",
    """-- KEYS: 1) an enqueue counter, then a lane (lib/queue.lua's queue_lane)
-- ARGV: 1) the time (ms)
-- Returns: move_due's wait, and the ready ZSETs it woke
-- @include move
local wait, woken = move_due(2, 1, KEYS[1], tonumber(ARGV[1]))
return {wait, woken}
""",
)


def test_move_due_moves_what_is_due_by_priority_and_says_when_the_next_is(
    r: redis.Redis,
) -> None:
    keys = [f"{LIB}counter", f"{LIB}ready:q", f"{LIB}delayed:q", f"{LIB}t", f"{LIB}d"]
    due = [(0, 100), (5, 200), (0, 300)]  # (priority, due at)
    messages = [
        TaskMessage(id=random_id(), task="t", queue="q", args=[i], kwargs={}, priority=p)
        for i, (p, _) in enumerate(due)
    ]
    r.zadd(keys[2], {m.encode(): at for m, (_, at) in zip(messages, due, strict=True)})
    assert MOVE_LIBRARY(r, keys, [250], raw=True) == [50, [keys[1].encode()]]
    assert [TaskMessage.decode(p).args[0] for p in r.zrange(keys[1], 0, -1)] == [1, 0]
    assert MOVE_LIBRARY(r, keys, [299], raw=True) == [1, []]  # nothing due
    assert MOVE_LIBRARY(r, keys, [300], raw=True) == [-1, []]  # not empty: no wake-up
    assert r.zcard(keys[1]) == 3


TAKE_LIBRARY = scripts.compose(
    "take_library",
    """-- KEYS: 1) the HASH of running tasks, then two lanes (lib/queue.lua's queue_lane)
-- ARGV: 1) the time (ms)  2) "ahead" or ""  3) the payload of a task held ahead in the
--       first lane that starts now ("" for none), with the score 7
-- Returns: what take_next returns (started: 1 or 0)
-- @include take
local o = {worker = 'w', ahead = ARGV[2] == 'ahead', start_payload = ARGV[3], start_score = '7'}
local payload, position, score, wait, started = take_next(o, 2, 2, KEYS[1], false, '{lib}:',
  nil, tonumber(ARGV[1]), -1, ARGV[3] ~= '' and 1 or 0)
return {payload, position, score, wait, started and 1 or 0}
""",
)


def test_take_next_takes_from_the_first_queue_with_a_task(r: redis.Redis) -> None:
    kinds = ("ready", "delayed", "taken", "dead")
    keys = [f"{LIB}run", *(f"{LIB}{kind}:{lane}" for lane in "ab" for kind in kinds)]
    first, second = (
        TaskMessage(id=random_id(), task="t", queue="b", args=[], kwargs={}) for _ in range(2)
    )
    one, two = first.encode().encode(), second.encode().encode()
    r.zadd(keys[5], {one: 10, two: 20})
    held = TaskMessage(id=random_id(), task="t", queue="a", args=[], kwargs={}).encode().encode()
    r.zadd(keys[3], {held: -7})
    # The task held ahead is in another lane: its start is the caller's.
    assert TAKE_LIBRARY(r, keys, [1000, "ahead", held], raw=True) == [one, 2, b"10", -1, 0]
    assert r.zrange(keys[7], 0, -1, withscores=True) == [(one, -10.0)]
    assert r.hget(keys[0], first.id) == b"1000 w"
    r.zadd(keys[1], {two: 5})
    r.zrem(keys[5], two)
    assert TAKE_LIBRARY(r, keys, [1001, "", held], raw=True) == [two, 1, b"5", -1, 1]
    assert r.zrange(keys[3], 0, -1, withscores=True) == [(two, 5.0), (held, 7.0)]
    assert TAKE_LIBRARY(r, keys, [1002, "", ""], raw=True) == [None, 0, 0, -1, 0]


RECORD_LIBRARY = scripts.compose(
    "record_library",
    """-- KEYS: 1) the HASH of running tasks  2) a result hash  3) per-minute counts
--       4) totals, then a lane (lib/queue.lua's queue_lane)
-- ARGV: 1) the options (queue_fetch.lua's)  2) the payload  3) the data  4) the time
-- Returns: 1 when it recorded the outcome, 0 when not
-- @include record
local o = cjson.decode(ARGV[1])
o.payload, o.data = ARGV[2], ARGV[3]
return record_outcome(o, 5, KEYS[1], KEYS[2], KEYS[3], KEYS[4], '{lib}:', false,
  tonumber(ARGV[4])) and 1 or 0
""",
)


KEYS_LIBRARY = scripts.compose(
    "keys_library",
    """-- KEYS: none
-- ARGV: 1) a home's head  2) a queue  3) a limit's key  4) a worker id  5) a task id
-- Returns: each name lib/keys.lua makes of them
-- @include keys
local base, queue, key, worker, id = unpack(ARGV)
local ready = keys_name(base, 'ready', queue)
return {keys_base(keys_name(base, 'counter'), 'counter'), ready, keys_queue_of(base, ready),
  keys_name(base, 'delayed', queue), keys_name(base, 'result', id),
  keys_name(base, 'counter'), keys_name(base, 'limits'), keys_name(base, 'limits_waiting'),
  keys_name(base, 'totals'),
  keys_name(base, 'limit_held', key), keys_name(base, 'limit_wait', key),
  keys_name(base, 'limit_tat', key), keys_name(base, 'limit_turns', key),
  keys_name(base, 'limit_every', key), keys_name(base, 'limit_runs', worker)}
""",
)


def test_lua_names_each_key_as_the_store_does(r: redis.Redis) -> None:
    head, queue, key, worker, task_id = "rc:queue:{tasks:a1b2}:", "mail:é", "acct:7", "w.1.2", "ab"
    named = KEYS_LIBRARY(r, [], [head, queue, key, worker, task_id], raw=True)
    assert [name.decode() for name in named] == [
        head,
        layout.ready_key(queue, head),
        queue,
        layout.delayed_key(queue, head),
        layout.result_key(task_id, head),
        layout.counter_key(head),
        layout.limits_key(head),
        layout.limits_waiting_key(head),
        layout.totals_key(head),
        layout.limit_held_key(head, key),
        layout.limit_wait_key(head, key),
        layout.limit_tat_key(head, key),
        layout.limit_turns_key(head, key),
        layout.limit_every_key(head, key),
        layout.limit_runs_key(head, worker),
    ]
    with pytest.raises(redis.ResponseError, match="no key is named nothing"):
        scripts.compose(
            "keys_unknown",
            "-- KEYS: none\n-- ARGV: none\n-- Returns: an error\n-- @include keys\n"
            "return keys_name('h:', 'nothing', 'x')",
        )(r, [], [])


def test_record_outcome_records_only_the_attempt_it_is_of(r: redis.Redis) -> None:
    message = TaskMessage(id=random_id(), task="t", queue="q", args=[], kwargs={})
    payload = message.encode().encode()
    keys = [f"{LIB}{name}" for name in ("run", "result", "stats", "totals", "r", "d", "t", "l")]
    r.zadd(keys[6], {payload: 1})
    r.hset(keys[0], message.id, "1000 w")
    options = {"worker": "w", "id": message.id, "outcome": "ok", "keep": 60_000, "first": True}
    options["done"] = 1
    with pytest.raises(redis.ResponseError, match='an outcome needs "attempt"'):
        RECORD_LIBRARY(r, keys, [json.dumps(options), payload, "3", 61_000])
    late = json.dumps(options | {"attempt": "999"})  # an earlier attempt's
    assert RECORD_LIBRARY(r, keys, [late, payload, "3", 61_000]) == 0
    assert (r.zcard(keys[6]), r.exists(keys[1])) == (1, 0)
    assert (
        RECORD_LIBRARY(r, keys, [json.dumps(options | {"attempt": "1000"}), payload, "3", 61_000])
        == 1
    )
    assert r.hgetall(keys[1]) == {
        b"status": b"SUCCESSFUL",
        b"return_value": b"3",
        b"started_at": b"1000",
        b"last_attempted_at": b"1000",
        b"finished_at": b"61000",
        b"workers": b"w",
        b"message": payload,
    }
    assert (r.zcard(keys[6]), r.exists(keys[0])) == (0, 0)
    assert r.hgetall(keys[2]) == {b"1:processed": b"1"}
    # With metrics, a run too short to count a microsecond (its "micros" left out, as 0).
    r.zadd(keys[6], {payload: 1})
    with_metrics = {**options, "first": False, "queue": "q", "bucket": "0.005", "attempt": "1"}
    assert RECORD_LIBRARY(r, keys, [json.dumps(with_metrics), payload, "3", 62_000]) == 1
    assert r.hgetall(keys[3]) == {b"q:processed:0.005": b"1", b"q:us": b"0"}
