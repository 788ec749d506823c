"""Queues in homes of their own (on the suite's cluster, the homes of these queues are
on different masters): a worker takes, records, beats and recovers over several homes,
and no script crosses a home (the cluster refuses any that crosses slots)."""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone
from redis.crc import key_slot

from conftest import CLUSTER
from conftest import cancelled as is_cancelled
from redis_components import cancel, chain, get_result, get_workflow, group, redis_task
from redis_components.connection import (
    OneConnection,
    get_client,
    is_cluster,
    node_client,
    server_of,
)
from redis_components.embedded import EmbeddedCluster, EmbeddedRedis
from redis_components.exceptions import (
    InvalidInput,
    QueueFull,
    TaskNotDurable,
    TaskResultDoesNotExist,
)
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.lease import description
from redis_components.tasks.messages import TaskMessage, task_id_of
from redis_components.tasks.schedules import Claim, Scheduler, build
from redis_components.tasks.status import home_stats, queue_stats, running_tasks
from redis_components.tasks.store import (
    Fetched,
    Outcome,
    TaskStore,
    TickClaim,
    WorkerStore,
    partitions,
    placement,
    worker_store,
)
from redis_components.tasks.store.calls import tick_enqueue_call
from redis_components.tasks.store.layout import (
    home,
    lease_copy_key,
    leases_key,
    noted_counts,
    own_homes,
    queue_homes,
    queues_key,
    rank,
    ready_key,
    registry,
    released_key,
    result_key,
    settled_key,
    split_homes,
    task_home,
    tasks_client,
    waiting_key,
)
from redis_components.tasks.store.worker_store import runs
from redis_components.tasks.waker import Waker
from redis_components.tasks.worker import Worker
from redis_components.testing import crashed_worker
from tests.processes import WorkerProcess, running_worker, wait_until
from tests.testapp import tasks

# (In-process workers run tasks, which close Django's stale database connections.)
pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")

# Three queues whose homes are in each third of the slots: on the suite's 3-master
# cluster, each on a master of its own.
QUEUES = ["first", "reports", "third"]
WORKER = "homes-w"


@pytest.fixture(autouse=True)
def split() -> Iterator[None]:
    before = home("first")
    with split_homes():
        yield
    assert home("first") == before, "the layout is the server's again"


def client_at(head: str) -> redis.Redis:
    return tasks_client(head)


@pytest.fixture
def held() -> Iterator[Callable[[str], OneConnection]]:
    """A connection held for each home, as a worker's loop holds them."""
    connections: dict[str, OneConnection] = {}
    yield lambda head: connections.setdefault(head, OneConnection(client_at(head)))
    for connection in connections.values():
        connection.close()


def enqueue(queue: str, *args: object) -> str:
    return tasks.record.using(queue_name=queue).enqueue(*args).id


def worker(queues: list[str] = QUEUES) -> WorkerStore:
    store = WorkerStore(WORKER, queues, move_delayed=False, client=client_at)
    store.beat(60_000, description(queues))
    return store


def listening(
    heard: list[set[str] | None],
    queues: list[str] = QUEUES,
    *,
    client: Callable[[str], Any] = client_at,
    move_delayed: bool = False,
) -> WorkerStore:
    """A worker's store (registered by :func:`worker`) whose takes hear the wake-ups
    put in ``heard`` (one per take)."""
    worker(queues)
    return WorkerStore(
        WORKER,
        queues,
        move_delayed=move_delayed,
        client=client,
        heard=lambda: heard.pop(0) if heard else set(),
    )


def ok(store: WorkerStore, fetched: Fetched) -> Outcome:
    """The success of the task ``store`` took: ``fetched``."""
    delivery = store.delivery(fetched)
    task_id = task_id_of(delivery.payload)
    return Outcome(delivery=delivery, task_id=task_id, kind="ok", data="null")


def test_each_queue_has_a_home_of_its_own_that_its_task_ids_name() -> None:
    heads = [home(queue) for queue in QUEUES]
    assert len({*heads, registry()}) == 4
    task_id = enqueue("reports", "x")
    assert len(task_id) == 36
    assert task_home(task_id) == home("reports")
    assert task_home("0" * 32) == registry()  # (an id written before homes were split)
    if is_cluster(get_client()):
        nodes = {node_client(get_client(), lease_copy_key(head)) for head in heads}
        assert len(nodes) == 3, "each of the three queues' homes is on a master of its own"
    # Consecutive queues of one home make one run.
    assert [run.queues for run in runs(WORKER, ["first", "first", "third"])] == [
        ["first", "first"],
        ["third"],
    ]


def test_a_worker_takes_from_its_queues_homes_in_their_order() -> None:
    third, second = enqueue("third", "c"), enqueue("reports", "b")
    store = worker()
    assert not store.may_take_ahead
    fetched = store.take()
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (2, second)
    # The outcome is recorded in its own home, with the take from the next one.
    after = store.take(ok(store, fetched))
    assert after.recorded
    assert (after.position, task_id_of(after.payload or b"")) == (3, third)
    assert get_result(second).status is TaskResultStatus.SUCCESSFUL
    # Nothing left: the last outcome is recorded, and no task comes.
    last = store.take(ok(store, after))
    assert last.recorded
    assert (last.payload, last.position) == (None, 0)
    assert get_result(third).status is TaskResultStatus.SUCCESSFUL


def scripts_run() -> int:
    """How many scripts the servers of the homes have run (since their stats were reset)."""
    heads = [home(queue) for queue in QUEUES] + [registry()]
    nodes = {id(node): node for node in (node_client(get_client(), f"{h}x") for h in heads)}
    stats = [node.info("commandstats") for node in nodes.values()]
    return sum(found.get(name, {}).get("calls", 0) for found in stats for name in SCRIPT_COMMANDS)


SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")


def test_a_busy_worker_leaves_out_the_homes_it_found_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_store, "EMPTY_FOR", 60.0)
    heard: list[set[str] | None] = []
    store = listening(heard)
    ids = [enqueue("third", n) for n in range(4)]
    fetched = store.take()  # the first two homes are found empty
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (3, ids[0])

    def take() -> Fetched:
        nonlocal fetched
        before = scripts_run()
        fetched = store.take(ok(store, fetched))
        return dataclasses.replace(fetched, read_ms=scripts_run() - before)

    # One script a task while it works on the third queue.
    assert (take().read_ms, task_id_of(fetched.payload or b"")) == (1, ids[1])
    # A wake-up from the first queue's home: it is looked in first again.
    first = enqueue("first", "first")
    heard.append({ready_key("first")})
    after = take()
    assert (after.position, task_id_of(after.payload or b"")) == (1, first)
    assert after.read_ms == 2  # the take there, and the outcome recorded in the third's
    # A task whose wake-up was not heard waits until the home is looked in again...
    second = enqueue("reports", "reports")
    after = take()
    assert (after.position, task_id_of(after.payload or b"")) == (3, ids[2])
    # ...when the wake-ups may have been missed (a new subscription), or EMPTY_FOR is over.
    heard.append(None)
    after = take()
    assert (after.position, task_id_of(after.payload or b"")) == (2, second)
    after = take()
    assert (after.position, task_id_of(after.payload or b"")) == (3, ids[3])
    monotonic = time.monotonic
    monkeypatch.setattr(worker_store, "_now", lambda: monotonic() + 61)
    last = take()
    assert (last.payload, last.position, last.read_ms) == (None, 0, 3)  # each home looked in
    assert all(get_result(task_id).status is TaskResultStatus.SUCCESSFUL for task_id in ids)


