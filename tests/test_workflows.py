"""Workflows: chains, groups and fan-in callbacks, exact when tasks run twice."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test import override_settings
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from conftest import CLUSTER, bytes_sent, long_test
from redis_components import cancel, chain, get_result, get_workflow, group, signature
from redis_components.exceptions import (
    InvalidInput,
    TaskResultDoesNotExist,
    TaskSerializationError,
    WorkflowDoesNotExist,
    WorkflowNotSuccessful,
)
from redis_components.scripts import LUA_DIR
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import PlannedStep
from redis_components.tasks.status import queue_stats, workers
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.flow_records import FIELDS, STEP_FIELDS
from redis_components.tasks.store.layout import (
    flow_key,
    released_key,
    result_key,
    settled_elsewhere,
)
from redis_components.tasks.worker import Worker
from redis_components.tasks.workflows import (
    MAX_STEPS,
    STATES,
    Step,
    Workflow,
    is_failure,
    workflows,
)
from redis_components.testing import crashed_worker
from tests.processes import WorkerProcess, running_worker, wait_until
from tests.settings import caches
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


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
    """Put a copy of each step's queued message back on its queue, as a redelivery would.

    The copy's bytes differ from the queued message and from what a crash puts back (the
    message with ``"crashes":1``): a ready ZSET holds a payload once, so a copy equal to
    a put-back task would be one entry with it, and run once.
    """
    store = TaskStore()
    for step in steps:
        message = store.queued_message(step.task_id)
        assert message is not None
        assert message.enqueued_at is not None
        copy = dataclasses.replace(message, crashes=1, enqueued_at=None)
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


def run_one() -> None:
    """One worker takes one task, runs it and records its outcome."""
    assert Worker(["test"], max_tasks=1).run() == 1


@pytest.mark.parametrize("shape", ["one step", "group", "chain on its last step"])
def test_a_workflow_whose_unfinished_steps_all_run_is_cancelled(shape: str) -> None:
    """Nothing is waiting or queued: the cancel drops no step, and asks the running ones
    to stop (on Redis 6.2 too, where this once raised after writing CANCELLED)."""
    if shape == "one step":
        workflow = tasks.member.s("a").enqueue()
        take = 1
    elif shape == "group":
        workflow = group([tasks.member.s("a"), tasks.member.s("b")]).enqueue()
        take = 2
    else:
        workflow = chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue()
        run_one()
        take = 1
    crashed = crashed_worker(["test"], take=take)
    assert len(crashed.task_ids) == take
    assert workflow.cancel() == (0, take)
    assert workflow.status == "CANCELLED"
    assert not workflow.finished  # its steps still run
    with pytest.raises(InvalidInput, match="cancelled already"):
        workflow.cancel()
    assert TaskStore().recover_worker(
        crashed.id, ["test"], only_if_expired=False, max_crashes=3
    ) == (0, 0)
    assert workflow.finished
    assert workflow.status == "CANCELLED"
    assert states(workflow)[-take:] == ["CANCELLED"] * take
    assert ready() == 0


def test_a_cancel_that_fails_changes_nothing(r: redis.Redis) -> None:
    """Hostile data: a key the cancel's script reads holds a string (a step's result
    key; on a cluster, where the steps live in their queues' homes, the workflows'
    outbox). The script reads everything it needs before its first write, so its error
    leaves the workflow as it was."""
    workflow = group([tasks.member.s("a"), tasks.member.s("b")]).then(tasks.total.s()).enqueue()
    step = workflow.steps()[1].task_id
    r.set(released_key() if settled_elsewhere(step) else result_key(step), "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        workflow.cancel()
    assert workflow.status == "RUNNING"
    assert states(workflow) == ["QUEUED", "QUEUED", "WAITING"]
    assert ready() == 2


def test_a_cancelled_workflows_step_waiting_for_a_retry_never_runs_even_if_its_result_expired(
    r: redis.Redis,
) -> None:
    """The step's result (which names its delivery as it waits) expired before the
    cancel: the cancel still takes that delivery out of its queue."""
    workflow = chain(tasks.retry_once.si("a"), tasks.member.si("b")).enqueue()
    with override_settings(REDIS_COMPONENTS={"TASK_RESULT_TTL": 0.1}):
        run_one()  # asks for a retry in 10 ms: it waits in its queue
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.delayed) == (0, 1)
    first = workflow.steps()[0]
    wait_until(lambda: not result_kept(first.task_id))
    assert workflow.cancel() == (2, 0)
    assert workflow.status == "CANCELLED"
    assert workflow.finished
    [stats] = queue_stats(["test"])
    assert (stats.ready, stats.delayed) == (0, 0)
    time.sleep(0.02)  # the retry was due
    assert Worker(["test"], burst=True).run() == 0
    assert runs(r) == {"a": 1}
    assert states(workflow) == ["CANCELLED", "CANCELLED"]


def test_a_cancelled_workflows_step_put_back_after_a_crash_never_runs_even_if_its_result_expired(
    r: redis.Redis,
) -> None:
    workflow = chain(tasks.member.si("a"), tasks.member.si("b")).enqueue()
    crashed = crashed_worker(["test"])
    with override_settings(REDIS_COMPONENTS={"TASK_RESULT_TTL": 0.1}):
        assert TaskStore().recover_worker(
            crashed.id, ["test"], only_if_expired=False, max_crashes=3
        ) == (1, 0)
    assert ready() == 1
    first = workflow.steps()[0]
    wait_until(lambda: not result_kept(first.task_id))
    assert workflow.cancel() == (2, 0)
    assert ready() == 0
    assert Worker(["test"], burst=True).run() == 0
    assert runs(r) == {}
    assert states(workflow) == ["CANCELLED", "CANCELLED"]


def result_kept(task_id: str) -> bool:
    try:
        get_result(task_id)
    except TaskResultDoesNotExist:
        return False
    return True


LONG = long_test("runs 8,000 tasks or more")


@LONG
def test_a_fan_in_of_the_most_members_a_workflow_may_have_gets_every_result_in_order(
    r: redis.Redis,
) -> None:
    """Its release reads the members' results in pages (Lua cannot unpack 8,000)."""
    size = MAX_STEPS - 1
    workflow = group(tasks.add.s(i, 1) for i in range(size)).then(tasks.total.s()).enqueue()
    assert Worker(["test"], burst=True).run() == MAX_STEPS
    assert workflow.status == "SUCCESSFUL"
    assert given(r) == [list(range(1, size + 1))]
    assert workflow.results() == size
    assert runs(r) == {"total": 1}


