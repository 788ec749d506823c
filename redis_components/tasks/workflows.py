"""Workflows: chains, groups and fan-in callbacks of tasks, exact under at-least-once
delivery.

A workflow is a graph of steps, each a task run with a :class:`Signature`'s arguments::

    chain(fetch.s(url), parse.s(), store.s())            # each gets the last one's result
    group(resize.s(image) for image in images).then(publish.s(album))  # fan-in, in order
    chain(charge.s(order), group([ship.s(), email.s()]))  # both get charge's result

``enqueue()`` writes the whole graph and enqueues its first steps in one script
(``lua/flow_create.lua``): an interrupted enqueue leaves nothing. Each later step is
released by the script that records the final outcome of the last step it waits for
(``lua/lib/flow.lua``, included by the fetch, recovery and cancel scripts): no polling
task, no sweeper, no round trip of its own. A step's outcome counts once (the first
final one: a step run twice by a recovered worker, or enqueued twice by hand, changes
nothing the second time), a retry changes nothing downstream, and a step that fails
for good marks every step after it as not run in the same script, unless that step
allows its parents' failure (``allow_failure``: it then gets the failure record in
place of the result).

Every key of a workflow is in the task system's hash tag, where its queues are: on
Redis Cluster the release into any queue is a write of the same script, on the same
shard, so it happens exactly once with the outcome that causes it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import keys
from ..exceptions import InvalidInput, WorkflowDoesNotExist, WorkflowNotSuccessful
from .backend import RedisTaskBackend, django_time
from .framework import Task
from .messages import FlowStep, TaskMessage, new_task_id
from .store import TaskStore, rank, ready_key, result_key

# The most steps one workflow may have: its creation is one script, which must stay short.
MAX_STEPS = 10_000

StepState: TypeAlias = Literal["WAITING", "QUEUED", "SUCCESSFUL", "FAILED", "CANCELLED", "NOT_RUN"]
STATES: dict[str, StepState] = {
    "W": "WAITING",  # for the steps before it
    "Q": "QUEUED",  # released: waiting in its queue, running, or waiting for a retry
    "S": "SUCCESSFUL",
    "F": "FAILED",
    "C": "CANCELLED",
    "N": "NOT_RUN",  # a step before it failed
}


@dataclass(frozen=True)
class Signature:
    """A call of a task to make as a workflow's step: ``task.s(*args, **kwargs)``.

    A step after another gets that step's result as its first argument (before
    ``args``), unless it is ``immutable`` (``task.si(...)``). With ``allow_failure``
    it runs even when a step it waits for failed for good (or was cancelled), and gets
    that step's failure record in place of its result: a dict ``{"step": <task id>,
    "status": "FAILED" or "CANCELLED", "error": {...}}`` (see :func:`is_failure`).
    """

    task: Task[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False
    allow_failure: bool = False

    def set(self, *, immutable: bool | None = None, allow_failure: bool | None = None) -> Signature:
        """This signature with ``immutable`` or ``allow_failure`` changed."""
        return dataclasses.replace(
            self,
            immutable=self.immutable if immutable is None else immutable,
            allow_failure=self.allow_failure if allow_failure is None else allow_failure,
        )

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """``chain(self, step)``."""
        return chain(self, _after(step, allow_failure))

    def enqueue(self) -> Workflow:
        """Enqueue this step alone, as a workflow of one."""
        return enqueue(self)


@dataclass(frozen=True)
class Chain:
    """Steps run one after the other, each given the previous one's result
    (:func:`chain`). Its result is its last step's."""

    steps: tuple[Node, ...]

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """This chain with ``step`` after it."""
        return Chain((*self.steps, _after(step, allow_failure)))

    def enqueue(self) -> Workflow:
        return enqueue(self)


@dataclass(frozen=True)
class Group:
    """Steps run in parallel (:func:`group`). Its result is the list of its members'
    results, in the group's order."""

    members: tuple[Node, ...]

    def then(self, step: Node, *, allow_failure: bool = False) -> Chain:
        """A fan-in: ``step`` runs once, after every member succeeded, given the list of
        their results. With ``allow_failure`` it runs once every member has ended, the
        failed ones' failure records in their places."""
        return Chain((self, _after(step, allow_failure)))

    def enqueue(self) -> Workflow:
        return enqueue(self)


Node: TypeAlias = Signature | Chain | Group


def signature(task: Task[..., Any], *args: Any, **kwargs: Any) -> Signature:
    """A call of ``task`` (any task whose backend is a :class:`RedisTaskBackend`, ours or
    Django's ``@task``) as a workflow's step; ``task.s(...)`` for ours."""
    if not isinstance(task, Task):
        raise InvalidInput("task", f"must be a task (made by @task), not {type(task).__name__}")
    backend = task.get_backend()
    if not isinstance(backend, RedisTaskBackend):
        raise InvalidInput(
            "task", f"{task.name!r} runs on {type(backend).__name__}: steps need a RedisTaskBackend"
        )
    if task.run_after is not None:
        raise InvalidInput("task", "a step runs when the steps before it end: no run_after")
    backend.validate_task(task)
    return Signature(task, args, kwargs)


