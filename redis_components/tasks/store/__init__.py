"""The task store: the one place that sends commands on the task system's keys.

Its modules: ``layout`` (the keys and a task's rank), ``records`` (the values the store
takes and returns), ``replies`` (the parsers of what Redis answers), ``calls`` (for each
script, one keyword-only builder of its KEYS and ARGV; a test checks them against the
scripts' headers), ``router`` (which client serves a home, pipelines over homes, durable
writes), the facets over the router, which alone send commands (``queues``, ``leases``,
``inspection``, ``ticks``, ``flows``, ``migration``), ``task_store`` (:class:`TaskStore`:
every facet in one) and ``worker_store`` (:class:`WorkerStore`: what one worker says of
its own tasks). Import from the package: the names it exports are its interface.

Both front doors (our ``@redis_task`` and Django's Tasks backend) enqueue through
:meth:`TaskStore.enqueue`; workers take, finish and recover tasks through
:meth:`~TaskStore.fetch` and :meth:`~TaskStore.recover_worker`; the operations commands,
results, pages, metrics and schedules read and write through it too. Nothing else builds
a key of the task system or reads a raw reply about it, and nothing here knows about
workers' loops, Django's API or pages.

Words of placement
------------------
* A **home** is where a set of keys lives, one slot of a cluster; its **head** is the
  prefix its keys start with, ending in its hash tag (``{tasks}:`` on one server), so
  that one script may touch any key of one home on a Redis Cluster.
* The **registry** is the home of the keys no queue owns.
* A **partition** is one of a queue's homes, when ``QUEUE_PARTITIONS`` gives it several.
* The **shared home** is the registry's home when queues have homes of their own: a
  release before they had (0.1.0) wrote its tasks there, and a worker moves them into
  their queues' homes when it starts (``migration``).
* **Stray homes** are the partitions of a count noted by some process that is not the
  queue's own count (a changed ``QUEUE_PARTITIONS``).
* A **lane** is one of a worker's queues in one home (its ready, delayed, taken and dead
  keys), and its **position** is its 1-based number among all the worker's lanes, in
  priority order (``WorkerStore.queue_at``), as a take's reply gives it.
* A **run** is a worker's lanes in one home: one script call takes from a run.

Keys
----
A queue's keys and its tasks' are in the queue's home (``layout.home``); the workers'
leases and descriptions, the queues served, the schedules and the workflows are in the
registry's. Each home has its own running hash, enqueue counter, metrics totals, limit
keys and copy of the workers' leases, which fences the fetches and recoveries there. A
task's id names its home (``layout.task_home``), so that a reader given only the id
finds its result.

On one server every home is ``{tasks}``, so a worker's take of all its queues is one
script. On a Redis Cluster each queue has a home of its own, so the queues spread over
the shards (``layout.split_homes`` and ``RC_SPLIT_HOMES`` choose in the tests and the
benchmarks), and a queue given partitions has a home per partition
(``layout.own_homes``), one picked for each enqueue by a hash of the task's id (or of its
``partition_key``, its first limit's key, or a unique task's arguments). Across homes,
one script or pipeline per home (or node): enqueue, a worker's takes (see
:class:`WorkerStore`), its heartbeat, recovery (fenced by each home's copy of the lease,
the registry's last), the readers (``Router._each_home``; a queue's counts and dead
letters are summed over ``layout.queue_homes``) and the schedules (a tick's task is
enqueued in its queue's home, refused when it was already, then the tick is claimed in
the registry's). A workflow lives in the registry's home and its steps in their queues':
a step's final outcome goes through its home's outbox to the workflow, and the steps
that releases go through the workflows' outbox to their homes (both idempotent: see
lua/lib/flow.lua). The shared home's tasks are moved once, each under a new id that its
old result forwards to (``Router.current_id``). Stray homes are served where they are:
each process that adds a task to several partitions notes their count in the registry,
and the workers, readers and recovery cover the homes of every count noted
(``layout.stray_homes``) until it is forgotten once empty
(:meth:`TaskStore.forget_count`). A script is given the keys of one home
(``layout.one_home`` refuses queues of different homes) through ``KEYS``; the keys it
can know only once it has read a task (a limit's, a released step's) are named by
``lua/lib/keys.lua`` from the head of a key it was given, as ``layout`` names them
(tests tie the two, and find any key a script names otherwise). With the default prefix::

    rc:queue:{tasks}:ready:<queue>              ZSET  tasks ready to run, by priority, then age
    rc:queue:{tasks}:delayed:<queue>            ZSET  tasks not due yet, scored by due time (ms)
    rc:queue:{tasks}:dead:<queue>               LIST  dead letters: JSON {task, reason, error, ...}
    rc:queue:{tasks}:running:<worker>:<queue>   ZSET  the tasks a worker has taken, with their score
    rc:queue:{tasks}:stats:<hour>:<queue>       HASH  the queue's counts per minute in that hour
    rc:queue:{tasks}:unique:<digest>            STR   the id of a unique task while it is unique
    rc:queue:{tasks}:result:<task id>           HASH  the task's result record (see results.py)
    rc:queue:{tasks}:terminate:<task id>        STR   a request to stop the running task
    rc:queue:{tasks}:running                    HASH  per home: task id -> its running attempts
    rc:queue:{tasks}:counter                    STR   per home: the enqueue counter (FIFO)
    rc:queue:{tasks}:totals                     HASH  per home: the metrics' running totals
    rc:queue:{tasks}:limits, limit:...          per home: the limits in use (lua/lib/limits.lua)
    rc:queue:{tasks}:leases                     ZSET  per home: worker id -> lease expiry (ms)
    rc:queue:{tasks}:workers                    HASH  worker id -> JSON description (queues, pid)
    rc:queue:{tasks}:queues                     SET   every queue a worker has served
    rc:queue:{tasks}:partitions                 HASH  "<queue>#<count>" -> last noted (ms)
    rc:queue:{tasks}:scheduler                  STR   the worker that claims the schedules' ticks
    rc:queue:{tasks}:schedule:next, :last       HASH  each schedule's next tick, last claimed one
    rc:queue:{tasks}:flow:<workflow id>         HASH  a workflow: its steps and their states
    rc:queue:{tasks}:flows:live                 ZSET  running workflows, by creation (ms)
    rc:queue:{tasks}:flows:done                 ZSET  finished workflows kept, by end (ms)
    rc:queue:{tasks}:flows:released             HASH  steps released, on their way to their homes
    rc:queue:{tasks}:flows:outcomes             HASH  per home: steps' outcomes on their way
    rc:queue:{tasks}:flows:waiting              HASH  per home: the payload a step waits as

A ready task's score is ``(100 - priority) * 2**44 + 2**43 + n``, ``n`` from the
enqueue counter: one ``ZPOPMIN`` takes the highest priority, and the oldest among
equals, with no polling. Scores stay below 2**53, so they are exact in a double.
Every script that makes a task ready (enqueue, a workflow's creation and release, a
schedule's claim, a dead letter's requeue, the delayed mover) does it through
``lua/lib/queue.lua``, which also reads a payload's id and priority and stamps its
enqueue time (``tests/test_task_store.py`` checks it against :class:`TaskMessage`).

Each queue has its own delayed ZSET (not one for all queues, as in the book) so that
the script moving due tasks to their ready sets gets every key it writes through
``KEYS``. Worker ids contain no ``:``, so the queue name (any validated name) is always
the last part and keys stay unambiguous. Idle workers are woken through a Pub/Sub
channel named like the queue's ready set (channels and keys are separate namespaces).

Results
-------
The enqueue script writes a task's result hash (READY), and the script that records a
finished task (inside :func:`fetch`) writes its outcome. The take cannot write the
result hash, whose key it does not know before it takes the task (a script may only
touch the keys it is given), so it writes the task's current attempt into the
``running`` hash, which readers combine with the result hash. Recovery reads a dead
worker's tasks first, then records their crash in their result hashes.

Delivery
--------
At least once: a task leaves its ready set only by an atomic move into the
in-progress set of a registered worker, and leaves that set only after it ran
(acknowledged, rescheduled for a retry, or dead-lettered, each in one script). If
the worker dies, its lease runs out and a live worker puts its in-progress tasks back
in their queues (see ``worker.py``). A task may therefore run twice after a crash,
never zero times: write tasks to be idempotent. Acknowledgements are fenced: an
outcome is recorded only while the take it is of is the task's current attempt (the
``running`` hash), so an execution whose task was put back and taken again (by any
worker, its own included) can neither acknowledge it nor overwrite the new run's result.
"""