@LONG
def test_cancelling_the_last_member_of_a_fan_in_of_8000_releases_its_callback(
    r: redis.Redis,
) -> None:
    size = 8000
    workflow = (
        group(tasks.add.s(i, 1) for i in range(size))
        .then(tasks.total.s(), allow_failure=True)
        .enqueue()
    )
    assert Worker(["test"], burst=True, max_tasks=size - 1).run() == size - 1
    last = workflow.steps()[size - 1]
    assert last.state == "QUEUED"
    assert cancel(last.task_id) == "cancelled"
    assert states(workflow)[-1] == "QUEUED"  # the callback, which allows a failure
    assert Worker(["test"], burst=True).run() == 1
    assert workflow.status == "SUCCESSFUL"
    [results] = given(r)
    assert isinstance(results, list)
    assert results[:-1] == list(range(1, size))
    assert results[-1] == {"step": last.task_id, "status": "CANCELLED"}


def test_listing_workflows_reads_how_they_stand_not_their_steps(r: redis.Redis) -> None:
    """Three finished workflows each hold a result of 1 MB, two running ones a step
    whose argument is 1 MB: a listing reads a few fields of each."""
    big = "x" * 1_000_000
    finished = [tasks.echo.si(big).enqueue() for _ in range(3)]
    assert Worker(["test"], burst=True).run() == 3
    running = [chain(tasks.echo.si(big), tasks.add.si(1, 2)).enqueue() for _ in range(2)]

    before = bytes_sent(r)
    live, done = workflows()
    assert bytes_sent(r) - before < 20_000
    assert [summary.id for summary in live] == [workflow.id for workflow in running]
    assert {summary.id for summary in done} == {workflow.id for workflow in finished}
    assert [summary.counts for summary in live] == [{"QUEUED": 1, "WAITING": 1}] * 2
    assert [summary.counts for summary in done] == [{"SUCCESSFUL": 1}] * 3
    assert all(summary.finished_at is not None for summary in done)
    assert [*live, *done] == [get_workflow(summary.id).summary() for summary in [*live, *done]]

    before = bytes_sent(r)
    shown = rc_queues()
    assert bytes_sent(r) - before < 20_000
    assert "Running workflows: 2" in shown
    assert all(f"{workflow.id}  RUNNING" in shown for workflow in running)

    before = bytes_sent(r)
    shown = rc_queues("--workflows")
    assert bytes_sent(r) - before < 20_000
    assert all(f"{workflow.id}  SUCCESSFUL" in shown for workflow in finished)
    assert shown.count("1 waiting, 1 queued") == 2