def chain(*steps: Node) -> Chain:
    """Run ``steps`` one after the other, each given the previous one's result as its
    first argument; a step that fails for good stops the chain."""
    if not steps:
        raise InvalidInput("steps", "a chain needs at least one step")
    return Chain(tuple(_node(step, "steps") for step in steps))


def group(steps: Iterable[Node]) -> Group:
    """Run ``steps`` (a list, or any iterable: a generator too) in parallel. An empty
    group's result is ``[]``, at once."""
    if isinstance(steps, (Signature, Chain, Group)) or not isinstance(steps, Iterable):
        raise InvalidInput("steps", "must be an iterable of steps (task.s(...)), as a list")
    return Group(tuple(_node(step, "steps") for step in steps))


def is_failure(value: object) -> bool:
    """Whether a step's argument is the failure record of a step before it (which only
    a step with ``allow_failure`` can get)."""
    return (
        isinstance(value, dict)
        and set(value) <= {"step", "status", "error", "failed"}
        and value.get("status") in ("FAILED", "CANCELLED", "NOT_RUN")
    )


def _node(step: object, name: str) -> Node:
    if isinstance(step, (Signature, Chain, Group)):
        return step
    if isinstance(step, Task):
        raise InvalidInput(name, f"{step.name!r} is a task, not a step: use {step.name}.s(...)")
    raise InvalidInput(name, f"must hold steps (task.s(...)), not {type(step).__name__}")


def _after(step: Node, allow_failure: bool) -> Node:
    step = _node(step, "step")
    if not allow_failure:
        return step
    if not isinstance(step, Signature):
        raise InvalidInput("allow_failure", "applies to one step: set it on a signature")
    return step.set(allow_failure=True)


# -- planning: the graph of steps that a workflow writes -----------------------------


@dataclass
class _Step:
    number: int
    signature: Signature
    parents: tuple[int, ...]
    template: str | None  # its first argument: JSON with "@<step>" for results
    message: TaskMessage
    kids: list[int] = field(default_factory=list)
    input: int = 0  # or the barrier whose result is its first argument (FlowStep.input)


@dataclass
class _Barrier:
    """Not a step: it stands between many parents and many children that wait for all of
    them (``chain(group(N), group(M))``), so that the workflow holds N + M links, not
    N x M, and one copy of the children's input, which each reads when it runs (see
    lua/lib/flow.lua and FlowStep.input)."""

    number: int  # after every step's
    parents: tuple[int, ...]
    kids: list[int]
    template: str | None


class _Plan:
    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.barriers: list[_Barrier] = []

    def link(self) -> None:
        """Put a barrier between each set of parents and the children that all wait
        for it, where both are several."""
        children: dict[tuple[int, ...], list[_Step]] = {}
        for step in self.steps:
            if len(step.parents) > 1:
                children.setdefault(step.parents, []).append(step)
        for parents, kids in children.items():
            if len(kids) < 2:
                continue
            number = len(self.steps) + len(self.barriers) + 1
            templates = {kid.template for kid in kids} - {None}
            template = templates.pop() if len(templates) == 1 else None
            self.barriers.append(_Barrier(number, parents, [kid.number for kid in kids], template))
            moved = {kid.number for kid in kids}
            for parent in parents:
                step = self.steps[parent - 1]
                step.kids = [*(k for k in step.kids if k not in moved), number]
            for kid in kids:
                kid.parents = (number,)
                if template is not None and kid.template == template:
                    kid.template, kid.input = None, number

    def add(
        self, node: Node, parents: tuple[int, ...], template: str | None
    ) -> tuple[str, tuple[int, ...]]:
        """Add ``node`` after ``parents``, given ``template`` as its input; its result's
        template, and the steps whose ends make that result."""
        if isinstance(node, Signature):
            number = len(self.steps) + 1
            if number > MAX_STEPS:
                raise InvalidInput("steps", f"a workflow has at most {MAX_STEPS:,} steps")
            backend = node.task.get_backend()
            assert isinstance(backend, RedisTaskBackend)  # signature() checked it
            given = None if node.immutable else template
            # Its function must take the arguments, after its input if it gets one.
            piped = given is not None
            message = backend.prepare(node.task, node.args, node.kwargs, piped=piped).message
            self.steps.append(_Step(number, node, parents, given, message))
            for parent in parents:
                self.steps[parent - 1].kids.append(number)
            return f"@{number}", (number,)
        if isinstance(node, Chain):
            for step in node.steps:
                template, parents = self.add(step, parents, template)
            assert template is not None  # a chain has a step
            return template, parents
        results: list[str] = []
        ends: list[int] = []
        for member in node.members:
            result, last = self.add(member, parents, template)
            results.append(result)
            ends += last
        # An empty group has ended when the steps before it have.
        return "[" + ",".join(results) + "]", tuple(dict.fromkeys(ends)) if results else parents


