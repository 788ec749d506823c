"""A workflow as Redis keeps it, its codec: one HASH (``flow_key``) of the fields that
``lua/lib/flow.lua``'s header describes, written by :func:`record_fields` from a plan of
steps (``definition.py``), changed by the scripts as steps end, read as records."""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ...keys import django_time
from ..messages import Barrier, FlowStep, PlannedStep, TaskMessage
from .layout import rank, ready_key, registry, result_key

StepState: TypeAlias = Literal["WAITING", "QUEUED", "SUCCESSFUL", "FAILED", "CANCELLED", "NOT_RUN"]
STATES: dict[str, StepState] = {
    "W": "WAITING",  # for the steps before it
    "Q": "QUEUED",  # released: waiting in its queue, running, or waiting for a retry
    "S": "SUCCESSFUL",
    "F": "FAILED",
    "C": "CANCELLED",
    "N": "NOT_RUN",  # a step before it failed
}

# The fields of a workflow's HASH: its own ("count" is "count:<state code>"), and each
# step's (or barrier's) "<field>:<n>". lua/lib/flow.lua's header says what each holds.
FIELDS = (
    "status",
    "id",
    "steps",
    "left",
    "result",
    "created_at",
    "finished_at",
    "failed",
    "kr",
    "kq",
    "count",
)
STEP_FIELDS = (
    "id",
    "name",
    "q",
    "st",
    "deps",
    "kids",
    "af",
    "head",
    "tail",
    "in",
    "rank",
    "pay",
    "r",
    "bf",
)
# How many fields one HMGET of a workflow asks for, at most.
PAGE = 1000
# A reference to step n's result in a template ("result", in:<n>): "@<n>".
REFERENCE = re.compile(r"@(\d+)")
ARGS = ',"args":['  # the first one in a payload is its arguments' (see messages.py)


def record_fields(
    steps: list[PlannedStep], barriers: list[Barrier], workflow_id: str, result: str
) -> tuple[list[Any], list[tuple[int, TaskMessage, str]]]:
    """The workflow HASH's fields and values (flat), and its first steps to enqueue."""
    fields: list[Any] = ["status", "RUNNING", "steps", len(steps), "left", len(steps)]
    fields += ["result", result]
    first = sum(1 for step in steps if not step.parents)  # released by the script
    fields += ["count:Q", first, "count:W", len(steps) - first]
    fields += ["kr", result_key(""), "kq", ready_key("", registry())]
    for barrier in barriers:
        b = barrier.number
        fields += [f"st:{b}", "W", f"deps:{b}", len(barrier.parents)]
        fields += [f"kids:{b}", ",".join(map(str, barrier.kids))]
        if barrier.template is not None:
            fields += [f"in:{b}", barrier.template]
    roots = []
    for step in steps:
        n = step.number
        kids = tuple(  # (a barrier has no task: see flow_settle)
            (steps[k - 1].message.id, steps[k - 1].message.queue)
            for k in step.kids
            if k <= len(steps)
        )
        flow = FlowStep(workflow=workflow_id, step=n, kids=kids, input=step.input)
        message = dataclasses.replace(step.message, flow=flow)
        fields += [f"id:{n}", message.id, f"name:{n}", message.task, f"q:{n}", message.queue]
        fields += [f"kids:{n}", ",".join(map(str, step.kids))]
        if step.allow_failure:
            fields += [f"af:{n}", "1"]
        if not step.parents:
            if step.template is not None:  # a constant: the result of an empty group
                message = dataclasses.replace(
                    message, args=[json.loads(step.template), *message.args]
                )
            roots.append((n, message, message.encode()))
            continue
        payload = message.encode()
        fields += [f"st:{n}", "W", f"deps:{n}", len(step.parents)]
        fields += [f"rank:{n}", rank(message.priority)]
        if step.template is None:
            fields += [f"head:{n}", payload]
        else:
            cut = payload.index(ARGS) + len(ARGS)
            rest = payload[cut:]
            tail = rest if rest[0] == "]" else "," + rest
            fields += [f"head:{n}", payload[:cut], f"tail:{n}", tail, f"in:{n}", step.template]
    return fields, roots


@dataclass(frozen=True)
class Step:
    """One step of a workflow as it stands."""

    number: int  # 1-based, in the order the workflow was written
    task_id: str  # its task's id (see get_result)
    task_name: str
    queue: str
    state: StepState
    value: Any  # its return value when SUCCESSFUL, its failure record when it failed


# The fields of a workflow's HASH that say how it stands (see lua/lib/flow.lua), with how
# many of its steps are in each state: a listing reads these, never its steps or results.
SUMMARY_FIELDS = (
    "status",
    "steps",
    "created_at",
    "finished_at",
    "failed",
    *(f"count:{code}" for code in STATES),
)


@dataclass(frozen=True)
class Summary:
    """A workflow at a glance: for the admin pages and ``rc_queues``."""

    id: str
    status: str  # RUNNING, SUCCESSFUL, FAILED or CANCELLED
    finished: bool  # every step has ended (or will not run)
    steps: int
    counts: dict[StepState, int]  # how many steps are in each state (those with any)
    created_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    failed_step: str | None

    @classmethod
    def of(cls, workflow_id: str, record: dict[str, bytes]) -> Summary:
        """A workflow at a glance, from its HASH's :data:`SUMMARY_FIELDS`."""
        counts = {state: int(record.get(f"count:{code}", 0)) for code, state in STATES.items()}
        failed, finished = record.get("failed"), record.get("finished_at")
        return cls(
            id=workflow_id,
            status=record["status"].decode(),
            finished=finished is not None,
            steps=int(record["steps"]),
            counts={state: count for state, count in counts.items() if count},
            created_at=django_time(int(record["created_at"])),
            finished_at=django_time(int(finished)) if finished else None,
            failed_step=failed.decode() if failed else None,
        )


def fill(template: str, value: Callable[[int], str]) -> str:
    """A result template with each "@<step>" replaced by ``value(step)``."""
    return REFERENCE.sub(lambda match: value(int(match.group(1))), template)


def step_of(record: dict[str, bytes], n: int) -> Step:
    value = record.get(f"r:{n}")
    return Step(
        number=n,
        task_id=record[f"id:{n}"].decode(),
        task_name=record[f"name:{n}"].decode(),
        queue=record[f"q:{n}"].decode(),
        state=STATES[record[f"st:{n}"].decode()],
        value=None if value is None else json.loads(value),
    )