def described_fields() -> tuple[set[str], set[str]]:
    """The fields lua/lib/flow.lua's header lists: the workflow's own, and each step's."""
    source = (LUA_DIR / "lib" / "flow.lua").read_text("utf-8")
    header = source.split("-- The fields of the HASH", 1)[1].split("-- A barrier (see", 1)[0]
    own: set[str] = set()
    steps: set[str] = set()
    for names in re.findall(r"^--   (\S.*?)(?:\s{2,}|$)", header, re.M):
        for name in names.split(", "):
            base, _, suffix = name.partition(":")
            (steps if suffix == "<n>" else own).add(base)
    return own, steps


def test_flow_lua_describes_exactly_the_fields_of_a_workflow() -> None:
    assert described_fields() == (set(FIELDS), set(STEP_FIELDS))


def test_a_workflow_holds_only_its_fields_and_drops_a_released_steps_copies(
    r: redis.Redis,
) -> None:
    """Every field a workflow's HASH gets as it runs (a barrier, a failure allowed) is
    one of FIELDS or STEP_FIELDS; what makes a step's payload is dropped once the step is
    released, so a finished workflow keeps its steps' payloads once (pay:<n>)."""

    def fields() -> set[str]:
        return {name.decode() for name in r.hkeys(flow_key(workflow.id))}

    copies = ("head:", "tail:", "in:", "rank:")
    workflow = chain(
        group([tasks.member.s("a"), tasks.fail_now.si("bad")]),
        group([tasks.total.s("b").set(allow_failure=True), tasks.total.s("c")]),
        tasks.add.si(1, 2),
    ).enqueue()
    waiting = fields()
    assert any(name.startswith(copies) for name in waiting)
    assert finish(workflow) == "FAILED"
    ended = fields()
    assert {name.partition(":")[0] for name in waiting | ended} <= {*FIELDS, *STEP_FIELDS}
    # The barrier between the groups (numbered after the 5 steps) kept its result and
    # that a parent failed; its input's template went with the release.
    assert {"r:6", "bf:6"} <= ended
    assert "in:6" in waiting
    assert "in:6" not in ended
    released = {step.number for step in workflow.steps() if step.state in ("SUCCESSFUL", "FAILED")}
    assert released == {1, 2, 3}
    assert not {name for name in ended if name.startswith(copies)} & {
        f"{copy}{n}" for copy in copies for n in released
    }


def sent_for(r: redis.Redis, action: Callable[[], object]) -> int:
    """The bytes the server sends its clients for ``action``, less what measuring sends."""
    first = bytes_sent(r)
    second = bytes_sent(r)
    action()
    return bytes_sent(r) - second - (second - first)