def test_the_waker_says_which_homes_wake_ups_it_heard() -> None:
    channels = [ready_key(queue) for queue in QUEUES]
    waker = Waker(channels)
    try:
        assert waker.heard() == set()  # not subscribed yet
        waker.wait(tasks_client(), 0)  # subscribes
        assert waker.heard() is None  # subscribed since the last call
        assert waker.heard() == set()
        enqueue("third", "x")  # the queue was empty: its channel is told
        heard: set[str] = set()

        def hears() -> bool:
            heard.update(waker.heard() or ())
            return bool(heard)

        wait_until(hears)
        assert heard == {ready_key("third")}
        # Heard by another thread (a slot's take) than the loop's, which waits: the
        # loop is woken, for the task may be more than that take can run.
        enqueue("first", "y")
        heard.clear()
        thread = threading.Thread(target=lambda: wait_until(hears))
        thread.start()
        thread.join()
        assert heard == {ready_key("first")}
        began = time.monotonic()
        waker.wait(tasks_client(), 30)
        assert time.monotonic() - began < 10
    finally:
        waker.close()


def test_a_slots_read_that_loses_the_subscription_leaves_it_to_the_loop() -> None:
    """A slot thread's heard() that finds the subscription lost says None (wake-ups may
    be missed) and does not try Redis again; the loop's next wait makes a new one."""
    server = EmbeddedRedis().start()
    waker = Waker(["wake-test"])
    try:
        waker.wait(server.client(), 0)  # subscribes
        assert waker.heard() is None  # (subscribed since)
        server.stop()
        said: list[set[str] | None] = []
        thread = threading.Thread(target=lambda: said.extend([waker.heard(), waker.heard()]))
        thread.start()
        thread.join()
        assert said == [None, None]
        reads = []
        drain = waker._drain
        waker._drain = lambda: reads.append(1) or drain()  # type: ignore[method-assign]
        assert waker.heard() is None
        assert reads == [], "no read while the subscription is lost"
        server = EmbeddedRedis().start()
        waker.wait(server.client(), 0)  # the loop's next wait subscribes again
        assert waker.heard() is None  # (subscribed since)
        client = server.client()

        def hears() -> bool:  # (a confirmation read late says None again: publish anew)
            client.publish("wake-test", "1")
            return "wake-test" in (waker.heard() or ())

        wait_until(hears)
    finally:
        waker.close()
        server.stop()


def test_a_home_whose_take_said_call_again_at_once_is_not_left_out() -> None:
    """A take that set tasks aside on their limits (or left due delayed tasks) says to
    call again at once: that home is not empty, and no wake-up would say it has tasks."""
    store = listening([])
    [first, *_] = runs(WORKER, QUEUES)
    nothing = Fetched(payload=None, position=0, next_ms=0, recorded=False, now_ms=1)
    store._found(first, "take", nothing)
    assert store._open_run() == first
    store._found(first, "take", dataclasses.replace(nothing, next_ms=-1))
    assert store._open_run() != first


@pytest.mark.parametrize("move_delayed", [False, True])
def test_a_take_that_leaves_out_every_home_never_says_look_again_now(
    monkeypatch: pytest.MonkeyPatch, move_delayed: bool
) -> None:
    monkeypatch.setattr(worker_store, "EMPTY_FOR", 5.0)
    store = listening([], move_delayed=move_delayed)
    assert store.take().payload is None  # each home found empty
    before = scripts_run()
    fetched = store.take()
    assert scripts_run() == before  # each left out
    assert (fetched.payload, fetched.position) == (None, 0)
    assert 0 < fetched.next_ms <= 5_000  # until a home is looked in again


def succeeded(task_id: str) -> bool:
    return get_result(task_id).status is TaskResultStatus.SUCCESSFUL


def test_an_idle_worker_process_wakes_for_a_task_in_any_of_its_homes(
    start_worker: Callable[..., Any],
) -> None:
    """One blocking wait across the homes: a task enqueued in any of them wakes the
    idle worker (its heartbeat, which would also end the wait, is 60 s away)."""
    worker = start_worker(*QUEUES, environment={"RC_SPLIT_HOMES": "1"}, TASK_HEARTBEAT_INTERVAL=60)
    for queue in ["third", "first", "reports", "third"]:
        task_id = enqueue(queue, queue)
        wait_until(lambda t=task_id: succeeded(t), worker.output, timeout=20)


def test_the_heartbeat_keeps_a_lease_copy_in_each_home_and_recovery_is_per_home() -> None:
    ids = [enqueue(queue, queue) for queue in QUEUES]
    store = worker()
    for _ in QUEUES:
        assert store.take().payload is not None
    for head in {home(queue) for queue in QUEUES}:
        assert client_at(head).zscore(lease_copy_key(head), WORKER) is not None
    # Alive: nothing is recovered.
    tasks_store = TaskStore()
    assert tasks_store.recover_worker(WORKER, QUEUES, only_if_expired=True, max_crashes=3) is None
    # Taken for dead: each home puts back its task, the crash shared by the three.
    assert tasks_store.recover_worker(WORKER, QUEUES, only_if_expired=False, max_crashes=3) == (
        3,
        0,
    )
    for task_id, queue in zip(ids, QUEUES, strict=True):
        result = get_result(task_id)
        assert result.status is TaskResultStatus.READY
        [error] = result.errors
        assert "and 2 other tasks" in error.traceback
        assert client_at(home(queue)).zcard(ready_key(queue)) == 1
        assert client_at(home(queue)).zscore(lease_copy_key(home(queue)), WORKER) is None
    # Its lease is gone everywhere: a take gets nothing until it registers again.
    assert store.take().position == -1
    store.beat(60_000, description(QUEUES))
    assert store.take().position == 1


def test_a_home_whose_lease_copy_looks_alive_keeps_every_home_as_it_is() -> None:
    ids = [enqueue(queue, queue) for queue in QUEUES]
    store = worker()
    for _ in QUEUES:
        assert store.take().payload is not None
    # The registry's lease ran out, but the copy in the third queue's home was renewed
    # later (or on a node whose clock is behind): no home is recovered, so that the
    # pass that recovers them counts each task's company in every home.
    tasks_client().zadd(leases_key(), {WORKER: 1})
    for queue in QUEUES[:2]:
        client_at(home(queue)).zadd(lease_copy_key(home(queue)), {WORKER: 1})
    tasks_store = TaskStore()
    assert tasks_store.recover_worker(WORKER, QUEUES, only_if_expired=True, max_crashes=3) is None
    assert {get_result(task_id).status for task_id in ids} == {TaskResultStatus.RUNNING}
    assert tasks_client().zscore(leases_key(), WORKER) == 1
    client_at(home("third")).zadd(lease_copy_key(home("third")), {WORKER: 1})
    assert tasks_store.recover_worker(WORKER, QUEUES, only_if_expired=True, max_crashes=3) == (
        3,
        0,
    )
    for task_id in ids:
        result = get_result(task_id)
        assert result.status is TaskResultStatus.READY
        [error] = result.errors
        assert "and 2 other tasks" in error.traceback  # shared: charged to none
    assert tasks_client().zscore(leases_key(), WORKER) is None


def test_the_supervisor_renews_the_copies_and_terminate_flags_are_read_per_home() -> None:
    task_id = enqueue("third", "x")
    store = worker()
    fetched = store.take()
    assert task_id_of(fetched.payload or b"") == task_id
    head = home("third")
    before = client_at(head).zscore(lease_copy_key(head), WORKER)
    assert TaskStore().renew_leases([WORKER], 120_000, QUEUES) == 1
    after = client_at(head).zscore(lease_copy_key(head), WORKER)
    assert before is not None
    assert after is not None
    assert after > before
    TaskStore().cancel(task_id, terminate=True)
    beat = store.beat(60_000, description(QUEUES), running_ids=[task_id])
    assert beat.terminate == [task_id]


def test_a_worker_runs_the_tasks_of_three_homes_and_the_readers_read_each() -> None:
    ids = [enqueue(queue, queue) for queue in QUEUES for _ in range(3)]
    store = TaskStore()
    counts = store.queue_counts({queue: [] for queue in QUEUES})
    assert [counts[queue].ready for queue in QUEUES] == [3, 3, 3]
    Worker(QUEUES, burst=True, scheduler=False).run()
    assert [get_result(task_id).status for task_id in ids] == [TaskResultStatus.SUCCESSFUL] * 9
    counts = store.queue_counts({queue: [] for queue in QUEUES})
    assert [counts[queue].ready for queue in QUEUES] == [0, 0, 0]
    _, minutes = store.minute_counts(QUEUES, 1)
    assert [sum(m["processed"] for m in minutes[q].values()) for q in QUEUES] == [3, 3, 3]
    assert store.running_records() == []


