"""Workflows: chains, groups and fan-in callbacks, exact when tasks run twice."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
from collections.abc import Callable

import pytest
import redis
from django.core.management import CommandError, call_command

from redis_components import cancel, chain, get_result, get_workflow, group, signature
from redis_components.exceptions import (
    InvalidInput,
    TaskSerializationError,
    WorkflowDoesNotExist,
    WorkflowNotSuccessful,
)
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import queue_stats, workers
from redis_components.tasks.store import TaskStore, flow_key
from redis_components.tasks.workflows import Step, Workflow, is_failure, workflows
from redis_components.testing import crashed_worker
from tests.processes import WorkerProcess, running_worker, wait_until
from tests.testapp import framework_tasks, tasks


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def order(r: redis.Redis) -> list[str]:
    return [label.decode() for label in r.lrange("{test}:order", 0, -1)]


def given(r: redis.Redis, label: str = "total") -> list[object]:
    return [json.loads(entry) for entry in r.lrange(f"{{test}}:given:{label}", 0, -1)]


def ready() -> int:
    [stats] = queue_stats(["test"])
    return stats.ready


def states(workflow: Workflow) -> list[str]:
    return [step.state for step in workflow.steps()]


def deliver_twice(steps: list[Step]) -> None:
    """Put a copy of each step's queued message back on its queue, as a redelivery would."""
    store = TaskStore()
    for step in steps:
        message = TaskMessage.decode(store.result_records([step.task_id])[0][0][b"message"])
        copy = dataclasses.replace(message, crashes=1)
        store.enqueue(copy, copy.encode())


def finish(workflow: Workflow, **options: object) -> str:
    with running_worker(["test"], **options):
        return workflow.wait(30)


def test_a_chain_runs_each_step_once_in_order_with_the_previous_result(r: redis.Redis) -> None:
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b"), tasks.follow.s("c")).enqueue()
    assert workflow.status == "RUNNING"
    assert states(workflow) == ["QUEUED", "WAITING", "WAITING"]
    assert finish(workflow) == "SUCCESSFUL"
    assert order(r) == ["a", "b", "c"]
    assert runs(r) == {"a": 1, "b": 1, "c": 1}
    assert workflow.results() == "a>b>c"
    assert [step.value for step in workflow.steps()] == ["a", "a>b", "a>b>c"]
    # Each step is a task with its own result.
    last = workflow.steps()[-1]
    assert get_result(last.task_id).status is TaskResultStatus.SUCCESSFUL
    assert get_result(last.task_id).args == ["a>b", "c"]


def test_a_fan_in_gets_every_result_in_the_groups_order(r: redis.Redis) -> None:
    workflow = group(tasks.member.s(f"m{i}") for i in range(20)).then(tasks.total.s()).enqueue()
    assert finish(workflow, threads=4) == "SUCCESSFUL"
    assert given(r) == [[f"m{i}" for i in range(20)]]
    assert runs(r)["total"] == 1
    assert workflow.results() == 20


def test_groups_and_chains_nest(r: redis.Redis) -> None:
    workflow = chain(
        tasks.member.s("a"),
        group([tasks.follow.s("b"), chain(tasks.follow.s("c"), tasks.follow.s("d")), group([])]),
        tasks.total.s(),
    ).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    assert given(r) == [["a>b", "a>c>d", []]]
    assert runs(r) == {"a": 1, "b": 1, "c": 1, "d": 1, "total": 1}


def test_a_group_alone_results_in_the_list_of_its_members(r: redis.Redis) -> None:
    workflow = group([tasks.add.s(1, 2), chain(tasks.add.s(3, 4), tasks.add.s(10))]).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    assert workflow.results() == [3, 17]


def test_an_empty_group_releases_its_callback_at_once(r: redis.Redis) -> None:
    workflow = group([]).then(tasks.total.s()).enqueue()
    assert states(workflow) == ["QUEUED"]
    assert finish(workflow) == "SUCCESSFUL"
    assert given(r) == [[]]
    empty = group([]).enqueue()
    assert empty.status == "SUCCESSFUL"
    assert empty.finished
    assert empty.results() == []