def test_a_glance_at_a_workflow_of_the_most_steps_reads_under_a_kilobyte(r: redis.Redis) -> None:
    workflow = group(tasks.add.s(i, 1) for i in range(MAX_STEPS)).enqueue()
    for glance in (
        lambda: workflow.status,
        lambda: workflow.finished,
        lambda: workflow.failed_step,
        workflow.summary,
        lambda: get_workflow(workflow.id),
    ):
        assert sent_for(r, glance) < 1024


def counted(workflow: Workflow) -> dict[str, int]:
    """How many of the workflow's steps are in each state, as its steps say."""
    found = collections.Counter(states(workflow))
    return {state: found[state] for state in STATES.values() if found[state]}


def test_a_listing_counts_the_steps_in_each_state_as_the_steps_say(r: redis.Redis) -> None:
    stopped = chain(tasks.member.s("s1"), tasks.follow.s("s2"), tasks.follow.s("s3")).enqueue()
    crashed = crashed_worker(["test"])
    made = [
        stopped,
        chain(tasks.member.s("a"), tasks.follow.s("b")).enqueue(),
        group([tasks.fail_now.s("f"), tasks.member.s("m")]).then(tasks.total.s()).enqueue(),
        group([tasks.fail_now.s("g"), tasks.member.s("n")])
        .then(tasks.total.s("t2"), allow_failure=True)
        .enqueue(),
        chain(tasks.member.s("c"), group([tasks.follow.s("d"), tasks.follow.s("e")])).enqueue(),
        chain(tasks.retry_once.si("r"), tasks.member.si("after r")).enqueue(),
        group([]).enqueue(),
    ]

    def check() -> None:
        live, done = workflows()
        listed = {summary.id: summary for summary in [*live, *done]}
        assert set(listed) == {workflow.id for workflow in made}
        for workflow in made:
            assert listed[workflow.id].counts == counted(workflow), workflow.steps()
            assert listed[workflow.id] == workflow.summary()

    check()
    assert cancel(made[4].steps()[0].task_id) == "cancelled"
    assert stopped.cancel() == (2, 1)
    check()
    assert TaskStore().recover_worker(
        crashed.id, ["test"], only_if_expired=False, max_crashes=3
    ) == (0, 0)
    with running_worker(["test"]):
        for workflow in made:
            workflow.wait(30)
    check()
    assert [workflow.status for workflow in made] == [
        "CANCELLED",
        "SUCCESSFUL",
        "FAILED",
        "SUCCESSFUL",
        "FAILED",
        "SUCCESSFUL",
        "SUCCESSFUL",
    ]


# -- a group after a group: one barrier between them, not a link per pair -------------


def used_memory(r: redis.Redis) -> int:
    """The memory the test's own server (each node of a cluster) uses, in bytes."""
    if CLUSTER:
        nodes = r.info("memory", target_nodes=RedisCluster.ALL_NODES)
    else:
        nodes = {"": r.info("memory")}
    return sum(int(node["used_memory"]) for node in nodes.values())


def test_a_group_after_a_group_costs_memory_linear_in_its_steps(r: redis.Redis) -> None:
    """Each member of the second group waits for every member of the first and takes
    their results: the workflow holds N + M links and one copy of those results, not
    N x M, before the first group runs and once it has released the second."""

    def cost(size: int) -> tuple[int, int]:
        before = used_memory(r)
        chain(
            group(tasks.member.s(f"a{i}") for i in range(size)),
            group(tasks.total.s(f"b{i}") for i in range(size)),
        ).enqueue()
        created = used_memory(r) - before
        assert Worker(["test"], burst=True, max_tasks=size).run() == size
        assert ready() == size  # the second group, released
        released = used_memory(r) - before
        assert Worker(["test"], burst=True).run() == size
        return created, released

    small, large = cost(200), cost(400)
    assert 0 < small[0] < small[1]
    assert large[0] < 2.6 * small[0], (small, large)  # twice the steps: about twice the bytes
    assert large[1] < 2.6 * small[1], (small, large)


