"""The task store: the one place that sends commands on the task system's keys and reads
their raw replies; nothing here knows about workers' loops, Django's API or pages.

Each module says what it holds; the facets over ``router`` alone send commands, and
``task_store`` has every facet in one. The names the package exports are its interface.

Words of placement (docs/cluster.md tells how they spread over a Redis Cluster)
-------------------------------------------------------------------------------
* A **home** is where a set of keys lives, one slot of a cluster; its **head** is the
  prefix its keys start with, ending in its hash tag (``{tasks}:`` on one server), so
  that one script may touch any key of one home on a Redis Cluster.
* The **registry** is the home of the keys no queue owns.
* A **partition** is one of a queue's homes, when ``QUEUE_PARTITIONS`` gives it several.
* The **shared home** is the registry's home when queues have homes of their own,
  where 0.1.0 wrote its tasks (``migration`` moves them).
* **Stray homes** are the partitions of a count noted by some process that is not the
  queue's own count (a changed ``QUEUE_PARTITIONS``): served where they are until
  forgotten once empty (:meth:`TaskStore.forget_count`).
* A **lane** is one of a worker's queues in one home (its ready, delayed, taken and dead
  keys), and its **position** is its 1-based number among all the worker's lanes, in
  priority order (``WorkerStore.queue_at``), as a take's reply gives it.
* A **run** is a worker's lanes in one home: one script call takes from a run.

Keys
----
A script is given the keys of one home (``layout.one_home`` refuses queues of different
homes) through ``KEYS``; the keys it can know only once it has read a task (a limit's, a
released step's) are named by ``lua/lib/keys.lua`` from the head of a key it was given,
as ``layout`` names them (tests tie the two). A task's id names its home
(``layout.task_home``). With the default prefix::

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
    rc:queue:{tasks}:flows:live, :done          ZSET  workflows running, by creation; kept, by end
    rc:queue:{tasks}:flows:released             HASH  steps released, on their way to their homes
    rc:queue:{tasks}:flows:outcomes             HASH  per home: steps' outcomes on their way
    rc:queue:{tasks}:flows:waiting              HASH  per home: the payload a step waits as

A ready task's score is ``(100 - priority) * 2**44 + 2**43 + n``, ``n`` from the
enqueue counter: one ``ZPOPMIN`` takes the highest priority, and the oldest among
equals. Scores stay below 2**53, exact in a double. Every script that makes a task
ready does it through ``lua/lib/queue.lua``. Each queue has its own delayed ZSET, so
that the script moving due tasks gets every key it writes through ``KEYS``. Worker ids
contain no ``:``, so the queue name is always the last part. Idle workers are woken
through a Pub/Sub channel named like the queue's ready set.

The take cannot write the result hash, whose key it does not know before it takes the
task: it writes the task's current attempt in the ``running`` hash, which readers
combine with the result hash. Acknowledgements are fenced: an outcome is recorded only
while the take it is of is the task's current attempt, so an execution whose task was
put back and taken again can neither acknowledge it nor overwrite the new run's result.
"""

from __future__ import annotations

from ..messages import NOW, Due, due_at
from .flows import Flows
from .inspection import Inspection, server_warnings
from .layout import find_nodes_again, home_roles, new_task_id, partition_id, partitions, placement
from .leases import Leases
from .queues import Queues, queue_limit
from .records import (
    DURATION_BUCKETS,
    WAIT_BUCKETS,
    Attempt,
    AttemptError,
    DeadLetter,
    Delivery,
    Fetched,
    Heartbeat,
    LimitUse,
    LogLine,
    Outcome,
    Progress,
    QueueCounts,
    TaskRecord,
    TaskStatus,
    TickClaim,
    WaitingTask,
    WorkerInfo,
    dead_entry,
)
from .replies import read_dead_letter
from .task_store import TaskStore, cancel
from .ticks import Ticks
from .worker_store import Ahead, WorkerStore

__all__ = [
    "DURATION_BUCKETS",
    "NOW",
    "WAIT_BUCKETS",
    "Ahead",
    "Attempt",
    "AttemptError",
    "DeadLetter",
    "Delivery",
    "Due",
    "Fetched",
    "Flows",
    "Heartbeat",
    "Inspection",
    "Leases",
    "LimitUse",
    "LogLine",
    "Outcome",
    "Progress",
    "QueueCounts",
    "Queues",
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