def test_a_take_that_moves_delayed_tasks_moves_those_of_every_home() -> None:
    later = timezone.now() + datetime.timedelta(milliseconds=100)
    delayed = tasks.record.using(queue_name="third", run_after=later).enqueue("late").id
    first = enqueue("first", "now")
    time.sleep(0.2)
    store = WorkerStore(WORKER, QUEUES, client=client_at)  # (its takes move delayed tasks)
    store.beat(60_000, description(QUEUES))
    fetched = store.take()
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (1, first)
    # The task due in the last home was moved to its queue by the same take.
    assert TaskStore().queue_counts({"third": []})["third"].ready == 1
    fetched = store.take(ok(store, fetched))
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (3, delayed)


def test_a_ticks_task_is_enqueued_once_in_its_queues_home() -> None:
    """A schedule's tick enqueues its task in the queue's home, then is claimed in the
    registry's; a scheduler killed between the two leaves the tick due, and the next
    claim's enqueue is refused (the task's id is the tick's)."""
    store = TaskStore()
    _, now = store.schedule_ticks()
    schedules, claims = [], []
    for name in ("plain", "killed"):
        every = build(
            name,
            task_name="tests.testapp.tasks.record",
            queue="third",
            priority=0,
            backend=None,
            every=60,
            args=[name],
        )
        tick = every.next_after(now) - 60_000  # the last tick: due
        store.start_schedule(name, tick)
        schedules.append(every)
        claims.append(Claim.of(every, tick, now))
    # The enqueue of a scheduler killed before its claim of the second schedule's tick.
    killed = claims[1]
    script, script_keys, args = tick_enqueue_call(
        TickClaim(
            schedule="killed",
            tick=killed.tick,
            following=killed.following,
            run=True,
            message=killed.message,
            payload=killed.payload,
        )
    )
    script(client_at(home("third")), script_keys, args)
    assert Scheduler(schedules).run_due() > 0
    assert store.queue_counts({"third": []})["third"].ready == 2
    lasts = store.schedule_records()[1]
    for claim in claims:
        assert lasts[claim.schedule.name] == (claim.tick, claim.message.id)
        assert task_home(claim.message.id) == home("third")
        assert get_result(claim.message.id).status is TaskResultStatus.READY
    # Claimed: no tick is claimed again.
    assert Scheduler(schedules).run_due() > 0
    assert store.queue_counts({"third": []})["third"].ready == 2


def test_a_tick_another_scheduler_skipped_enqueues_nothing_in_its_queues_home() -> None:
    store = TaskStore()
    _, now = store.schedule_ticks()
    every = build(
        "skipped",
        task_name="tests.testapp.tasks.record",
        queue="third",
        priority=0,
        backend=None,
        every=60,
        args=["x"],
    )
    tick = every.next_after(now) - 60_000
    store.start_schedule("skipped", tick)
    claim = Claim.of(every, tick, now)

    def tick_claim(run: bool) -> TickClaim:
        return TickClaim(
            schedule="skipped",
            tick=tick,
            following=claim.following,
            run=run,
            message=claim.message,
            payload=claim.payload,
        )

    assert store.claim_ticks([tick_claim(run=False)]) == [True]  # another scheduler
    assert store.claim_ticks([tick_claim(run=True)]) == [False]
    assert store.queue_counts({"third": []})["third"].ready == 0
    with pytest.raises(TaskResultDoesNotExist):
        get_result(claim.message.id)


def test_cancel_requeue_purge_and_forget_work_in_a_queues_home() -> None:
    store = TaskStore()
    kept, cancelled = enqueue("reports", "kept"), enqueue("reports", "cancelled")
    assert store.cancel(cancelled) == "cancelled"
    assert is_cancelled(get_result(cancelled))
    total, waiting = store.waiting("reports", "ready", 0, 10)
    assert total == 1
    assert [task.task_id for task in waiting] == [kept]
    # A dead letter of the third queue's home is read and requeued there.
    failed = tasks.fail_now.using(queue_name="third").enqueue("dead").id
    Worker(["third"], burst=True, scheduler=False).run()
    [letter] = store.dead_letters("third", 0, -1)
    assert (letter.reason, failed in letter.task) == ("failed", True)
    assert store.requeue_dead("third") == (1, 0)
    assert get_result(failed).status is TaskResultStatus.READY
    assert store.purge("third") == 1
    # An idle queue is forgotten; one that holds a task, or finished one lately, is not.
    store.client.sadd(queues_key(), *QUEUES)
    assert store.forget_queues(QUEUES) == 1
    assert store.known_queue_names() == {"reports", "third"}


def test_the_readers_send_one_pipeline_to_each_node() -> None:
    """However many homes a node holds, a reader sends it one pipeline (on a single
    server: one for all three queues' homes; on the cluster: one per master)."""
    sent: list[int] = []

    class Node:
        def __init__(self, client: redis.Redis) -> None:
            self.client = client

        def pipeline(self, transaction: bool) -> Any:
            sent.append(id(self.client))
            return self.client.pipeline(transaction=transaction)

    nodes: dict[int, Node] = {}

    def node_of(head: str) -> Node:
        client = client_at(head)
        return nodes.setdefault(id(client), Node(client))

    counts = TaskStore(at=node_of).queue_counts({queue: [] for queue in QUEUES})
    assert [counts[queue].ready for queue in QUEUES] == [0, 0, 0]
    masters = len({id(client_at(home(queue))) for queue in QUEUES})
    assert masters == (3 if is_cluster(get_client()) else 1)
    assert sorted(sent) == sorted({id(client_at(home(queue))) for queue in QUEUES})


def test_rc_queues_and_the_running_tasks_read_every_home() -> None:
    enqueue("first", "a")
    enqueue("third", "b")
    enqueue("third", "c")
    worker = crashed_worker(QUEUES, take=2)
    assert {task.task_id for task in running_tasks()} == set(worker.task_ids)
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    lines = out.getvalue().splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1 : lines.index("")]}
    # ready, oldest ready, delayed, on limits, in progress, dead
    assert rows["first"][:6] == ["0", "-", "0", "0", "1", "0"]
    assert rows["third"][:1] + rows["third"][2:6] == ["1", "0", "0", "1", "0"]
    assert rows["third"][1].endswith("s")  # (the ready one's wait, read in its home)
    assert any(worker.id in line for line in lines)


def test_a_worker_moves_the_tasks_an_earlier_release_left_into_their_homes() -> None:
    """An upgrade: the tasks an earlier release left in the registry's home (32-digit
    ids), those a worker of it held when it died among them, move into their queues'
    homes when a worker starts, and run there; their ids find them."""
    with split_homes(False):  # (as the earlier release wrote them)
        old = [tasks.record.using(queue_name=queue).enqueue(queue).id for queue in QUEUES]
        later = timezone.now() + datetime.timedelta(milliseconds=200)
        old.append(tasks.record.using(queue_name="third", run_after=later).enqueue("late").id)
        crashed = crashed_worker(QUEUES, take=1)  # (a worker of that release, killed)
    new = enqueue("first", "new")
    assert [len(task_id) for task_id in old] == [32] * 4
    assert crashed.task_ids == [old[0]]
    store = TaskStore()
    assert store.holds_tasks(registry(), QUEUES, crashed.id)
    # Its tasks go back where they were, and move on at once.
    recovered = store.recover_worker(crashed.id, QUEUES, only_if_expired=False, max_crashes=3)
    assert recovered == (1, 0)
    assert not store.holds_tasks(registry(), QUEUES, crashed.id)
    counts = store.queue_counts({queue: [] for queue in QUEUES})
    assert [(counts[q].ready, counts[q].delayed) for q in QUEUES] == [(2, 0), (1, 0), (1, 1)]
    time.sleep(0.3)
    Worker(QUEUES, burst=True, scheduler=True).run()
    records = store.task_records([*old, new])
    done = [(r.status, len(r.id)) for r in records if r]
    assert done == [(TaskResultStatus.SUCCESSFUL, 36)] * 5
    assert [r.id[4:] for r in records if r][:4] == old
    assert [get_result(task_id).status for task_id in old] == [TaskResultStatus.SUCCESSFUL] * 4
    assert get_result(old[0]).errors[0].traceback.startswith("its worker died while running it")
    _, minutes = store.minute_counts(QUEUES, 1)
    processed = {q: sum(m.get("processed", 0) for m in minutes[q].values()) for q in QUEUES}
    assert processed == {"first": 2, "reports": 1, "third": 2}
    assert store.migrate_layout(QUEUES) == 0  # (nothing is left to move)