from __future__ import annotations

from ..messages import NOW, Due, due_at
from .flows import Flows
from .inspection import Inspection, server_warnings
from .layout import find_nodes_again, home_roles, new_task_id, partition_id, partitions, placement
from .leases import Leases
from .migration import Migration
from .queues import Queues, queue_limit
from .records import (
    DURATION_BUCKETS,
    Attempt,
    AttemptError,
    DeadLetter,
    Delivery,
    Enqueued,
    Fetched,
    Glimpse,
    Heartbeat,
    LimitUse,
    LogLine,
    Outcome,
    QueueCounts,
    RunningEntry,
    TaskRecord,
    TaskStatus,
    TickClaim,
    WaitingTask,
    WorkerInfo,
    dead_entry,
    duration_bucket,
)
from .replies import read_dead_letter
from .router import Router
from .task_store import TaskStore, cancel
from .ticks import Ticks
from .worker_store import Ahead, WorkerStore

__all__ = [
    "DURATION_BUCKETS",
    "NOW",
    "Ahead",
    "Attempt",
    "AttemptError",
    "DeadLetter",
    "Delivery",
    "Due",
    "Enqueued",
    "Fetched",
    "Flows",
    "Glimpse",
    "Heartbeat",
    "Inspection",
    "Leases",
    "LimitUse",
    "LogLine",
    "Migration",
    "Outcome",
    "QueueCounts",
    "Queues",
    "Router",
    "RunningEntry",
    "TaskRecord",
    "TaskStatus",
    "TaskStore",
    "TickClaim",
    "Ticks",
    "WaitingTask",
    "WorkerInfo",
    "WorkerStore",
    "cancel",
    "dead_entry",
    "due_at",
    "duration_bucket",
    "find_nodes_again",
    "home_roles",
    "new_task_id",
    "partition_id",
    "partitions",
    "placement",
    "queue_limit",
    "read_dead_letter",
    "server_warnings",
]
