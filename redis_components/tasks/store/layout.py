"""The task system's keys (see the package's doc for their layout) and a task's rank."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
import zlib
from collections.abc import Callable, Iterable, Iterator

from redis import Redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from ... import keys
from ...conf import MAX_PARTITIONS, conf
from ...connection import REDIS_DOWN, get_client, is_cluster, node_client, rediscover, server_of
from ..messages import MAX_PRIORITY, FlowStep, TaskMessage

COMPONENT = "queue"
TAG = "tasks"

# Room for 2**43 tasks (8.8e12) in each priority's band of ready scores.
BAND = 2**44
FIRST = 2**43


# Whether each queue has a home of its own (see home()) whatever the server: the
# environment variable RC_SPLIT_HOMES (1 or 0, read by every process at its start: the
# tests and the benchmarks), or split_homes() in a test. None: on a Redis Cluster only.
_forced: bool | None = {"1": True, "0": False}.get(os.environ.get("RC_SPLIT_HOMES", ""))
_seen: tuple[object, bool] = (None, False)  # the last client asked about, and its answer


def _split() -> bool:
    global _seen
    if _forced is not None:
        return _forced
    client, seen = get_client(), _seen
    if seen[0] is not client:
        seen = _seen = (client, is_cluster(client))
    return seen[1]


@contextlib.contextmanager
def split_homes(on: bool = True) -> Iterator[None]:
    """Give each queue a home of its own (or not) in the block, whatever the server."""
    global _forced
    before, _forced = _forced, on
    try:
        yield
    finally:
        _forced = before


def _tag(queue: str) -> str:
    """The 4 hex digits that name ``queue``'s own home."""
    return f"{zlib.crc32(queue.encode()) & 0xFFFF:04x}"


@functools.lru_cache(maxsize=1024)
def _own(prefix: str, tag: str = "") -> str:
    """The head of the home tagged ``tag`` (none: the registry's), cached by ``prefix``."""
    return keys.key(COMPONENT, f"{TAG}:{tag}" if tag else TAG) + ":"


def partitions(queue: str) -> int:
    """How many partitions ``queue`` has: its ``QUEUE_PARTITIONS`` while queues have
    homes of their own, else 1. A bad value (the system checks report it) counts as 1."""
    if not _split():
        return 1
    count = conf.QUEUE_PARTITIONS.get(queue, 1)
    return count if keys.is_integer(count) and 1 <= count <= MAX_PARTITIONS else 1


def _slot_range(tag: str, count: int) -> int:
    return key_slot(f"{TAG}:{tag}".encode()) * count // REDIS_CLUSTER_HASH_SLOTS


@functools.lru_cache(maxsize=1024)
def _tags(queue: str, count: int) -> tuple[str, ...]:
    """The tags of the homes of ``queue``'s ``count`` partitions: its own (:func:`_tag`),
    then one in each other of ``count`` equal slot ranges, to spread over a cluster."""
    first = _tag(queue)
    found = [first]
    ranges = [i for i in range(count) if i != _slot_range(first, count)]
    for partition, wanted in enumerate(ranges, start=1):
        value = zlib.crc32(f"{queue}#{partition}".encode()) & 0xFFFF
        while _slot_range(f"{value:04x}", count) != wanted:
            value = (value + 1) & 0xFFFF
        found.append(f"{value:04x}")
    return tuple(found)


def own_homes(queue: str) -> list[str]:
    """The heads of ``queue``'s own homes, one per partition (:func:`home` first)."""
    if not _split():
        return [registry()]
    return count_homes(queue, partitions(queue))


def placement(queue: str) -> str:
    """``queue`` and, when it has several partitions, on how many nodes, for the logs:
    ``"hot (6 partitions on 3 nodes)"``; the name alone while Redis cannot be reached."""
    try:
        heads = own_homes(queue)
        if len(heads) == 1:
            return queue
        nodes = len({server_of(tasks_client(head)) for head in heads})
    except REDIS_DOWN:
        return queue
    return f"{queue} ({len(heads)} partitions on {nodes} node{'' if nodes == 1 else 's'})"


def count_homes(queue: str, count: int) -> list[str]:
    """The heads of the homes of ``queue``'s partitions when it has ``count``."""
    return [_own(conf.KEY_PREFIX, tag) for tag in _tags(queue, count)]