def test_a_move_keeps_order_due_times_uniqueness_and_dead_letters() -> None:
    """What the registry's home held is where it was in its new home: the ready tasks in
    their order, the delayed ones due when they were, a unique task still unique, the
    dead letters before the home's own; and the old ids cancel and requeue them."""
    due = timezone.now() + datetime.timedelta(hours=1)
    with split_homes(False):
        low = tasks.record.using(queue_name="first", priority=-5).enqueue("low").id
        high = tasks.record.using(queue_name="first", priority=5).enqueue("high").id
        delayed = tasks.record.using(queue_name="first", run_after=due).enqueue("later").id
        unique = tasks.unique_record.using(queue_name="reports").enqueue("one").id
        failed = tasks.fail_now.using(queue_name="third").enqueue("old").id
        Worker(["third"], burst=True, scheduler=False).run()
    newer = tasks.fail_now.using(queue_name="third").enqueue("new").id
    Worker(["third"], burst=True, scheduler=False).run()
    store = TaskStore()
    assert store.migrate_layout(QUEUES) == 4  # (the dead letter moved as that worker started)
    assert store.migrate_layout(QUEUES) == 0
    _, ready = store.waiting("first", "ready", 0, 10)
    assert [w.task_id[4:] for w in ready] == [high, low]
    _, later = store.waiting("first", "delayed", 0, 10)
    assert [w.task_id[4:] for w in later] == [delayed]
    assert abs(later[0].due_ms - due.timestamp() * 1000) < 2  # type: ignore[operator]
    again = tasks.unique_record.using(queue_name="reports").enqueue("one").id
    assert again[4:] == unique  # (the equal task waiting is the moved one)
    letters = store.dead_letters("third", 0, -1)
    assert [(failed in d.task, newer in d.task) for d in letters] == [(True, False), (False, True)]
    assert cancel(low) == "cancelled"
    assert is_cancelled(get_result(low))
    assert store.requeue_dead("third") == (2, 0)
    assert get_result(failed).status is TaskResultStatus.READY
    assert not store.holds_tasks(registry(), QUEUES, WORKER)


def test_an_enqueue_under_an_id_of_no_queues_home_is_refused() -> None:
    message = TaskMessage(id="ab" * 16, task="t", queue="first", args=[], kwargs={})
    with pytest.raises(InvalidInput, match="names no queue's home: make it with new_task_id"):
        TaskStore().enqueue(message, message.encode())
    assert TaskStore().queue_counts({"first": []})["first"].ready == 0