def test_an_immutable_step_takes_no_result() -> None:
    workflow = chain(tasks.add.s(1, 2), tasks.add.si(5, 5)).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    assert workflow.results() == 10


def test_a_member_failing_for_good_fails_the_workflow_and_its_callback_never_runs(
    r: redis.Redis,
) -> None:
    members = [tasks.member.s(f"m{i}") for i in range(9)]
    members.insert(4, tasks.fail_now.s("bad"))
    workflow = group(members).then(tasks.total.s()).enqueue()
    assert finish(workflow) == "FAILED"
    assert "total" not in runs(r)
    assert runs(r) == {**{f"m{i}": 1 for i in range(9)}, "bad": 1}
    bad = workflow.steps()[4]
    assert workflow.failed_step == bad.task_id
    assert bad.state == "FAILED"
    assert is_failure(bad.value)
    assert "ValueError" in bad.value["error"]["exception_class_path"]
    assert states(workflow)[-1] == "NOT_RUN"
    with pytest.raises(WorkflowNotSuccessful, match=f"step {bad.task_id} failed") as caught:
        workflow.results()
    assert caught.value.status == "FAILED"


def test_a_step_allowing_failure_gets_the_failure_record(r: redis.Redis) -> None:
    workflow = (
        group([tasks.member.s("ok"), tasks.fail_now.s("bad")])
        .then(tasks.total.s(), allow_failure=True)
        .enqueue()
    )
    assert finish(workflow) == "SUCCESSFUL"
    [[ok, failure]] = given(r)
    assert ok == "ok"
    assert is_failure(failure)
    assert failure["step"] == workflow.steps()[1].task_id
    assert failure["status"] == "FAILED"


def test_a_chain_stops_at_its_failed_step(r: redis.Redis) -> None:
    workflow = chain(tasks.fail_now.s("a"), tasks.follow.s("b"), tasks.follow.s("c")).enqueue()
    assert finish(workflow) == "FAILED"
    assert runs(r) == {"a": 1}
    assert states(workflow) == ["FAILED", "NOT_RUN", "NOT_RUN"]
    assert workflow.steps()[2].value == {
        "step": workflow.steps()[2].task_id,
        "status": "NOT_RUN",
        "failed": workflow.steps()[0].task_id,
    }


def test_a_retried_step_releases_nothing_until_it_succeeds(r: redis.Redis) -> None:
    workflow = chain(tasks.retry_once.si("a"), tasks.member.si("b")).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    assert order(r) == ["b"]  # retry_once counts its runs but does not record an order
    assert runs(r) == {"a": 2, "b": 1}


def test_duplicate_deliveries_count_once(r: redis.Redis) -> None:
    """Every member is in its queue twice (as a recovered worker, or a hand, would put
    it): each runs twice, the callback once, with the first results."""
    workflow = group(tasks.member.s(f"m{i}") for i in range(10)).then(tasks.total.s()).enqueue()
    deliver_twice(workflow.steps()[:-1])
    assert ready() == 20
    assert finish(workflow, threads=3) == "SUCCESSFUL"
    assert runs(r) == {**{f"m{i}": 2 for i in range(10)}, "total": 1}
    assert given(r) == [[f"m{i}" for i in range(10)]]


def test_a_step_that_ran_already_does_not_release_anything_when_it_runs_again(
    r: redis.Redis,
) -> None:
    """A step delivered again after its workflow ended: it runs, releases nothing, and
    the workflow does not change."""
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    deliver_twice(workflow.steps()[:1])
    with running_worker(["test"]):
        wait_until(lambda: runs(r).get("a") == 2)
        wait_until(lambda: ready() == 0)
    assert runs(r) == {"a": 2, "b": 1}
    assert workflow.results() == "a>b"


