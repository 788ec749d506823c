"""A property of workflows over random graphs of chains and groups: whatever the order in
which workers finish steps, fail them, crash while holding them or get them twice,
every workflow ends, each step is released at most once (and run only once released),
no step starts before the steps it waits for have ended, and a workflow that succeeds
holds the results its graph says.

The workers here are redis_components.testing's ScriptedWorker (the calls a worker
makes, through the store's worker side), driven by Hypothesis: each step's "run"
returns its arguments, so the expected results follow from the graph alone.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from redis_components.tasks.execution import with_input
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.store import TaskStore
from redis_components.tasks.workflows import Chain, Group, Node, Signature, Workflow, chain, group
from redis_components.testing import ScriptedWorker
from tests.testapp import tasks

QUEUE = "test"

labels = st.text("abcdefgh", min_size=1, max_size=3)
leaves = labels.map(lambda label: tasks.member.s(label))
graphs: st.SearchStrategy[Node] = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda steps: chain(*steps)),
        st.lists(inner, max_size=3).map(group),
        st.tuples(st.lists(inner, max_size=3), leaves, st.booleans()).map(
            lambda t: group(t[0]).then(t[1], allow_failure=t[2])
        ),
    ),
    max_leaves=12,
)


def expected(node: Node, given_input: Any = None, has_input: bool = False) -> Any:
    """What a workflow of ``node`` results in when every step returns its arguments."""
    if isinstance(node, Signature):
        return ([given_input] if has_input else []) + list(node.args)
    if isinstance(node, Chain):
        for step in node.steps:
            given_input, has_input = expected(step, given_input, has_input), True
        return given_input
    assert isinstance(node, Group)
    return [expected(member, given_input, has_input) for member in node.members]


class Workers:
    """Workers as the scripts see them (the test double's calls, which are a worker's):
    each takes one task and holds it until it finishes it (ok, failed for good) or dies."""

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.held: list[tuple[ScriptedWorker, TaskMessage]] = []
        self.released: Counter[str] = Counter()  # first deliveries of each task id
        self.copies = 0

    def take(self) -> bool:
        worker = ScriptedWorker([QUEUE])
        message = worker.take()
        if message is None:
            worker.stop()
            return False
        if not message.crashes and message.scheduled_for is None:  # not a copy of ours
            self.released[message.id] += 1
            assert message.flow is not None
            self.check_parents_ended(message)
        self.held.append((worker, message))
        return True

    def check_parents_ended(self, message: TaskMessage) -> None:
        assert message.flow is not None
        workflow = message.flow.workflow
        [glance] = self.store.workflow_fields([workflow], ["steps"])
        count = int(glance["steps"])
        fields = [f"{name}:{n}" for n in range(1, count + 1) for name in ("kids", "st")]
        record = self.store.workflow_pages(workflow, [fields])
        step = str(message.flow.step)
        for n in range(1, count + 1):
            if step in record[f"kids:{n}"].decode().split(","):
                assert record[f"st:{n}"] in (b"S", b"F", b"C"), "a step ran before its parent"

    def finish(self, index: int, how: str) -> None:
        worker, message = self.held.pop(index)
        if how == "crash":
            worker.crash(max_crashes=2)
            return
        if how == "duplicate":  # delivered again: a copy waits in the queue
            # Marked, and unlike any other payload (two equal payloads would be one
            # member of the queue's ZSET, and Hypothesis would see a run it cannot replay).
            self.copies += 1
            copy = dataclasses.replace(message, scheduled_for=self.copies, enqueued_at=None)
            self.store.enqueue(copy, copy.encode())
        given = with_input(message)  # as a worker runs it: with its input, if it has one
        assert given is not None
        if how == "fail":
            assert worker.fail(message.id, ValueError("boom"))
        else:
            assert worker.succeed(message.id, given.args)
        worker.stop()


# What the workers do, in order: take a task (when there is one, else finish one), or
# finish the n-th task held (modulo how many are held) in one of these ways.
HOW = ["ok"] * 6 + ["fail", "duplicate", "crash"]
moves = st.lists(st.one_of(st.just("take"), st.tuples(st.integers(0, 20), st.sampled_from(HOW))))


@pytest.mark.usefixtures("r")
@settings(
    max_examples=60,
    deadline=None,
    database=None,  # each run explores afresh: Redis holds the state, not the example
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(nodes=st.lists(graphs, min_size=1, max_size=3), plan=moves)
# Always tried: a group after a group, whose members read their input from the workflow.
@example(nodes=[chain(group([tasks.member.s("a")] * 2), group([tasks.member.s("b")] * 2))], plan=[])
def test_every_workflow_ends_exactly_whatever_workers_do(
    nodes: list[Node], plan: list[str | tuple[int, str]]
) -> None:
    """The moves are drawn before anything runs (what Redis holds cannot change what
    Hypothesis draws); once they are used up, the workers take and finish every task
    that is left."""
    store = TaskStore()
    handles = [node.enqueue() for node in nodes]
    workers = Workers(store)
    for move in plan:
        if move == "take" and workers.take():
            continue
        if workers.held:
            index, how = move if isinstance(move, tuple) else (0, "ok")
            workers.finish(index % len(workers.held), how)
    for _ in range(10_000):
        if workers.held:
            workers.finish(0, "ok")
        elif not workers.take():
            break
    else:
        raise AssertionError("the workers never ran out of tasks")
    for node, handle in zip(nodes, handles, strict=True):
        check(node, handle, workers.released)


def check(node: Node, workflow: Workflow, released: Counter[str]) -> None:
    summary = workflow.summary()
    assert summary.finished, summary
    for step in workflow.steps():
        assert step.state in ("SUCCESSFUL", "FAILED", "CANCELLED", "NOT_RUN"), step
        assert released[step.task_id] == (0 if step.state == "NOT_RUN" else 1), step
    if summary.status == "SUCCESSFUL" and set(summary.counts) == {"SUCCESSFUL"}:
        assert workflow.results() == expected(node)
    if "FAILED" in summary.counts and summary.status == "SUCCESSFUL":
        # Every failure was passed to a step that allows it.
        assert "NOT_RUN" not in summary.counts


def test_the_property_tests_own_model_of_results(r: redis.Redis) -> None:
    """The model above agrees with a workflow run by a real worker."""
    from tests.processes import running_worker

    node = chain(tasks.add.s(1, 2), group([tasks.add.s(3), chain(tasks.add.s(4), tasks.add.s(5))]))
    workflow = node.enqueue()
    with running_worker([QUEUE]):
        assert workflow.wait(30) == "SUCCESSFUL"
    assert workflow.results() == [6, 12]
    assert expected(chain(tasks.member.s("a"), group([tasks.member.s("b")]))) == [[["a"], "b"]]
