"""A workflow as Redis keeps it: the fields its creation writes, and the handle that
reads them.

A workflow is one HASH (``flow_key``) of the :data:`FIELDS` and :data:`STEP_FIELDS`
that ``lua/lib/flow.lua``'s header describes: :func:`record_fields` writes it from a plan
of steps (made in ``definition.py``), the scripts of ``store/`` change it as steps end,
and :class:`Workflow` (what ``enqueue()`` returns and :func:`get_workflow` finds) reads
it: a glance reads a few fields (:data:`SUMMARY_FIELDS`), never the steps or their
results, and the steps are read a page of fields per command.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .. import keys
from ..exceptions import InvalidInput, WorkflowDoesNotExist, WorkflowNotSuccessful
from .messages import Barrier, FlowStep, PlannedStep, TaskMessage
from .results import django_time
from .store import TaskStore, rank, ready_key, registry, result_key

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


# -- writing: a plan's steps as the workflow's fields ------------------------------------


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
        fields += [
            f"st:{n}",
            "W",
            f"deps:{n}",
            len(step.parents),
            f"rank:{n}",
            rank(message.priority),
        ]
        if step.template is None:
            fields += [f"head:{n}", payload]
        else:
            cut = payload.index(ARGS) + len(ARGS)
            rest = payload[cut:]
            fields += [
                f"head:{n}",
                payload[:cut],
                f"tail:{n}",
                rest if rest[0] == "]" else "," + rest,
            ]
            fields += [f"in:{n}", step.template]
    return fields, roots


# -- reading: the handle -------------------------------------------------------------


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


@dataclass(frozen=True)
class Workflow:
    """A handle on an enqueued workflow, usable from any process (:func:`get_workflow`)."""

    id: str

    def _read(self, fields: list[str]) -> dict[str, bytes]:
        """``fields`` (those it has) and its status, :data:`PAGE` fields per command."""
        wanted = ["status", *fields]
        pages = [wanted[first : first + PAGE] for first in range(0, len(wanted), PAGE)]
        record = TaskStore().workflow_pages(self.id, pages)
        if "status" not in record:
            raise WorkflowDoesNotExist(f"no workflow {self.id} is kept (unknown, or expired)")
        return record

    def _each_step(self, *fields: str) -> tuple[int, dict[str, bytes]]:
        """How many steps it has, and ``fields`` of each of them."""
        count = int(self._glance()["steps"])
        numbers = range(1, count + 1)
        return count, self._read([f"{name}:{n}" for n in numbers for name in fields])

    def _glance(self) -> dict[str, bytes]:
        """Its :data:`SUMMARY_FIELDS` (not its steps, nor their results)."""
        [record] = TaskStore().workflow_fields([self.id], SUMMARY_FIELDS)
        if "status" not in record:
            raise WorkflowDoesNotExist(f"no workflow {self.id} is kept (unknown, or expired)")
        return record

    @property
    def status(self) -> str:
        """RUNNING, SUCCESSFUL, FAILED (a step failed for good: see :attr:`failed_step`)
        or CANCELLED. A FAILED workflow may still run steps that do not depend on the
        failed one: :attr:`finished` says when nothing more will run."""
        return self._glance()["status"].decode()

    @property
    def finished(self) -> bool:
        """Whether every step has ended (or will not run)."""
        return "finished_at" in self._glance()

    @property
    def failed_step(self) -> str | None:
        """The task id of the step whose failure failed the workflow."""
        failed = self._glance().get("failed")
        return failed.decode() if failed else None

    def steps(self) -> list[Step]:
        """Every step, in the order the workflow was written."""
        count, record = self._each_step("id", "name", "q", "st", "r")
        return [_step(record, n) for n in range(1, count + 1)]

    def summary(self) -> Summary:
        """The workflow at a glance (its status, and how many steps are in each state)."""
        return Summary.of(self.id, self._glance())

    def results(self) -> Any:
        """The workflow's result once it succeeded: its last step's for a chain, the list
        of its members' results for a group (nested as the workflow is). Otherwise
        :class:`WorkflowNotSuccessful` says why."""
        record = self._read(["failed", "result"])
        status = record["status"].decode()
        if status != "SUCCESSFUL":
            failed = record.get("failed")
            raise WorkflowNotSuccessful(self.id, status, failed.decode() if failed else None)
        template = record["result"].decode()
        results = self._read([f"r:{n}" for n in REFERENCE.findall(template)])
        return json.loads(_fill(template, lambda n: results[f"r:{n}"].decode()))

    def cancel(self, *, terminate: bool = True) -> tuple[int, int]:
        """Cancel the workflow: once this returns, no step starts. Waiting steps are
        dropped, queued ones taken out of their queue, and running ones asked to stop
        (as ``cancel(task_id, terminate=True)`` does; with ``terminate=False`` they
        finish, and release nothing). Returns how many steps were dropped and how
        many were still running; a workflow that had finished is refused with
        :class:`InvalidInput`."""
        count, record = self._each_step("id", "q")
        steps = [
            (record[f"id:{n}"].decode(), record[f"q:{n}"].decode()) for n in range(1, count + 1)
        ]
        store = TaskStore()
        cancelled, status, dropped, running = store.cancel_workflow(
            self.id, steps, terminate=terminate
        )
        if status is None:
            raise WorkflowDoesNotExist(f"no workflow {self.id} is kept (unknown, or expired)")
        if cancelled:
            return dropped, running
        ended = "was cancelled already" if status == "CANCELLED" else f"has ended ({status})"
        raise InvalidInput("workflow", f"workflow {self.id} {ended}: nothing to cancel")

    def wait(self, timeout: float, interval: float = 0.05) -> str:
        """Wait until the workflow has finished, at most ``timeout`` seconds; its status.
        Raises ``TimeoutError`` if it has not. (It reads the workflow every ``interval``
        seconds: for scripts and tests, not for request handlers.)"""
        deadline = time.monotonic() + keys.seconds(timeout, "timeout")
        while True:
            record = self._glance()
            if "finished_at" in record:
                return record["status"].decode()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} has not finished in {timeout:g} s")
            time.sleep(interval)


def get_workflow(workflow_id: str) -> Workflow:
    """The workflow enqueued with this id, from any process (:class:`WorkflowDoesNotExist`
    once it expired, ``TASK_RESULT_TTL`` after it finished)."""
    keys.validate_name(workflow_id, "workflow_id", 100)
    workflow = Workflow(workflow_id)
    workflow._glance()
    return workflow


def _fill(template: str, value: Callable[[int], str]) -> str:
    """A result template with each "@<step>" replaced by ``value(step)``."""
    return REFERENCE.sub(lambda match: value(int(match.group(1))), template)


def _step(record: dict[str, bytes], n: int) -> Step:
    value = record.get(f"r:{n}")
    return Step(
        number=n,
        task_id=record[f"id:{n}"].decode(),
        task_name=record[f"name:{n}"].decode(),
        queue=record[f"q:{n}"].decode(),
        state=STATES[record[f"st:{n}"].decode()],
        value=None if value is None else json.loads(value),
    )


def workflows(limit: int = 100) -> tuple[list[Summary], list[Summary]]:
    """The running workflows (the oldest ``limit``), and the finished ones still kept
    (the latest ``limit``), at a glance: a few fields of each are read, not its steps."""
    store = TaskStore()
    live, done = store.workflow_ids(limit)
    records = store.workflow_fields([*live, *done], SUMMARY_FIELDS)
    summaries = [
        Summary.of(workflow_id, record)
        for workflow_id, record in zip([*live, *done], records, strict=True)
        if "status" in record  # (it expired between the two reads)
    ]
    return [s for s in summaries if not s.finished], [s for s in summaries if s.finished]
