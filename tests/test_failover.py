"""Failovers: a master is killed mid-run, and a replica takes its place.

Behind Sentinel (a master, a replica and three sentinels; in the first pass), locks,
semaphores, task queues and chats carry on through the promoted replica; on a Redis
Cluster of three masters with a replica each (in the cluster's pass), the task queues
do, over a queue whose partitions are on every master. What a failover can lose is what
the master had not yet passed on to the replica; what the components acknowledged with
WAIT (a lock's ``wait_for_replicas``, the queue's ``QUEUE_WAIT_REPLICAS``) survives.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from django.test import override_settings

from conftest import CLUSTER
from redis_components import GroupChat, RedisLock, RedisSemaphore, get_client
from redis_components.connection import REDIS_DOWN
from redis_components.embedded import EmbeddedCluster, EmbeddedSentinelGroup
from redis_components.tasks.store.layout import split_homes
from tests.processes import WorkerProcess, wait_until
from tests.settings import caches, sentinel_caches
from tests.testapp import tasks

behind_sentinel = pytest.mark.skipif(
    CLUSTER, reason="the Sentinel failover test starts its own servers in the first pass"
)

TASKS = 60
GROUPS = itertools.count()


@pytest.fixture
def group(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedSentinelGroup]:
    group = EmbeddedSentinelGroup(replicas=1, sentinels=3, down_after_ms=1000)
    # A name of its own: django-redis keeps a pool per URL, which names the master.
    group.master_name = f"rc-master-{next(GROUPS)}"
    with group:
        caches = sentinel_caches(group.master_name, group.addresses)
        # Worker processes started by the test find the same sentinels.
        monkeypatch.setenv("RC_TEST_SENTINELS", json.dumps(group.addresses))
        monkeypatch.setenv("RC_TEST_SENTINEL_MASTER", group.master_name)
        with override_settings(CACHES=caches, REDIS_COMPONENTS={"QUEUE_WAIT_REPLICAS": 1}):
            yield group


def runs() -> dict[str, int]:
    return {k.decode(): int(v) for k, v in get_client().hgetall("{test}:runs").items()}


def elsewhere(action: Callable[[], object]) -> object:
    """Call ``action`` in another thread: another holder, not a nested acquisition."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(action()))
    thread.start()
    thread.join()
    assert result, "the other thread failed"
    return result[0]


def retrying(action: Callable[[], object], seconds: float = 20) -> object:
    """Call ``action`` until the client has found the new master (as an app would retry)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except (*REDIS_DOWN, redis.ReadOnlyError):
            assert time.monotonic() < deadline, "the client never reached the new master"
            time.sleep(0.1)


@pytest.fixture(params=[False, True], ids=["one home", "a home per queue"])
def homes(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The task system's layout: every queue in the registry's home, or each in its own
    (the worker processes are told by the environment)."""
    with split_homes(request.param):
        yield {"RC_SPLIT_HOMES": "1" if request.param else "0"}