# The stray homes (see the package's doc): a process that picks a partition for a new
# task notes the count it uses at most every NOTE_EVERY seconds per queue, before the
# task is added. A count of 1 is never noted: its home is the first partition's of any.
NOTE_EVERY = 60.0
# How long (seconds) a process keeps the counts it read before it reads them again.
READ_EVERY = 10.0
# How long (ms) after a count was last noted its homes may be left once empty (see
# TaskStore.forget_count): far longer than NOTE_EVERY, so no process adds to them still.
FORGET_AFTER_MS = 600_000
_noted: dict[tuple[str, int], float] = {}  # (queue, count) -> when it notes it next
# Until when (monotonic) the counts read are kept, and queue -> count -> noted at (ms).
_read: tuple[float, dict[str, dict[int, int]]] = (0.0, {})


def _note(queue: str, count: int) -> None:
    if count < 2 or time.monotonic() < _noted.get((queue, count), 0.0):
        return
    try:
        tasks_client().hset(partitions_key(), f"{queue}#{count}", int(time.time() * 1000))
    except REDIS_DOWN:
        return  # (the enqueue that follows says Redis is away; the next one notes it)
    _noted[(queue, count)] = time.monotonic() + NOTE_EVERY


def noted_counts(*, fresh: bool = False) -> dict[str, dict[int, int]]:
    """The counts of partitions noted for each queue, each with when it was last noted
    (ms), as read at most ``READ_EVERY`` ago (``fresh``: now). Empty on one server."""
    global _read
    if not _split():
        return {}
    until, found = _read
    if fresh or time.monotonic() >= until:
        found = {}
        for field, at in tasks_client().hgetall(partitions_key()).items():
            name = field.decode() if isinstance(field, bytes) else str(field)
            queue, _, count = name.rpartition("#")
            if count.isdigit() and 1 < int(count) <= MAX_PARTITIONS:
                found.setdefault(queue, {})[int(count)] = int(at)
        _read = (time.monotonic() + READ_EVERY, found)
    return found


def forget_noted() -> None:
    """Forget the counts this process noted and read (for the tests)."""
    global _read
    _noted.clear()
    _read = (0.0, {})


def stray_homes(queue: str) -> dict[str, int]:
    """The homes of ``queue``'s partitions under the counts noted that its own count has
    not, each with the count it is of."""
    own = set(own_homes(queue))
    found: dict[str, int] = {}
    for count in sorted(noted_counts().get(queue, ())):
        for head in count_homes(queue, count):
            if head not in own:
                found.setdefault(head, count)
    return found


def homes_of(queues: Iterable[str]) -> dict[str, list[str]]:
    """The homes of ``queues``' partitions, then their stray homes, each with the
    queues it holds, in their order."""
    found: dict[str, list[str]] = {}
    queues = list(queues)
    for lookup in (own_homes, stray_homes):
        for queue in queues:
            for head in lookup(queue):
                if queue not in found.setdefault(head, []):
                    found[head].append(queue)
    return found


def home(queue: str) -> str:
    """The head of the keys of ``queue`` and of its tasks (its first partition's):
    ``{tasks:<4 hex digits>}`` when queues have homes of their own, else ``{tasks}``."""
    return _own(conf.KEY_PREFIX, _tag(queue)) if _split() else registry()


def task_home(task_id: str) -> str:
    """The home of the keys of the task ``task_id`` (its result, its terminate flag):
    its queue's, which its id names, so that a reader given only the id finds them."""
    if len(task_id) == 36:
        return _own(conf.KEY_PREFIX, task_id[:4])
    return registry()


def shared_home() -> str | None:
    """When queues have homes of their own, the registry's home, where 0.1.0 wrote the
    tasks of every queue (see migration.py). ``None`` on one server."""
    return registry() if _split() else None


def new_task_id(queue: str, seed: str = "", partition_by: str | None = None) -> str:
    """A new id for a task of ``queue``: 32 hex digits, random (or of ``seed``'s SHA-256),
    after the 4 of its home's tag when queues have homes of their own: a partition's
    picked by a hash of ``partition_by`` (by default of the digits) when it has several."""
    digits = hashlib.sha256(seed.encode()).hexdigest()[:32] if seed else os.urandom(16).hex()
    if not _split():
        return digits
    tags = _tags(queue, partitions(queue))
    _note(queue, len(tags))
    by = digits if partition_by is None else partition_by
    return tags[zlib.crc32(by.encode()) % len(tags)] + digits