ARGS = ',"args":['  # the first one in a payload is its arguments' (see messages.py)


def _fields(
    plan: _Plan, workflow_id: str, result: str
) -> tuple[list[Any], list[tuple[int, TaskMessage, str]]]:
    """The workflow HASH's fields and values (flat), and its first steps to enqueue."""
    fields: list[Any] = ["status", "RUNNING", "steps", len(plan.steps), "left", len(plan.steps)]
    fields += ["result", result]
    first = sum(1 for step in plan.steps if not step.parents)  # released by the script
    fields += ["count:Q", first, "count:W", len(plan.steps) - first]
    fields += ["kr", result_key(""), "kq", ready_key("")]
    for barrier in plan.barriers:
        b = barrier.number
        fields += [f"st:{b}", "W", f"deps:{b}", len(barrier.parents)]
        fields += [f"kids:{b}", ",".join(map(str, barrier.kids))]
        if barrier.template is not None:
            fields += [f"in:{b}", barrier.template]
    roots = []
    for step in plan.steps:
        n = step.number
        kids = tuple(  # (a barrier has no task: see flow_settle)
            (plan.steps[k - 1].message.id, plan.steps[k - 1].message.queue)
            for k in step.kids
            if k <= len(plan.steps)
        )
        flow = FlowStep(workflow_id, n, kids, step.input)
        message = dataclasses.replace(step.message, flow=flow)
        fields += [f"id:{n}", message.id, f"name:{n}", message.task, f"q:{n}", message.queue]
        fields += [f"kids:{n}", ",".join(map(str, step.kids))]
        if step.signature.allow_failure:
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


def enqueue(node: Node) -> Workflow:
    """Write the workflow of ``node`` and enqueue its first steps, all or nothing."""
    plan = _Plan()
    result, _ = plan.add(_node(node, "workflow"), (), None)
    plan.link()
    workflow_id = new_task_id()
    fields, roots = _fields(plan, workflow_id, result)
    tasks = TaskStore()
    try:
        created = tasks.create_workflow(workflow_id, fields, roots)
    except (RedisConnectionError, RedisTimeoutError):
        # The reply was lost: the script may have run. Its id is ours (chosen before), and
        # a read on the server comes after the script: return the workflow if it exists.
        if "status" in tasks.workflow_fields([workflow_id], ["status"])[0]:
            return Workflow(workflow_id)
        raise
    if created is None:  # pragma: no cover
        raise RuntimeError(f"workflow id {workflow_id} is taken: 128 random bits collided")
    return Workflow(workflow_id)


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

    def _record(self) -> dict[str, bytes]:
        record = TaskStore().workflow_record(self.id)
        if not record:
            raise WorkflowDoesNotExist(f"no workflow {self.id} is kept (unknown, or expired)")
        return record

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
        return _steps(self._record())

    def summary(self) -> Summary:
        """The workflow at a glance (its status, and how many steps are in each state)."""
        return Summary.of(self.id, self._glance())

    def results(self) -> Any:
        """The workflow's result once it succeeded: its last step's for a chain, the list
        of its members' results for a group (nested as the workflow is). Otherwise
        :class:`WorkflowNotSuccessful` says why."""
        record = self._record()
        status = record["status"].decode()
        if status != "SUCCESSFUL":
            failed = record.get("failed")
            raise WorkflowNotSuccessful(self.id, status, failed.decode() if failed else None)
        template = record["result"].decode()
        return json.loads(_fill(template, lambda n: record[f"r:{n}"].decode()))

    def cancel(self, *, terminate: bool = True) -> tuple[int, int]:
        """Cancel the workflow: once this returns, no step starts. Waiting steps are
        dropped, queued ones taken out of their queue, and running ones asked to stop
        (as ``cancel(task_id, terminate=True)`` does; with ``terminate=False`` they
        finish, and release nothing). Returns how many steps were dropped and how
        many were still running; a workflow that had finished is refused with
        :class:`InvalidInput`."""
        record = self._record()
        count = int(record["steps"])
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
    return re.sub(r"@(\d+)", lambda match: value(int(match.group(1))), template)


def _steps(record: dict[str, bytes]) -> list[Step]:
    found = []
    for n in range(1, int(record["steps"]) + 1):
        state = STATES[record[f"st:{n}"].decode()]
        value = record.get(f"r:{n}")
        found.append(
            Step(
                number=n,
                task_id=record[f"id:{n}"].decode(),
                task_name=record[f"name:{n}"].decode(),
                queue=record[f"q:{n}"].decode(),
                state=state,
                value=None if value is None else json.loads(value),
            )
        )
    return found


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


__all__ = [
    "Chain",
    "Group",
    "Signature",
    "Step",
    "Summary",
    "Workflow",
    "chain",
    "get_workflow",
    "group",
    "is_failure",
    "signature",
    "workflows",
]
