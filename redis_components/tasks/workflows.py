"""Workflows: chains, groups and fan-in callbacks of tasks, exact under at-least-once
delivery.

A workflow is a graph of steps, each a task run with a :class:`Signature`'s arguments::

    chain(fetch.s(url), parse.s(), store.s())            # each gets the last one's result
    group(resize.s(image) for image in images).then(publish.s(album))  # fan-in, in order
    chain(charge.s(order), group([ship.s(), email.s()]))  # both get charge's result

``enqueue()`` writes the whole graph and enqueues its first steps in one script
(``lua/flow_create.lua``): an interrupted enqueue leaves nothing. On one server, each
later step is released by the script that records the final outcome of the last step
it waits for (``lua/lib/flow.lua``, included by the fetch, recovery and cancel
scripts): no polling task, no sweeper, no round trip of its own. A step's outcome
counts once (the first final one: a step run twice by a recovered worker, or enqueued
twice by hand, changes
nothing the second time), a retry changes nothing downstream, and a step that fails
for good marks every step after it as not run in the same script, unless that step
allows its parents' failure (``allow_failure``: it then gets the failure record in
place of the result).

On a Redis Cluster a workflow's keys are in the registry's hash tag and its steps in
their queues': the outcome goes from the step's home to the workflow's, and a released
step from there to its home, each through an outbox, idempotent at each end, so that
it happens exactly once (``lua/lib/flow.lua``; a worker's heartbeat carries what a
dead process left).

This module gathers the public names: the steps and their planning are in
``definition.py`` (beside the task type, whose ``.s()`` makes a step), the workflow's
record in ``store/flow_records.py``, the handle that reads it in ``workflow_records.py``.
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