def partition_id(message: TaskMessage, by: str | None) -> str:
    """A new id for ``message``, of the partition that ``by`` picks (by default its
    digest, so that equal unique tasks meet: :class:`InvalidInput` for arguments a
    digest cannot compare)."""
    return new_task_id(message.queue, partition_by=message.digest() if by is None else by)


def registry() -> str:
    """The head of the keys that no queue owns (``{tasks}:``): the workers' leases and
    descriptions, the queues served, the schedules and the workflows."""
    return _own(conf.KEY_PREFIX)


def homes(queues: Callable[[], Iterable[str]]) -> list[str]:
    """Every home, for the readers that look at the whole task system: the registry's,
    then, when queues have homes of their own, those of ``queues()`` (only called then)."""
    found = [registry()]
    if _split():
        found += sorted(set(homes_of(queues())) - {registry()})
    return found


def queue_homes(queue: str) -> list[str]:
    """Every home that may hold tasks of ``queue``: its own, then its stray homes."""
    own = own_homes(queue)
    return own if own == [registry()] else [*own, *stray_homes(queue)]


def home_roles(queue: str) -> dict[str, tuple[int, int]]:
    """What each home of ``queue`` (:func:`queue_homes`) is to it: (the number of its
    partition, of how many)."""
    own = own_homes(queue)
    roles = {head: (number, len(own)) for number, head in enumerate(own, 1)}
    for head, count in stray_homes(queue).items():
        roles[head] = (count_homes(queue, count).index(head) + 1, count)
    return roles


def head_of(key: str) -> str:
    """The head of the home of a key of the task system: up to its hash tag's end."""
    return key[: key.index("}", key.index("{")) + 2]


def one_home(queues: Iterable[str]) -> str:
    """The home of ``queues``, which a script that touches them all needs them to share
    (the registry's when there are none)."""
    heads = {home(queue) for queue in queues} or {registry()}
    if len(heads) > 1:
        raise ValueError(f"queues of different homes in one call: {sorted(heads)}")
    return heads.pop()


def find_nodes_again() -> None:
    """After a connection error: have a cluster client find a promoted replica."""
    rediscover(get_client())


def tasks_client(head: str = "") -> Redis:
    """The client for the keys of the home ``head`` (the registry's by default): on a
    cluster, the node of its hash tag."""
    client = get_client()
    return node_client(client, lease_copy_key(head or registry())) if is_cluster(client) else client


# A queue's keys, in its home (``head``: the home of the keys when it is not the queue's:
# another partition's, or the registry's for the tasks of an earlier layout).
def ready_key(queue: str, head: str = "") -> str:
    return f"{head or home(queue)}ready:{queue}"


def delayed_key(queue: str, head: str = "") -> str:
    return f"{head or home(queue)}delayed:{queue}"


def dead_key(queue: str, head: str = "") -> str:
    return f"{head or home(queue)}dead:{queue}"


def running_key(worker_id: str, queue: str, head: str = "") -> str:
    return f"{head or home(queue)}running:{worker_id}:{queue}"


def stats_key(queue: str, hour: int, head: str = "") -> str:
    """The per-minute counts of ``queue`` during ``hour`` (hours since the epoch)."""
    return f"{head or home(queue)}stats:{hour}:{queue}"


def unique_key(digest: str, head: str) -> str:
    """The key that keeps a task unique (``digest``: its name and arguments'), in the
    home ``head`` of the task (layout.task_home: its partition's)."""
    return f"{head}unique:{digest}"


# A task's keys, in its queue's home.
def result_key(task_id: str, head: str = "") -> str:
    """The result of ``task_id``; ``head``: the home of the script that reads it, where a
    payload whose id is not one of ours (a home's id is 32 or 36 hex digits) keeps it."""
    return f"{head or task_home(task_id)}result:{task_id}"


def terminate_key(task_id: str) -> str:
    return f"{task_home(task_id)}terminate:{task_id}"


