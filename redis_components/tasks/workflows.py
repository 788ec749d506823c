"""Workflows: chains, groups and fan-in callbacks of tasks, exact under at-least-once
delivery.

A workflow is a graph of steps, each a task run with a :class:`Signature`'s arguments::

    chain(fetch.s(url), parse.s(), store.s())            # each gets the last one's result
    group(resize.s(image) for image in images).then(publish.s(album))  # fan-in, in order
    chain(charge.s(order), group([ship.s(), email.s()]))  # both get charge's result

``enqueue()`` writes the whole graph and enqueues its first steps in one script
(``lua/flow_create.lua``): an interrupted enqueue leaves nothing. Each later step is
released by the script that records the final outcome of the last step it waits for
(``lua/lib/flow.lua``): no polling task, no sweeper. What a failure does, and how each
of these holds on one server and on a Redis Cluster: the Workflows page.
"""

from __future__ import annotations

from .definition import (
    MAX_STEPS,
    Chain,
    Group,
    Node,
    Signature,
    chain,
    enqueue_workflow,
    group,
    is_failure,
    signature,
)
from .workflow_records import STATES, Step, StepState, Summary, Workflow, get_workflow, workflows

__all__ = [
    "MAX_STEPS",
    "STATES",
    "Chain",
    "Group",
    "Node",
    "Signature",
    "Step",
    "StepState",
    "Summary",
    "Workflow",
    "chain",
    "enqueue_workflow",
    "get_workflow",
    "group",
    "is_failure",
    "signature",
    "workflows",
]
