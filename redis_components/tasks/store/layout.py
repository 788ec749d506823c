"""The task system's keys (see the package's doc for their layout) and a task's rank."""

from __future__ import annotations

import functools

from redis import Redis

from ... import keys
from ...conf import conf
from ...connection import get_client, is_cluster, node_client
from ..messages import MAX_PRIORITY, FlowStep

COMPONENT = "queue"
TAG = "tasks"

# Room for 2**43 tasks (8.8e12) in each priority's band of ready scores.
BAND = 2**44
FIRST = 2**43


@functools.lru_cache(maxsize=4)
def _tagged(prefix: str) -> str:
    """The head of every task key while ``KEY_PREFIX`` is ``prefix`` (the cache's key)."""
    return keys.key(COMPONENT, TAG)


def _key(*parts: str) -> str:
    """``keys.key(COMPONENT, TAG, *parts)``, built faster: an enqueue names five keys."""
    return ":".join((_tagged(conf.KEY_PREFIX), *parts))


def tasks_client() -> Redis:
    """The client for the task system's keys: on a cluster, the node of their one hash tag."""
    client = get_client()
    return node_client(client, leases_key()) if is_cluster(client) else client


def ready_key(queue: str) -> str:
    return _key("ready", queue)


def delayed_key(queue: str) -> str:
    return _key("delayed", queue)


def dead_key(queue: str) -> str:
    return _key("dead", queue)


def running_key(worker_id: str, queue: str) -> str:
    return _key("running", worker_id, queue)


def running_tasks_key() -> str:
    return _key("running")


def result_key(task_id: str) -> str:
    return _key("result", task_id)


def counter_key() -> str:
    return _key("counter")


def flow_key(workflow_id: str) -> str:
    return _key("flow", workflow_id)


def flows_live_key() -> str:
    return _key("flows", "live")


def flows_done_key() -> str:
    return _key("flows", "done")


def flow_section(flow: FlowStep) -> list[str]:
    """The keys a script recording a final outcome of ``flow``'s step needs to settle it
    (see lua/lib/flow.lua): the workflow's, then each later step's result and queue."""
    section = [flow_key(flow.workflow), counter_key(), flows_live_key(), flows_done_key()]
    for task_id, queue in flow.kids:
        section += [result_key(task_id), ready_key(queue)]
    return section


def limits_key() -> str:
    """The concurrency limits in use: key -> limit (see lua/lib/limits.lua)."""
    return _key("limits")


def limits_waiting_key() -> str:
    """Each queue -> how many of its tasks wait for a permit (see lua/lib/limits.lua)."""
    return _key("limit", "waiting")


def limit_held_key(key: str) -> str:
    return _key("limit", "held", key)


def limit_wait_key(key: str) -> str:
    return _key("limit", "wait", key)


def scheduler_key() -> str:
    return _key("scheduler")


def terminate_key(task_id: str) -> str:
    return _key("terminate", task_id)


def unique_key(digest: str) -> str:
    return _key("unique", digest)


def stats_key(queue: str, hour: int) -> str:
    """The per-minute counts of ``queue`` during ``hour`` (hours since the epoch)."""
    return _key("stats", str(hour), queue)


def totals_key() -> str:
    return _key("totals")


def leases_key() -> str:
    return _key("leases")


def workers_key() -> str:
    return _key("workers")


def queues_key() -> str:
    return _key("queues")


def rank(priority: int) -> int:
    """A task's ready score before the enqueue counter is added (see the module's doc)."""
    return (MAX_PRIORITY - priority) * BAND + FIRST


def result_ttl_ms() -> int:
    return round(conf.TASK_RESULT_TTL * 1000)


def schedule_next_key() -> str:
    return _key("schedule", "next")


def schedule_last_key() -> str:
    return _key("schedule", "last")