def _in_home(part: str) -> Callable[[str], str]:
    """The key ``part`` that each home has once, given the home's head."""
    return lambda head: f"{head}{part}"


def _per_limit(part: str) -> Callable[[str, str], str]:
    """A key of a home for each limit (or worker), given the home's head and its name."""
    return lambda head, name: f"{head}limit:{part}:{name}"


def _in_registry(part: str) -> Callable[[], str]:
    return lambda: f"{registry()}{part}"


# The keys each home has once (``head``: the home's, from home(queue)). Its copy of the
# leases of the workers that serve its queues (the registry's: the leases themselves) is
# the fence of the fetches and recoveries there.
lease_copy_key = _in_home("leases")
running_tasks_key = _in_home("running")  # task id -> attempts (lua/lib/attempts.lua)
counter_key = _in_home("counter")
totals_key = _in_home("totals")
limits_key = _in_home("limits")  # the concurrency limits in use: key -> limit
limits_waiting_key = _in_home("limit:waiting")  # queue -> its tasks waiting for a permit
settled_key = _in_home("flows:outcomes")  # the outbox of its steps' outcomes (lib/flow.lua)
waiting_key = _in_home("flows:waiting")  # the payloads its steps wait as, for a cancel

# A home's keys per limit (lua/lib/limits.lua, limit_turns.lua), or per worker.
limit_held_key = _per_limit("held")  # the permits held
limit_wait_key = _per_limit("wait")  # the tasks waiting for a permit
limit_tat_key = _per_limit("tat")  # a rate's theoretical arrival time
limit_turns_key = _per_limit("turns")  # the turns of the tasks set aside on a rate
limit_every_key = _per_limit("every")  # the interval those turns are spaced by
limit_runs_key = _per_limit("runs")  # a worker's runs that hold permits beyond their record

# The registry's keys.
leases_key = _in_registry("leases")
queues_key = _in_registry("queues")
scheduler_key = _in_registry("scheduler")
schedule_next_key = _in_registry("schedule:next")
schedule_last_key = _in_registry("schedule:last")
flows_live_key = _in_registry("flows:live")
flows_done_key = _in_registry("flows:done")
released_key = _in_registry("flows:released")  # the outbox of steps released to their homes
partitions_key = _in_registry("partitions")  # "<queue>#<count>" -> last noted (ms)


def workers_key(head: str = "") -> str:
    """The workers' descriptions: the registry's (a key of this name in another home
    ``head`` is never written)."""
    return f"{head or registry()}workers"


def flow_key(workflow_id: str) -> str:
    return f"{registry()}flow:{workflow_id}"


def workflow_keys(workflow_id: str) -> list[str]:
    """The keys in the workflows' home of every script that may end a workflow: its HASH,
    the counter, the live and the finished workflows."""
    return [flow_key(workflow_id), counter_key(registry()), flows_live_key(), flows_done_key()]


def settled_elsewhere(task_id: str) -> bool:
    """Whether the step ``task_id`` lives in another home than its workflow's (its
    queue's, on a cluster): its outcome then goes through its home's outbox."""
    return task_home(task_id) != registry()


def flow_section(flow: FlowStep, task_id: str) -> tuple[list[str], str]:
    """The keys that a script recording a final outcome of ``flow``'s step (the task
    ``task_id``) needs, and its step's argument (see lua/lib/flow.lua): in the workflow's
    home, the workflow's keys, each later step's result and queue, and the step's
    number; elsewhere, its home's outbox and waiting payloads, and "<step> <workflow> <id>"."""
    if settled_elsewhere(task_id):
        head = task_home(task_id)
        return [settled_key(head), waiting_key(head)], f"{flow.step} {flow.workflow} {task_id}"
    section = workflow_keys(flow.workflow)
    for kid_id, queue in flow.kids:
        section += [result_key(kid_id), ready_key(queue, task_home(kid_id))]
    return section, str(flow.step)


def rank(priority: int) -> int:
    """A task's ready score before the enqueue counter is added (see the module's doc)."""
    return (MAX_PRIORITY - priority) * BAND + FIRST


def result_ttl_ms() -> int:
    return round(conf.TASK_RESULT_TTL * 1000)