@behind_sentinel
def test_locks_semaphores_queues_and_chats_carry_on_through_a_failover(
    group: EmbeddedSentinelGroup,
    homes: dict[str, str],
    start_worker: Callable[..., WorkerProcess],
) -> None:
    # Before: a replicated lock, a permit, tasks acknowledged by the replica, a chat.
    lock = RedisLock("failover", timeout=60, wait_for_replicas=1)
    held = lock.acquire()
    assert held is not None
    semaphore = RedisSemaphore("failover", limit=2, timeout=60)
    assert semaphore.acquire(blocking=False) is not None
    for n in range(TASKS):
        tasks.record.enqueue(f"t{n}", 0.02)  # each returns once the replica has it
    chat_id = GroupChat(accounts=True).create("alice", ["bob"], "before")
    worker = start_worker("test", environment=homes, TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: len(runs()) >= 5, worker.output)  # the worker is under way

    old = group.kill_master()
    new = group.wait_for_failover(old)
    assert new != old

    # After: the lock granted before is still held, and still refused to others.
    retrying(held.check)
    assert (
        retrying(lambda: elsewhere(lambda: RedisLock("failover").acquire(blocking=False))) is None
    )
    held.release()
    again = RedisLock("failover", timeout=5).acquire(blocking=False)
    assert again is not None
    assert again.fence > held.fence
    again.release()
    # The semaphore still admits no more than its limit.
    assert retrying(lambda: semaphore.acquire(blocking=False)) is not None
    assert semaphore.acquire(blocking=False) is None
    # The chat goes on.
    GroupChat(accounts=True).send(chat_id, "alice", "after")
    [pending] = GroupChat(accounts=True).fetch_pending("bob")
    assert [m.message for m in pending.messages][-1] == "after"
    # The worker reconnected by itself and ran every acknowledged task.
    wait_until(lambda: len(runs()) == TASKS, worker.output, timeout=60)
    assert set(runs()) == {f"t{n}" for n in range(TASKS)}
    output = worker.output()
    assert "lost Redis" in output
    assert "reached Redis again" in output
    worker.signal(15)
    assert worker.wait() == 0


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedCluster]:
    """Three masters with a replica each (a failover within a second), as the default
    cache here and in the workers the test starts; the queue ``hot`` has a partition
    on each master, and an enqueue returns once a replica has the task."""
    with EmbeddedCluster(masters=3, replicas=1, config={"cluster-node-timeout": "1000"}) as server:
        other = server.nodes[1].url
        monkeypatch.setenv("RC_TEST_REDIS_URL", server.url)
        monkeypatch.setenv("RC_TEST_REDIS_OTHER_URL", other)
        changed = {"QUEUE_WAIT_REPLICAS": 1, "QUEUE_PARTITIONS": {"hot": 3}}
        with override_settings(CACHES=caches(server.url, other), REDIS_COMPONENTS=changed):
            yield server


@pytest.mark.skipif(
    not CLUSTER, reason="a Redis Cluster's failover needs the cluster client: the cluster's pass"
)
def test_a_clusters_failover_loses_no_acknowledged_task(
    cluster: EmbeddedCluster, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A master holding a partition of the queue is killed while a worker runs it: the
    worker reaches the promoted replica by itself, and every task whose enqueue a
    replica acknowledged runs. This process (a web process, say) reaches it too: it
    reads every task's result and enqueues more, without a restart."""
    hot = tasks.record.using(queue_name="hot")
    ids = [hot.enqueue(f"t{n}", 0.05).id for n in range(TASKS)]
    settings = {"TASK_HEARTBEAT_INTERVAL": 0.5, "QUEUE_WAIT_REPLICAS": 1}
    worker = start_worker("hot", QUEUE_PARTITIONS={"hot": 3}, **settings)
    wait_until(lambda: len(runs()) >= 5, worker.output)  # the worker is under way
    # (Not the first node, which the clients were told of.)
    victim = next(node for node in cluster.masters_now() if node is not cluster.nodes[0])
    cluster.kill_master(victim)
    # Before anything else here asks the cluster (whose client would then find the new
    # master for all): the first calls fail while the failover runs, then all succeed.
    assert retrying(lambda: [hot.get_result(task_id).id for task_id in ids]) == ids
    with override_settings(REDIS_COMPONENTS={"QUEUE_PARTITIONS": {"hot": 3}}):
        for n in range(TASKS // 2):  # (the promoted replica has no replica to wait for)
            retrying(lambda n=n: hot.enqueue(f"after-failover-{n}", 0))
    names = {f"t{n}" for n in range(TASKS)} | {f"after-failover-{n}" for n in range(TASKS // 2)}
    wait_until(lambda: len(retrying(runs)) == len(names), worker.output, timeout=60)
    counted = runs()
    assert set(counted) == names
    # Only a task in flight when its master died may run again (its outcome may have
    # been lost with the master); the worker runs one at a time.
    assert sum(counted.values()) <= len(names) + 1, counted
    output = worker.output()
    assert "lost Redis" in output
    assert "reached Redis again" in output
    worker.signal(15)
    assert worker.wait() == 0, worker.output()
