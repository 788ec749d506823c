"""TaskStore: every facet of the task store in one (a facet may be used alone:
``Inspection()`` reads)."""

from __future__ import annotations

from typing import Literal

from .flows import Flows
from .inspection import Inspection
from .leases import Leases
from .queues import Queues
from .ticks import Ticks


class TaskStore(Queues, Leases, Inspection, Ticks, Flows):
    """The task system's keys in Redis, read and written for the rest of the app: every
    facet's methods (see :class:`~.router.Router` for its clients)."""


def cancel(task_id: str, *, terminate: bool = False) -> Literal["cancelled", "terminating"]:
    """Cancel a task that has not started (see :meth:`TaskStore.cancel`)."""
    return TaskStore().cancel(task_id, terminate=terminate)