def test_each_member_of_a_group_after_a_group_runs_once_after_the_whole_first_group(
    r: redis.Redis,
) -> None:
    workflow = chain(
        group(tasks.member.s(f"a{i}") for i in range(30)),
        group(tasks.total.s(f"b{j}") for j in range(20)),
    ).enqueue()
    steps = workflow.steps()
    assert [step.number for step in steps] == list(range(1, 51))  # no barrier among them
    assert [step.task_name for step in steps] == [tasks.member.name] * 30 + [tasks.total.name] * 20
    assert states(workflow) == ["QUEUED"] * 30 + ["WAITING"] * 20
    assert workflow.summary().counts == {"QUEUED": 30, "WAITING": 20}
    deliver_twice(steps[25:30])  # a duplicate of some members of the first group
    assert finish(workflow, threads=4) == "SUCCESSFUL"
    first = [f"a{i}" for i in range(30)]
    # Every member ran before any step of the second group. (The copies delivered by
    # hand are not the members' runs: one may start after the second group does, held
    # ahead by one thread slot while another starts a step of the second group.)
    ran = order(r)
    second_starts = min(i for i, label in enumerate(ran) if label.startswith("b"))
    assert set(ran[:second_starts]) == set(first)
    assert {label: n for label, n in runs(r).items() if label.startswith("b")} == {
        f"b{j}": 1 for j in range(20)
    }
    for j in range(20):
        assert given(r, f"b{j}") == [first]
        assert get_result(steps[30 + j].task_id).args == [f"b{j}"]  # (the input is the flow's)
    assert workflow.results() == [30] * 20
    assert workflow.summary().counts == {"SUCCESSFUL": 50}


def test_a_failed_member_of_the_first_group_marks_the_second_group_not_run(
    r: redis.Redis,
) -> None:
    first = [tasks.member.s(f"a{i}") for i in range(5)]
    first[2] = tasks.fail_now.s("bad")
    second = [tasks.total.s(f"b{j}") for j in range(4)]
    second[1] = tasks.total.s("b1").set(allow_failure=True)
    workflow = chain(group(first), group(second), tasks.total.s("last")).enqueue()
    assert finish(workflow) == "FAILED"
    bad = workflow.steps()[2]
    assert workflow.failed_step == bad.task_id
    assert states(workflow) == ["SUCCESSFUL"] * 2 + ["FAILED"] + ["SUCCESSFUL"] * 2 + [
        "NOT_RUN",
        "SUCCESSFUL",
        "NOT_RUN",
        "NOT_RUN",
        "NOT_RUN",
    ]
    assert not any(label in runs(r) for label in ("b0", "b2", "b3", "last"))
    [results] = given(r, "b1")
    assert isinstance(results, list)
    assert results[:2] == ["a0", "a1"]
    assert results[3:] == ["a3", "a4"]
    assert is_failure(results[2])
    assert results[2]["step"] == bad.task_id
    assert workflow.summary().counts == {"SUCCESSFUL": 5, "FAILED": 1, "NOT_RUN": 4}


def test_a_group_after_a_group_inside_nested_chains(r: redis.Redis) -> None:
    workflow = chain(
        tasks.member.s("a"),
        group(
            [
                chain(
                    group([tasks.follow.s("b"), tasks.follow.s("c")]),
                    group([tasks.total.s("d"), tasks.total.s("e"), tasks.total.s("f")]),
                ),
                tasks.follow.s("g"),
            ]
        ),
        tasks.total.s(),
    ).enqueue()
    assert len(workflow.steps()) == 8
    assert finish(workflow) == "SUCCESSFUL"
    assert given(r, "d") == given(r, "e") == given(r, "f") == [["a>b", "a>c"]]
    assert given(r) == [[[2, 2, 2], "a>g"]]
    assert workflow.results() == 2