def test_workers_starting_at_once_move_each_task_once(caplog: pytest.LogCaptureFixture) -> None:
    with split_homes(False):
        old = [tasks.record.using(queue_name="first").enqueue(str(n)).id for n in range(300)]
    stranger = json.dumps(
        {"id": "ab" * 18, "task": "t", "queue": "first", "args": [], "kwargs": {}}
    )
    tasks_client().zadd(ready_key("first", registry()), {b"not a task": 1, stranger: 2})
    moved: list[int] = []
    threads = [
        threading.Thread(target=lambda: moved.append(TaskStore().migrate_layout(["first"])))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(moved) >= 300  # (each counts what it wrote or found written)
    total, waiting = TaskStore().waiting("first", "ready", 0, 1000)
    assert total == 300
    assert sorted(w.task_id[4:] for w in waiting) == sorted(old)
    assert "not a task's entry" in caplog.text  # (left where it is, and said)
    assert "is not of 32 digits" in caplog.text


def test_a_worker_of_one_home_takes_ahead_on_that_homes_connection(
    held: Callable[[str], OneConnection],
) -> None:
    """Take-ahead (one run) sends its take and reads its reply on the held connection of
    the queue's home, which is not the registry's."""
    first, second = enqueue("reports", "a"), enqueue("reports", "b")
    # (As a worker: its lease's store on its clients, its loop's on held connections.)
    worker(["reports"])
    store = WorkerStore(WORKER, ["reports"], move_delayed=False, client=held)
    assert store.may_take_ahead
    assert task_id_of(store.take().payload or b"") == first
    ahead = store.receive(store.take_ahead(None))
    assert task_id_of(ahead.payload or b"") == second


def test_a_worker_of_several_homes_takes_ahead_where_a_take_looks_first(
    monkeypatch: pytest.MonkeyPatch, held: Callable[[str], OneConnection]
) -> None:
    monkeypatch.setattr(worker_store, "EMPTY_FOR", 60.0)
    heard: list[set[str] | None] = []
    store = listening(heard, client=held)
    assert not worker().may_take_ahead  # (it hears no wake-ups: it leaves out no home)
    one, two = enqueue("reports", "1"), enqueue("reports", "2")
    fetched = store.take()  # the first queue's home is found empty, and left out
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (2, one)
    assert store.may_take_ahead
    ahead = store.receive(store.take_ahead(ok(store, fetched)))
    assert (ahead.recorded, ahead.position, task_id_of(ahead.payload or b"")) == (True, 2, two)
    assert succeeded(one)
    # Found empty by a take ahead: left out too.
    third = enqueue("third", "3")
    last = store.receive(store.take_ahead(ok(store, ahead)))
    assert (last.recorded, last.payload) == (True, None)
    fetched = store.take()
    assert (fetched.position, task_id_of(fetched.payload or b"")) == (3, third)
    # A wake-up from the first queue's home: the take ahead looks there, after the
    # outcome of the third queue's task is recorded in its own home.
    first = enqueue("first", "first")
    heard.append({ready_key("first")})
    assert store.may_take_ahead
    ahead = store.receive(store.take_ahead(ok(store, fetched)))
    assert (ahead.recorded, ahead.position, task_id_of(ahead.payload or b"")) == (True, 1, first)
    assert succeeded(two)
    assert succeeded(third)


SPLIT = {"RC_SPLIT_HOMES": "1"}  # (the worker processes' homes, as this process's)


def masters(server: EmbeddedRedis | EmbeddedCluster) -> list[redis.Redis]:
    if isinstance(server, EmbeddedRedis):
        return [server.client()]
    nodes = [node.client() for node in server.nodes]
    return [node for node in nodes if node.info("replication")["role"] == "master"]


def test_tasks_of_three_homes_run_once_each_with_the_work_spread_over_the_masters(
    redis_server: EmbeddedRedis | EmbeddedCluster, start_worker: Callable[..., WorkerProcess]
) -> None:
    """3,000 tasks over three queues whose homes are on the three masters, two worker
    processes: every task runs once, and each master runs 20 %-45 % of the commands."""
    ids = [tasks.add.using(queue_name=QUEUES[i % 3]).enqueue(i, 1).id for i in range(3000)]
    nodes = masters(redis_server)
    for node in nodes:
        node.config_resetstat()
    workers = [start_worker(*QUEUES, "--burst", environment=SPLIT) for _ in range(2)]
    for worker in workers:
        assert worker.wait(120) == 0, worker.output()
    store = TaskStore()
    records = store.task_records(ids)
    ran = [(record.status, len(record.worker_ids)) for record in records if record]
    assert ran == [(TaskResultStatus.SUCCESSFUL, 1)] * 3000
    if len(nodes) > 1:
        shares = command_shares(nodes)
        assert all(0.20 <= share <= 0.45 for share in shares), shares


def command_shares(nodes: list[redis.Redis]) -> list[float]:
    """Each node's share of the commands run since its stats were reset (less ours)."""
    calls = [
        sum(
            stats["calls"]
            for name, stats in node.info("commandstats").items()
            if name not in ("cmdstat_info", "cmdstat_config")
        )
        for node in nodes
    ]
    return [count / sum(calls) for count in calls]


def test_a_worker_killed_with_tasks_in_flight_in_three_homes_loses_none(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """kill -9 of a worker running a task of each of three homes (on the cluster: three
    masters): each runs once more, under the next worker, and nothing is lost."""
    ids = [tasks.record.using(queue_name=queue).enqueue(queue, pause=1.0).id for queue in QUEUES]
    settings = {"TASK_HEARTBEAT_INTERVAL": 0.5}
    worker = start_worker(*QUEUES, "--threads", "3", environment=SPLIT, **settings)
    wait_until(lambda: r.hlen("{test}:runs") == 3, worker.output)
    worker.kill_all()
    after = start_worker(*QUEUES, "--threads", "3", environment=SPLIT, **settings)
    wait_until(lambda: all(map(succeeded, ids)), after.output)
    counted = {label.decode(): int(n) for label, n in r.hgetall("{test}:runs").items()}
    assert counted == dict.fromkeys(QUEUES, 2)
    for task_id in ids:
        [error] = get_result(task_id).errors
        assert "and 2 other tasks" in error.traceback  # the crash was shared, not charged


def test_a_workflow_over_queues_of_three_homes_runs_each_step_once_in_its_queues_home(
    r: redis.Redis,
) -> None:
    """A workflow's steps live in their queues' homes (their ids name them), and their
    outcomes are carried to the workflow's home: a worker of the three queues runs them
    in order, each once, and a fan-in gets every result."""
    members = [tasks.follow.using(queue_name=queue).s(queue) for queue in QUEUES]
    workflow = chain(
        tasks.member.using(queue_name="third").s("start"),
        group(members),
        tasks.total.using(queue_name="reports").s(),
    ).enqueue()
    steps = workflow.steps()
    homes = [home(queue) for queue in ["third", *QUEUES, "reports"]]
    assert [task_home(step.task_id) for step in steps] == homes
    with running_worker(QUEUES):
        assert workflow.wait(30) == "SUCCESSFUL"
    counted = {label.decode(): int(n) for label, n in r.hgetall("{test}:runs").items()}
    assert counted == {"start": 1, **dict.fromkeys(QUEUES, 1), "total": 1}
    given = [json.loads(entry) for entry in r.lrange("{test}:given:total", 0, -1)]
    assert given == [[f"start>{queue}" for queue in QUEUES]]


def test_an_outcome_left_in_its_homes_outbox_is_carried_once(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that records a step's outcome in its queue's home and loses Redis (or
    dies) before it carries it to the workflow leaves it in the home's outbox: any
    process carries it (a worker's heartbeat does), once, however often it is carried."""
    workflow = chain(
        tasks.member.using(queue_name="first").si("a"),
        tasks.member.using(queue_name="third").si("b"),
    ).enqueue()
    first, second = (step.task_id for step in workflow.steps())
    store = worker(["first"])
    taken = store.take()
    assert taken.payload is not None
    assert task_id_of(taken.payload) == first

    def lost(self: TaskStore, task_id: str, *args: object, **kwargs: object) -> int:
        raise redis.ConnectionError("lost before it carried")

    with monkeypatch.context() as patched:
        patched.setattr(TaskStore, "carry_step", lost)
        assert store.record(ok(store, taken)).recorded
    assert f"could not carry the outcome of step {first}" in caplog.text
    outbox = settled_key(home("first"))
    assert client_at(home("first")).hexists(outbox, first)
    assert states(workflow) == ["QUEUED", "WAITING"]
    assert get_result(first).status is TaskResultStatus.SUCCESSFUL  # in its own home
    caplog.set_level("INFO", logger="redis_components.worker")
    fast = {**settings.REDIS_COMPONENTS, "TASK_HEARTBEAT_INTERVAL": 0.2}
    with override_settings(REDIS_COMPONENTS=fast), running_worker(["first"]):
        wait_until(lambda: states(workflow) == ["SUCCESSFUL", "QUEUED"])  # its heartbeat
    assert "carried 1 workflow entries left in an outbox since its last heartbeat" in caplog.text
    assert get_result(second).status is TaskResultStatus.READY
    assert not client_at(home("first")).hexists(outbox, first)
    # Carried again (a carrier that read it before it went): nothing changes.
    client_at(home("first")).hset(outbox, first, f"1 {workflow.id} {first} S null")
    assert carry_left(QUEUES) == 1
    assert states(workflow) == ["SUCCESSFUL", "QUEUED"]
    assert TaskStore().waiting("third", "ready", 0, 10)[0] == 1
    with running_worker(["third"]):
        assert workflow.wait(10) == "SUCCESSFUL"
    assert int(r.hget("{test}:runs", "b") or 0) == 1


def test_a_worker_that_stops_cleanly_leaves_its_outboxes_empty(r: redis.Redis) -> None:
    """A step's outcome carried to its workflow leaves its outbox entry to the next fetch
    in its home; the last one's goes when the worker stops, not when a worker of that
    home runs again."""
    workflow = chain(
        tasks.member.using(queue_name="first").si("a"),
        tasks.member.using(queue_name="third").si("b"),
    ).enqueue()
    assert Worker(["first", "third"], burst=True).run() == 2
    assert workflow.wait(10) == "SUCCESSFUL"
    assert TaskStore().outbox_entries(QUEUES) == set()


def test_a_released_step_left_in_the_workflows_outbox_is_enqueued_once(
    r: redis.Redis,
) -> None:
    """A step released to the workflows' outbox (by a workflow's creation, or a settle)
    whose carrier died before it reached its queue's home: any process enqueues it
    there, once, however often it is carried; a cancel meanwhile keeps it out."""
    tasks_store = TaskStore()

    def left_in_outbox(queue: str) -> tuple[Any, str, bytes]:
        """A workflow of one step of ``queue``, as if its release was never carried."""
        workflow = group([tasks.member.using(queue_name=queue).si(queue)]).enqueue()
        [step] = workflow.steps()
        message = tasks_store.queued_message(step.task_id)
        assert message is not None
        assert client_at(home(queue)).delete(result_key(step.task_id), ready_key(queue)) == 2
        assert client_at(home(queue)).hdel(waiting_key(home(queue)), step.task_id) == 1
        entry = f"{queue}\n{rank(0)}\n{message.encode()}".encode()
        r.hset(released_key(), step.task_id, entry)
        return workflow, step.task_id, entry

    workflow, task_id, entry = left_in_outbox("first")
    assert carry_left(["first"]) == 1
    assert tasks_store.waiting("first", "ready", 0, 10)[0] == 1
    r.hset(released_key(), task_id, entry)  # carried twice: enqueued once
    assert carry_left(["first"]) == 1
    assert tasks_store.waiting("first", "ready", 0, 10)[0] == 1
    with running_worker(["first"]):
        assert workflow.wait(10) == "SUCCESSFUL"
    # Cancelled while it waits in the outbox: it never reaches its queue.
    other, _, _ = left_in_outbox("third")
    assert other.cancel() == (1, 0)
    assert other.status == "CANCELLED"
    assert other.finished
    assert carry_left(["third"]) == 0
    assert tasks_store.waiting("third", "ready", 0, 10)[0] == 0


def test_a_release_left_in_the_outbox_never_enqueues_its_step_again(r: redis.Redis) -> None:
    """A copy of a step's release that its carrier left in the workflows' outbox (it died
    before deleting it) enqueues nothing more: not while the step waits, even once its
    result has expired (its payload waits in its home's ``flows:waiting``), and not
    after it ran (settling its outcome deleted the copy)."""
    workflow = group([tasks.member.using(queue_name="first").si("first")]).enqueue()
    [step] = workflow.steps()
    message = TaskStore().queued_message(step.task_id)
    assert message is not None
    entry = f"first\n{rank(0)}\n{message.encode()}".encode()
    r.hset(released_key(), step.task_id, entry)
    assert client_at(home("first")).delete(result_key(step.task_id)) == 1  # expired
    assert carry_left(["first"]) == 1
    assert not client_at(home("first")).exists(result_key(step.task_id))  # nothing written
    assert TaskStore().waiting("first", "ready", 0, 10)[0] == 1
    r.hset(released_key(), step.task_id, entry)  # left again, then the step runs
    with running_worker(["first"]):
        assert workflow.wait(10) == "SUCCESSFUL"
    assert not r.hexists(released_key(), step.task_id)
    assert client_at(home("first")).delete(result_key(step.task_id)) == 1  # expired
    carry_left(["first"])  # (what the outboxes hold: the step's outcome, settled already)
    assert TaskStore().waiting("first", "ready", 0, 10)[0] == 0


@pytest.mark.skipif(not CLUSTER, reason="a cluster's map of slots: the cluster's pass")
def test_a_call_told_moved_has_the_cluster_client_read_the_slots_again() -> None:
    """A process whose map of the slots is out of date (a node that served a task's
    home serves other slots now) is told MOVED by that node: the store's call raises
    it, and the next call reaches the node that serves the home now."""
    task_id = enqueue("first", "x")
    cluster: Any = get_client()
    slot = key_slot(result_key(task_id).encode())
    right = cluster.nodes_manager.slots_cache[slot]
    wrong = next(node for node in cluster.get_primaries() if node.name != right[0].name)
    cluster.nodes_manager.slots_cache[slot] = [wrong]  # as before a failover or a reshard
    with pytest.raises(redis.exceptions.MovedError):
        get_result(task_id)
    assert get_result(task_id).id == task_id
    assert cluster.nodes_manager.slots_cache[slot][0].name == right[0].name


def test_released_steps_are_carried_with_one_wait_per_node(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The steps a carry of the workflows' outbox releases go to their homes in one
    pipeline per node, with one ``WAIT`` there (``QUEUE_WAIT_REPLICAS``): with no
    replica to acknowledge, they all stay, and a later carry enqueues each once."""
    settings = {"QUEUE_WAIT_REPLICAS": 1, "QUEUE_WAIT_TIMEOUT": 0.05}
    members = [tasks.member.using(queue_name=queue).si(queue) for queue in QUEUES]
    with override_settings(REDIS_COMPONENTS=settings), pytest.raises(TaskNotDurable) as info:
        group(members).enqueue()
    waits = re.findall(r"Workflow steps released: (\d+), but 0 of 1 replicas", caplog.text)
    assert len(waits) == len({server_of(client_at(home(queue))) for queue in QUEUES})
    assert sum(int(count) for count in waits) == len(QUEUES)
    assert r.hlen(released_key()) == len(QUEUES)
    assert carry_left(QUEUES) == len(QUEUES)
    assert r.hlen(released_key()) == 0
    assert [TaskStore().waiting(queue, "ready", 0, 10)[0] for queue in QUEUES] == [1, 1, 1]
    with running_worker(QUEUES):
        assert get_workflow(info.value.task_id).wait(10) == "SUCCESSFUL"


def test_a_cancel_ends_a_workflow_whose_step_was_purged_and_completes_when_repeated(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel reaches a workflow's steps in their homes one by one: a purged step ends
    as cancelled there, so its workflow ends; and a canceller that died before it
    reached every step leaves the rest to the next cancel."""
    workflow = group([tasks.member.using(queue_name="first").si("a")]).enqueue()
    assert TaskStore().purge("first") == 1
    assert workflow.cancel() == (0, 0)
    assert workflow.finished
    assert states(workflow) == ["CANCELLED"]
    assert not client_at(home("first")).hlen(f"{home('first')}flows:waiting")

    workflow = group([tasks.member.using(queue_name=q).si(q) for q in QUEUES]).enqueue()
    cancel = TaskStore._cancel
    reached: list[str] = []

    def dies_after_one(self: TaskStore, task_id: str, **options: Any) -> int:
        if reached:
            raise redis.ConnectionError("the canceller lost Redis")
        reached.append(task_id)
        return cancel(self, task_id, **options)

    with monkeypatch.context() as patched:
        patched.setattr(TaskStore, "_cancel", dies_after_one)
        with pytest.raises(redis.ConnectionError):
            workflow.cancel()
    assert workflow.status == "CANCELLED"
    assert not workflow.finished
    with pytest.raises(InvalidInput, match="cancelled already"):
        workflow.cancel()  # (and it reaches the steps left)
    assert workflow.finished
    assert states(workflow) == ["CANCELLED"] * 3
    assert all(TaskStore().waiting(q, "ready", 0, 10)[0] == 0 for q in QUEUES)


def carry_left(queues: list[str]) -> int:
    """What a heartbeat carries of what the outboxes held at the one before."""
    store = TaskStore()
    return store.carry_left(store.outbox_entries(queues))


def states(workflow: Any) -> list[str]:
    return [step.state for step in workflow.steps()]


def test_a_fan_in_of_200_over_three_homes_runs_once_through_two_kill_9s(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The issue's proof in homes of their own: 200 members over queues on three masters,
    each delivered twice by hand, two worker processes killed -9 along the way: the
    callback runs once, with the 200 results in order."""
    members = [tasks.member.using(queue_name=QUEUES[i % 3]).s(f"m{i}", 0.01) for i in range(200)]
    handle = group(members).then(tasks.total.using(queue_name="reports").s()).enqueue()
    store = TaskStore()
    for step in handle.steps()[:-1]:  # a second delivery of each member (see test_workflows)
        message = store.queued_message(step.task_id)
        assert message is not None
        copy = dataclasses.replace(message, crashes=1, enqueued_at=None)
        store.enqueue(copy, copy.encode())
    worker = start_worker(*QUEUES, "-c", "2", environment=SPLIT)
    for after in (40, 120):
        wait_until(lambda after=after: r.hlen("{test}:runs") >= after, worker.output)
        [pid, *_] = [w.pid for w in TaskStore().workers()]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    assert handle.wait(60) == "SUCCESSFUL"
    given = [json.loads(entry) for entry in r.lrange("{test}:given:total", 0, -1)]
    assert given == [[f"m{i}" for i in range(200)]]
    wait_until(lambda: r.hlen("{test}:runs") == 201, worker.output)
    assert int(r.hget("{test}:runs", "total") or 0) == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


# -- a queue over several partitions ---------------------------------------------------

HOT = "hot"


@pytest.fixture
def hot_partitions() -> Iterator[None]:
    """The queue ``hot`` in 3 partitions (on the suite's cluster, one per master)."""
    changed = {**settings.REDIS_COMPONENTS, "QUEUE_PARTITIONS": {HOT: 3}}
    with override_settings(REDIS_COMPONENTS=changed):
        yield


@pytest.mark.usefixtures("hot_partitions")
def test_a_queue_with_partitions_has_a_home_in_each_third_of_the_slots() -> None:
    heads = own_homes(HOT)
    assert heads[0] == home(HOT)
    assert len(set(heads)) == 3 == partitions(HOT)
    thirds = {key_slot(lease_copy_key(head).encode()) * 3 // 16384 for head in heads}
    assert thirds == {0, 1, 2}
    assert queue_homes(HOT) == heads
    # An enqueue picks a partition by a hash of its random id: each gets about a third.
    ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(300)]
    shares = [sum(task_home(task_id) == head for task_id in ids) for head in heads]
    assert all(60 <= share <= 140 for share in shares), shares
    assert TaskStore().waiting(HOT, "ready", 0, 1000)[0] == 300  # read over the partitions
    if is_cluster(get_client()):
        nodes = {node_client(get_client(), lease_copy_key(head)) for head in heads}
        assert len(nodes) == 3, "each partition is on a master of its own"
    with split_homes(False):  # one server: one home, whatever the setting
        assert (own_homes(HOT), partitions(HOT)) == ([registry()], 1)


@pytest.mark.usefixtures("hot_partitions")
def test_a_worker_takes_from_every_partition_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_store, "ROTATE_EVERY", 0.0)  # the next partition each take
    ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(60)]
    store = worker([HOT, "first"])
    assert [run.queues for run in store._own] == [[HOT]] * 3 + [["first"]]
    assert (store.queue_at(3), store.queue_at(4)) == (HOT, "first")
    taken, finished = [], None
    for _ in range(60):
        fetched = store.take(finished)
        assert fetched.payload is not None
        assert store.queue_at(fetched.position) == HOT
        taken.append(task_id_of(fetched.payload))
        finished = ok(store, fetched)
    assert sorted(taken) == sorted(ids)
    # Each take starts at the next partition: no partition waits for the others.
    # (Each take then records the last outcome in another partition by a script of
    # its own: so takes move on only every ROTATE_EVERY, see the next test.)
    homes_taken = [task_home(task_id) for task_id in taken[:9]]
    assert all(len(set(homes_taken[i : i + 3])) == 3 for i in range(0, 9, 3)), homes_taken
    assert store.record(finished).recorded
    statuses = {get_result(task_id).status for task_id in ids}
    assert statuses == {TaskResultStatus.SUCCESSFUL}


@pytest.mark.usefixtures("hot_partitions")
def test_a_busy_worker_stays_in_a_partition_until_its_turn_moves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between two moves (ROTATE_EVERY), each take looks first where the last task came
    from: the outcome is recorded in the take's script, one script per task."""
    monkeypatch.setattr(worker_store, "ROTATE_EVERY", 60.0)
    for i in range(90):  # (its partition holds fewer than 6 by a chance of 2 in 10^10)
        tasks.record.using(queue_name=HOT).enqueue(str(i))
    store = worker([HOT])
    fetched = store.take()
    sent: list[str] = []  # the home of each script the takes send
    fetch = TaskStore.fetch
    monkeypatch.setattr(
        TaskStore,
        "fetch",
        lambda self, call, **kw: sent.append(call[1][0]) or fetch(self, call, **kw),
    )
    homes_taken = {task_home(task_id_of(fetched.payload or b""))}
    for _ in range(5):
        finished = ok(store, fetched)
        fetched = store.take(finished)
        homes_taken.add(task_home(task_id_of(fetched.payload or b"")))
    assert len(homes_taken) == 1
    assert len(sent) == 5, sent
    monkeypatch.setattr(worker_store, "_now", lambda: time.monotonic() + 60)
    for _ in range(2):  # (the take that finds the turn over moves the next one's)
        finished = ok(store, fetched)
        fetched = store.take(finished)
    assert task_home(task_id_of(fetched.payload or b"")) not in homes_taken


@pytest.mark.usefixtures("hot_partitions")
def test_a_partition_key_keeps_a_customers_tasks_in_one_partition_in_order(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    steps = [(customer, step) for step in range(20) for customer in ("ann", "bob", "cy")]
    ids = [tasks.customer_step.using(queue_name=HOT).enqueue(c, s).id for c, s in steps]
    for customer in ("ann", "bob", "cy"):
        mine = {task_home(i) for i, (c, _) in zip(ids, steps, strict=True) if c == customer}
        assert len(mine) == 1, "one customer's tasks share a partition"
    settings_changed = {"QUEUE_PARTITIONS": {HOT: 3}}
    worker = start_worker(HOT, "--burst", environment=SPLIT, **settings_changed)
    assert worker.wait(60) == 0, worker.output()
    assert f"serving {HOT} (3 partitions on " in worker.output()
    for customer in ("ann", "bob", "cy"):
        assert r.lrange(f"{{test}}:steps:{customer}", 0, -1) == [b"%d" % s for s in range(20)]


@pytest.mark.usefixtures("hot_partitions")
def test_unique_and_limited_tasks_of_a_partitioned_queue_meet_in_one_partition() -> None:
    first = tasks.unique_record.using(queue_name=HOT).enqueue("same")
    again = tasks.unique_record.using(queue_name=HOT).enqueue("same")
    assert again.id == first.id, "an equal unique task is a duplicate in any partition"
    # Every task counted against one limit key is in one partition: the limit is exact.
    limited = [tasks.per_customer.using(queue_name=HOT).enqueue("c9", str(i)).id for i in range(9)]
    assert len({task_home(task_id) for task_id in limited}) == 1
    assert TaskStore().cancel(first.id) == "cancelled"  # its unique key, in its partition, goes
    assert tasks.unique_record.using(queue_name=HOT).enqueue("same").id != first.id


@pytest.mark.usefixtures("hot_partitions")
def test_the_heartbeat_and_recovery_cover_every_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_store, "ROTATE_EVERY", 0.0)  # (takes from each partition)
    store = worker([HOT])
    for head in own_homes(HOT):
        assert raw_score(head) is not None, "a lease copy in each partition's home"
    ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(12)]
    held = [store.take() for _ in range(6)]
    assert len({task_home(task_id_of(f.payload or b"")) for f in held}) >= 2
    assert store.put_back() == (6, 0)
    assert TaskStore().waiting(HOT, "ready", 0, 100)[0] == 12
    assert all(get_result(task_id).status is TaskResultStatus.READY for task_id in ids)


def test_a_worker_connects_once_per_node_whatever_the_partitions_there(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue of 12 partitions: the worker's own clients and its loop's held
    connections are one per server (on the cluster, per master), not one per home."""
    monkeypatch.setattr(worker_store, "ROTATE_EVERY", 0.0)  # (takes from each partition)
    changed = {**settings.REDIS_COMPONENTS, "QUEUE_PARTITIONS": {HOT: 12}}
    with override_settings(REDIS_COMPONENTS=changed):
        heads = [*own_homes(HOT), registry()]
        servers = {server_of(tasks_client(head)) for head in heads}
        assert len(heads) == 13 > len(servers) == len(masters_of(get_client()))
        ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(120)]
        assert len({task_home(task_id) for task_id in ids}) == 12
        with running_worker([HOT]) as worker:
            wait_until(lambda: r.hlen("{test}:runs") == 120)
            assert len(worker._own_clients) == len(servers)
            assert len(worker._held_connections) == len(servers)


def masters_of(client: Any) -> list[Any]:
    """The masters of the cluster ``client``, or ``[client]`` for one server."""
    return list(client.get_primaries()) if is_cluster(client) else [client]


def raw_score(head: str) -> float | None:
    return tasks_client(head).zscore(lease_copy_key(head), WORKER)


@pytest.mark.usefixtures("hot_partitions")
def test_one_queue_of_three_partitions_spreads_its_work_over_the_masters(
    redis_server: EmbeddedRedis | EmbeddedCluster, start_worker: Callable[..., WorkerProcess]
) -> None:
    """3,000 tasks of one queue of three partitions, two worker processes: every task
    runs once, and each master runs 20 %-45 % of the commands."""
    ids = [tasks.add.using(queue_name=HOT).enqueue(i, 1).id for i in range(3000)]
    nodes = masters(redis_server)
    for node in nodes:
        node.config_resetstat()
    changed = {"QUEUE_PARTITIONS": {HOT: 3}}
    workers = [start_worker(HOT, "--burst", environment=SPLIT, **changed) for _ in range(2)]
    for process in workers:
        assert process.wait(120) == 0, process.output()
    records = TaskStore().task_records(ids)
    ran = [(record.status, len(record.worker_ids)) for record in records if record]
    assert ran == [(TaskResultStatus.SUCCESSFUL, 1)] * 3000
    if len(nodes) > 1:
        shares = command_shares(nodes)
        assert all(0.20 <= share <= 0.45 for share in shares), shares


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("customer:{nope}", "names {nope}, which is no argument of task"),
        ("customer:{0}", "{0} must name an argument of the task"),
        ("", "partition_key"),
    ],
)
def test_a_bad_partition_key_is_refused_where_the_task_is_defined(key: str, problem: str) -> None:
    def step(customer: str) -> None: ...

    with pytest.raises(InvalidInput, match=re.escape(problem)) as refused:
        redis_task(name="bad.partition", partition_key=key)(step)
    assert refused.value.field == "partition_key"


@pytest.mark.usefixtures("hot_partitions")
def test_a_schedules_ticks_and_a_workflows_steps_on_a_partitioned_queue() -> None:
    """A tick's task goes to the partition its key picks, as an enqueue's does; a
    workflow's step whose key names its input, which is not known at its enqueue, goes
    to one partition of its queue (at random), and runs there."""
    enqueued = tasks.customer_step.using(queue_name=HOT).enqueue("ann", 1).id
    every = build(
        "ann-steps",
        task_name="tests.testapp.tasks.customer_step",
        task=tasks.customer_step,
        queue=HOT,
        priority=0,
        backend=None,
        every=60,
        args=["ann", 2],
    )
    message, _ = every.message(1_000_000)
    assert task_home(message.id) == task_home(enqueued)
    assert every.message(1_000_000)[0].id == message.id  # the same tick, the same id
    flow = chain(tasks.follow.s("x", "first"), tasks.customer_step.using(queue_name=HOT).s(3))
    workflow = flow.enqueue()
    assert task_home(workflow.id) == registry()
    assert task_home(workflow.steps()[1].task_id) in own_homes(HOT)
    with running_worker(["test", HOT]):
        assert workflow.wait(10) == "SUCCESSFUL"


@pytest.mark.usefixtures("hot_partitions")
def test_a_partitioned_queues_limit_is_shared_by_its_partitions() -> None:
    changed = {**settings.REDIS_COMPONENTS, "TASK_QUEUE_LIMITS": {HOT: 4}}
    with override_settings(REDIS_COMPONENTS=changed):
        for step in range(2):  # one customer's tasks: one partition, whose share is 2
            tasks.customer_step.using(queue_name=HOT).enqueue("ann", step)
        with pytest.raises(QueueFull, match="its share of 4 waiting tasks") as full:
            tasks.customer_step.using(queue_name=HOT).enqueue("ann", 2)
        assert (full.value.queue, full.value.limit) == (HOT, 4)
        tasks.customer_step.using(queue_name=HOT).enqueue("bob", 0)  # (another partition)


@pytest.mark.usefixtures("hot_partitions")
def test_where_a_queues_tasks_are_partition_by_partition_next_to_its_share() -> None:
    """``rc_queues -v 2``: each partition, its node, what it holds against its share of
    the queue's bound (one customer's tasks fill one partition's share of 2 while the
    queue's count says 2 of 4)."""
    changed = {**settings.REDIS_COMPONENTS, "TASK_QUEUE_LIMITS": {HOT: 4}}
    with override_settings(REDIS_COMPONENTS=changed):
        for step in range(2):
            tasks.customer_step.using(queue_name=HOT).enqueue("ann", step)
        homes = home_stats(HOT)
        out = io.StringIO()
        call_command("rc_queues", "-v", "2", stdout=out)
    assert [(h.partition, h.of, h.bound) for h in homes] == [(1, 3, 2), (2, 3, 2), (3, 3, 2)]
    assert sorted(h.counts.waiting for h in homes) == [0, 0, 2]
    assert len({h.node for h in homes[:3]}) == (3 if is_cluster(get_client()) else 1)
    lines = out.getvalue().splitlines()
    first = lines.index("Where the tasks are (waiting: ready, delayed and on limits)")
    assert lines[first + 1].split() == [
        "queue",
        "partition",
        "node",
        "waiting",
        "bound",
        "in",
        "progress",
        "dead",
    ]
    rows = [line.split() for line in lines[first + 2 :] if line.startswith(f"{HOT} ")]
    assert rows == [
        [
            HOT,
            str(h.partition),
            "of",
            str(h.of),
            h.node,
            str(h.counts.waiting),
            str(h.bound) if h.bound else "-",
            "0",
            "0",
        ]
        for h in homes
    ]


@pytest.mark.django_db
@pytest.mark.usefixtures("hot_partitions")
def test_the_admins_queue_page_shows_its_partitions(admin_client: Any) -> None:
    tasks.customer_step.using(queue_name=HOT).enqueue("ann", 0)
    page = admin_client.get("/admin/redis_components/taskqueues/queue/", {"name": HOT})
    shown = page.content.decode()
    assert "Where its tasks are: 3 homes" in shown
    for partition in home_stats(HOT)[:3]:
        assert f"<code>{partition.node}</code>" in shown
    assert shown.count("of 3</td>") == 3
    one = admin_client.get("/admin/redis_components/taskqueues/queue/", {"name": "test"})
    assert "Where its tasks are" not in one.content.decode()  # (one home, nothing to say)


@pytest.mark.parametrize(("before", "after"), [(6, 3), (3, 6), (4, 1)])
def test_a_changed_count_of_partitions_hides_no_task(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, before: int, after: int
) -> None:
    """120 tasks enqueued in ``before`` partitions, then QUEUE_PARTITIONS says ``after``
    (a change of the setting, or a web process and a worker of two deploys): the
    readers count every task, and a worker of ``after`` partitions runs each once,
    saying where it found them."""
    with override_settings(REDIS_COMPONENTS=with_partitions(before)):
        ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(120)]
    with override_settings(REDIS_COMPONENTS=with_partitions(after)):
        stray = {task_home(task_id) for task_id in ids} - set(own_homes(HOT))
        assert stray, "tasks wait in homes that the new count has not"
        assert set(queue_homes(HOT)) >= stray
        assert TaskStore().waiting(HOT, "ready", 0, 1000)[0] == 120
        (stats,) = queue_stats([HOT])
        assert stats.ready == 120
        with running_worker([HOT]):
            wait_until(lambda: r.hlen("{test}:runs") == 120)
        records = TaskStore().task_records(ids)
        ran = [(record.status, len(record.worker_ids)) for record in records if record]
        assert ran == [(TaskResultStatus.SUCCESSFUL, 1)] * 120
    assert f"left in a home of {before} partitions" in caplog.text


def with_partitions(count: int) -> dict[str, Any]:
    return {**settings.REDIS_COMPONENTS, "QUEUE_PARTITIONS": {HOT: count}}


def test_a_worker_process_of_another_deploy_runs_the_tasks_of_every_count(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A rolling deploy: web processes add tasks to 6 partitions, a worker process
    that says 3 runs them all and says so."""
    with override_settings(REDIS_COMPONENTS=with_partitions(6)):
        ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(60)]
    worker = start_worker(HOT, "--burst", environment=SPLIT, QUEUE_PARTITIONS={HOT: 3})
    assert worker.wait(60) == 0, worker.output()
    assert r.hlen("{test}:runs") == 60
    assert {get_result(task_id).status for task_id in ids} == {TaskResultStatus.SUCCESSFUL}
    assert "left in a home of 6 partitions" in worker.output()


def test_a_count_no_process_notes_is_forgotten_once_its_partitions_are_empty(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(REDIS_COMPONENTS=with_partitions(6)):
        ids = [tasks.record.using(queue_name=HOT).enqueue(str(i)).id for i in range(30)]
    store = TaskStore()
    with override_settings(REDIS_COMPONENTS=with_partitions(3)):
        later = int(time.time() * 1000) + 1
        assert not store.forget_count(HOT, 6, later), "its partitions hold tasks"
        assert not store.forget_count(HOT, 6, later - 60_000), "noted since"
        assert set(noted_counts(fresh=True)[HOT]) == {6}
        # A worker forgets it once it is empty (and no process noted it for a while).
        monkeypatch.setattr(worker_store, "FORGET_AFTER_MS", 0)
        monkeypatch.setattr(worker_store, "STRAY_EVERY", 0.05)
        with running_worker([HOT]):
            wait_until(lambda: r.hlen("{test}:runs") == 30)
            wait_until(lambda: HOT not in noted_counts(fresh=True))
        assert {get_result(task_id).status for task_id in ids} == {TaskResultStatus.SUCCESSFUL}
        assert queue_homes(HOT) == own_homes(HOT)


@pytest.mark.usefixtures("hot_partitions")
def test_the_logs_say_how_many_partitions_a_queue_has_and_on_how_many_nodes() -> None:
    nodes = len(masters_of(get_client()))
    assert placement(HOT) == f"{HOT} (3 partitions on {nodes} node{'s' if nodes > 1 else ''})"
    assert placement("first") == "first"