def test_a_step_dead_lettered_by_crashes_fails_the_workflow(r: redis.Redis) -> None:
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    crashed = crashed_worker(["test"])
    assert crashed.task_ids == [workflow.steps()[0].task_id]
    with running_worker(["test"], worker_id="live"):
        pass
    store = TaskStore()
    assert store.recover_worker(crashed.id, ["test"], only_if_expired=False, max_crashes=1)
    assert workflow.status == "FAILED"
    assert workflow.finished
    assert states(workflow) == ["FAILED", "NOT_RUN"]
    assert "WorkerCrashed" in workflow.steps()[0].value["error"]["exception_class_path"]


def test_cancelling_a_step_fails_the_steps_after_it() -> None:
    workflow = group([tasks.member.s("a"), tasks.member.s("b")]).then(tasks.total.s()).enqueue()
    assert cancel(workflow.steps()[0].task_id) == "cancelled"
    assert states(workflow) == ["CANCELLED", "QUEUED", "NOT_RUN"]
    assert workflow.status == "FAILED"
    assert finish(workflow) == "FAILED"
    assert states(workflow) == ["CANCELLED", "SUCCESSFUL", "NOT_RUN"]


def test_a_cancelled_workflow_starts_no_step(r: redis.Redis) -> None:
    workflow = group(tasks.member.s(f"m{i}") for i in range(5)).then(tasks.total.s()).enqueue()
    assert workflow.cancel() == (6, 0)
    assert workflow.status == "CANCELLED"
    assert workflow.finished
    assert set(states(workflow)) == {"CANCELLED"}
    assert ready() == 0
    assert all(
        get_result(s.task_id).status is TaskResultStatus.FAILED for s in workflow.steps()[:5]
    )
    with running_worker(["test"]):
        pass
    assert runs(r) == {}
    with pytest.raises(InvalidInput, match="cancelled already"):
        workflow.cancel()


def test_a_step_running_when_its_workflow_is_cancelled_releases_nothing(r: redis.Redis) -> None:
    """With terminate=False the running step ends, and its outcome changes nothing."""
    workflow = chain(tasks.gated.si("a"), tasks.member.si("b")).enqueue()
    with running_worker(["test"]):
        wait_until(lambda: r.exists("test:a:started"))
        assert workflow.cancel(terminate=False) == (1, 1)
        r.set("test:a:open", 1)
        assert workflow.wait(30) == "CANCELLED"
    assert states(workflow) == ["SUCCESSFUL", "CANCELLED"]
    assert "b" not in runs(r)


def test_a_cancelled_workflows_step_held_by_a_dead_worker_is_not_put_back(r: redis.Redis) -> None:
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    crashed = crashed_worker(["test"])
    assert workflow.cancel() == (1, 1)
    assert TaskStore().recover_worker(
        crashed.id, ["test"], only_if_expired=False, max_crashes=3
    ) == (0, 0)
    assert ready() == 0
    assert states(workflow) == ["CANCELLED", "CANCELLED"]
    assert workflow.finished


def test_a_workflow_expires_only_once_it_has_finished(r: redis.Redis) -> None:
    workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
    assert r.pttl(flow_key(workflow.id)) == -1
    [running] = workflows()[0]
    assert running.id == workflow.id
    assert running.counts == {"QUEUED": 1, "WAITING": 1}
    assert running.status == "RUNNING"
    assert not running.finished
    finish(workflow)
    assert 0 < r.pttl(flow_key(workflow.id)) <= 86_400_000
    live, done = workflows()
    assert live == []
    assert [w.id for w in done] == [workflow.id]
    assert done[0].counts == {"SUCCESSFUL": 2}
    assert get_workflow(workflow.id).results() == "a>b"


def test_creation_is_all_or_nothing(r: redis.Redis) -> None:
    steps = [tasks.member.s(f"m{i}") for i in range(100)]
    steps[70] = tasks.member.s(float("nan"))
    with pytest.raises(TaskSerializationError):
        group(steps).then(tasks.total.s()).enqueue()
    assert ready() == 0
    assert workflows() == ([], [])