def test_a_group_after_a_group_is_cancelled_whole(r: redis.Redis) -> None:
    workflow = chain(
        group(tasks.member.s(f"a{i}") for i in range(5)),
        group(tasks.total.s(f"b{j}") for j in range(4)),
    ).enqueue()
    assert workflow.cancel() == (9, 0)
    assert set(states(workflow)) == {"CANCELLED"}
    assert workflow.finished
    assert ready() == 0
    with running_worker(["test"]):
        pass
    assert runs(r) == {}


def test_an_enqueue_whose_reply_was_lost_returns_the_workflow_it_created(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply of the creating script is lost (it ran): ``enqueue()`` finds the
    workflow by the id it chose, and returns it; no second copy is made."""
    create = TaskStore.create_workflow

    def lost_reply(self: TaskStore, *args: object) -> int | None:
        create(self, *args)  # type: ignore[arg-type]
        raise redis.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(TaskStore, "create_workflow", lost_reply)
    workflow = chain(group([tasks.member.s("a"), tasks.member.s("b")]), tasks.total.s()).enqueue()
    assert workflow.status == "RUNNING"
    assert ready() == 2
    assert [w.id for w in workflows()[0]] == [workflow.id]
    monkeypatch.setattr(TaskStore, "create_workflow", create)
    assert finish(workflow) == "SUCCESSFUL"
    assert runs(r) == {"a": 1, "b": 1, "total": 1}


def test_an_enqueue_that_never_reached_the_server_raises_and_leaves_nothing() -> None:
    """Redis refuses the connection (a port bound, never listening): ``enqueue()`` cannot
    know whether the workflow was created, so it raises; the server has nothing."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
        refused = (redis.ConnectionError, RedisClusterException)  # (a cluster client's)
        with override_settings(CACHES=caches(closed)), pytest.raises(refused):
            chain(group([tasks.member.s("a"), tasks.member.s("b")]), tasks.total.s()).enqueue()
    assert ready() == 0
    assert workflows() == ([], [])


def test_creating_a_workflow_twice_with_one_id_changes_nothing_the_second_time() -> None:
    workflow = chain(group([tasks.member.s("a"), tasks.member.s("b")]), tasks.total.s()).enqueue()
    store = TaskStore()
    before = workflow.steps()
    message = store.queued_message(before[0].task_id)
    assert message is not None
    first = PlannedStep(number=1, message=message, parents=(), template=None)
    again = store.create_workflow(workflow.id, [first], [], "@1")
    assert again is None
    assert ready() == 2
    assert workflow.steps() == before
    assert workflow.summary().counts == {"QUEUED": 2, "WAITING": 1}


@LONG
def test_a_group_after_a_group_at_the_most_steps_releases_in_a_short_script(
    r: redis.Redis,
) -> None:
    """chain(group(5000), group(4999)): the acknowledgement of the last member of the
    first group releases the 4,999 others, each given the 5,000 results, in one short
    script that writes no copy of those results per member."""
    workflow = chain(
        group(tasks.add.s(i, 1) for i in range(5000)),
        group(tasks.length.s(j) for j in range(MAX_STEPS - 5000)),
    ).enqueue()
    assert Worker(["test"], burst=True, max_tasks=4999).run() == 4999
    assert ready() == 1
    before = used_memory(r)
    started = time.monotonic()
    assert Worker(["test"], burst=True, max_tasks=1).run() == 1  # and its acknowledgement
    assert time.monotonic() - started < 1.5
    assert used_memory(r) - before < 20_000_000  # (a copy per member: 365 MB)
    assert ready() == MAX_STEPS - 5000
    assert Worker(["test"], burst=True).run() == MAX_STEPS - 5000
    assert workflow.status == "SUCCESSFUL"
    assert workflow.results() == [5000 + j for j in range(MAX_STEPS - 5000)]
