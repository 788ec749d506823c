"""The task system's keys (see the package's doc for their layout) and a task's rank."""

from __future__ import annotations

import functools
from collections.abc import Iterable

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
    return keys.key(COMPONENT, TAG) + ":"


def _head() -> str:
    return _tagged(conf.KEY_PREFIX)


def home(queue: str) -> str:
    """The head of the keys of ``queue`` and of its tasks: the queue's home.

    A home's keys share one hash tag, so a script may touch any of them on a cluster
    (see the package's doc). Every queue's home is the task system's one head today.
    """
    return _head()


def task_home(task_id: str) -> str:
    """The home of the keys of the task ``task_id`` (its result, its terminate flag):
    its queue's, which its id must name so that a reader given only the id finds them."""
    return _head()


def registry() -> str:
    """The head of the keys that no queue owns: the workers' leases and descriptions,
    the queues served, the schedules and the workflows."""
    return _head()


def homes() -> list[str]:
    """Every home, for the readers that look at the whole task system."""
    return [_head()]


def one_home(queues: Iterable[str]) -> str:
    """The home of ``queues``, which a script that touches them all needs them to share
    (the registry's when there are none)."""
    heads = {home(queue) for queue in queues} or {registry()}
    if len(heads) > 1:
        raise ValueError(f"queues of different homes in one call: {sorted(heads)}")
    return heads.pop()


def tasks_client() -> Redis:
    """The client for the task system's keys: on a cluster, the node of the registry's
    hash tag, which is every home's today."""
    client = get_client()
    return node_client(client, leases_key()) if is_cluster(client) else client


# A queue's keys, in its home.


def ready_key(queue: str) -> str:
    return f"{home(queue)}ready:{queue}"


def delayed_key(queue: str) -> str:
    return f"{home(queue)}delayed:{queue}"


def dead_key(queue: str) -> str:
    return f"{home(queue)}dead:{queue}"


def running_key(worker_id: str, queue: str) -> str:
    return f"{home(queue)}running:{worker_id}:{queue}"


def stats_key(queue: str, hour: int) -> str:
    """The per-minute counts of ``queue`` during ``hour`` (hours since the epoch)."""
    return f"{home(queue)}stats:{hour}:{queue}"


def unique_key(queue: str, digest: str) -> str:
    """The key that keeps a task of ``queue`` unique (``digest``: its name and arguments')."""
    return f"{home(queue)}unique:{digest}"


# A task's keys, in its queue's home.


def result_key(task_id: str) -> str:
    return f"{task_home(task_id)}result:{task_id}"


def terminate_key(task_id: str) -> str:
    return f"{task_home(task_id)}terminate:{task_id}"


# The keys each home has once (``head``: the home's, from home(queue)).


def running_tasks_key(head: str) -> str:
    """The running attempts of the home's tasks: task id -> attempts (lua/lib/attempts.lua)."""
    return f"{head}running"


def counter_key(head: str) -> str:
    return f"{head}counter"


def totals_key(head: str) -> str:
    return f"{head}totals"


def limits_key(head: str) -> str:
    """The concurrency limits in use: key -> limit (see lua/lib/limits.lua)."""
    return f"{head}limits"


def limits_waiting_key(head: str) -> str:
    """Each queue -> how many of its tasks wait for a permit (see lua/lib/limits.lua)."""
    return f"{head}limit:waiting"


def limit_held_key(head: str, key: str) -> str:
    return f"{head}limit:held:{key}"


def limit_wait_key(head: str, key: str) -> str:
    return f"{head}limit:wait:{key}"


# The registry's keys.


def leases_key() -> str:
    return f"{registry()}leases"


def workers_key() -> str:
    return f"{registry()}workers"


def queues_key() -> str:
    return f"{registry()}queues"


def scheduler_key() -> str:
    return f"{registry()}scheduler"


def schedule_next_key() -> str:
    return f"{registry()}schedule:next"


def schedule_last_key() -> str:
    return f"{registry()}schedule:last"


def flow_key(workflow_id: str) -> str:
    return f"{registry()}flow:{workflow_id}"


def flows_live_key() -> str:
    return f"{registry()}flows:live"


def flows_done_key() -> str:
    return f"{registry()}flows:done"


def flow_section(flow: FlowStep) -> list[str]:
    """The keys a script recording a final outcome of ``flow``'s step needs to settle it
    (see lua/lib/flow.lua): the workflow's, then each later step's result and queue."""
    section = [flow_key(flow.workflow), counter_key(registry()), flows_live_key(), flows_done_key()]
    for task_id, queue in flow.kids:
        section += [result_key(task_id), ready_key(queue)]
    return section


def rank(priority: int) -> int:
    """A task's ready score before the enqueue counter is added (see the module's doc)."""
    return (MAX_PRIORITY - priority) * BAND + FIRST


def result_ttl_ms() -> int:
    return round(conf.TASK_RESULT_TTL * 1000)