def test_bad_workflows_are_refused_with_a_clear_error() -> None:
    with pytest.raises(InvalidInput, match="at least one step"):
        chain()
    with pytest.raises(InvalidInput, match=r"use tests\.testapp\.tasks\.member\.s"):
        chain(tasks.member, tasks.follow.s("b"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="iterable of steps"):
        group(tasks.member.s("a"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="must hold steps"):
        group([1])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="must be a task"):
        signature(print)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="workflow_id"):
        get_workflow("")
    with pytest.raises(WorkflowDoesNotExist):
        get_workflow("0" * 32)


def test_django_tasks_are_steps_through_signature() -> None:
    workflow = chain(
        signature(framework_tasks.multiply, 2, 3),
        signature(framework_tasks.async_multiply, 4),
        tasks.add.s(1),
    ).enqueue()
    assert finish(workflow) == "SUCCESSFUL"
    assert workflow.results() == 25


def child_pid() -> int:
    [child] = [w.pid for w in workers()]
    assert child is not None
    return child


@pytest.mark.parametrize("twice", [False, True], ids=["once", "delivered-twice"])
def test_a_fan_in_of_200_runs_once_through_two_kill_9s(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], twice: bool
) -> None:
    workflow = group(tasks.member.s(f"m{i}", 0.02) for i in range(200)).then(tasks.total.s())
    handle = workflow.enqueue()
    if twice:
        deliver_twice(handle.steps()[:-1])
    worker = start_worker("test", "-c", "2")
    for after in (40, 120):
        wait_until(lambda after=after: len(runs(r)) >= after, worker.output)
        pids = [w.pid for w in workers()]
        assert pids[0] is not None
        os.kill(pids[0], signal.SIGKILL)
    assert handle.wait(60) == "SUCCESSFUL"
    assert runs(r)["total"] == 1
    assert given(r) == [[f"m{i}" for i in range(200)]]
    if twice:  # a copy may still run after the callback: every one has run in the end
        wait_until(lambda: all(runs(r).get(f"m{i}", 0) >= 2 for i in range(200)), worker.output)
    assert all(runs(r)[f"m{i}"] in ((2, 3) if twice else (1, 2)) for i in range(200))
    assert runs(r)["total"] == 1
    assert worker.output().count("put back") >= 2
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_chain_cancelled_while_its_first_step_runs_runs_no_later_step(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    workflow = chain(tasks.member.s("a", 30.0), tasks.follow.s("b"), tasks.follow.s("c")).enqueue()
    worker = start_worker("test")
    wait_until(lambda: runs(r).get("a") == 1, worker.output)
    assert workflow.cancel() == (2, 1)
    assert workflow.wait(30) == "CANCELLED"
    assert states(workflow) == ["CANCELLED", "CANCELLED", "CANCELLED"]
    assert runs(r) == {"a": 1}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {"a": 1}


def rc_queues(*args: str) -> str:
    out = io.StringIO()
    call_command("rc_queues", *args, stdout=out)
    return out.getvalue()


def test_rc_queues_lists_running_workflows_and_cancels_one() -> None:
    workflow = group(tasks.member.s(f"m{i}") for i in range(3)).then(tasks.total.s()).enqueue()
    shown = rc_queues()
    assert "Running workflows: 1" in shown
    [row] = [line for line in shown.splitlines() if line.startswith(workflow.id)]
    assert row.split()[1:3] == ["RUNNING", "4"]
    assert "1 waiting, 3 queued" in row
    assert "cancelled (4 steps dropped, 0 running" in rc_queues("--cancel-workflow", workflow.id)
    listed = rc_queues("--workflows")
    assert f"{workflow.id}  CANCELLED" in listed
    assert "4 cancelled" in listed
    with pytest.raises(CommandError, match="cancelled already"):
        rc_queues("--cancel-workflow", workflow.id)
    with pytest.raises(CommandError, match="no workflow"):
        rc_queues("--cancel-workflow", "f" * 32)
    assert "workflows" not in rc_queues()
