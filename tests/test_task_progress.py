"""Task progress (issue 60, item 3): what a running task says of how far it is
(``context.set_progress()``), saved at most every ``TASK_PROGRESS_INTERVAL`` seconds and
with the run's end, fenced by the run's attempt, read by any process as
``result.progress`` or with ``get_progress()`` in one command."""

from __future__ import annotations

import asyncio
import datetime
import io
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings

from conftest import CommandCount
from redis_components import aget_progress, chain, get_progress, get_result, redis_task
from redis_components.exceptions import InvalidInput
from redis_components.tasks import RedisTaskContext, RedisTaskResult
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import result_key
from redis_components.testing import ScriptedWorker, drain
from tests.processes import WorkerProcess, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")
QUEUE = "progress"
ADMIN = "/admin/redis_components/taskqueues/"


@redis_task(queue=QUEUE, takes_context=True)
def report(context: RedisTaskContext, times: int, total: float | None = None) -> float:
    """Say 1, 2, ... ``times`` of ``total``: how many seconds that took."""
    started = time.perf_counter()
    for done in range(1, times + 1):
        context.set_progress(done, total, f"item {done}")
    return time.perf_counter() - started


# Progress a task may not say (JSON cannot carry some as arguments: the task looks them
# up), and the argument each is refused for.
BAD: dict[str, tuple[Any, Any, Any, str]] = {
    "negative": (-1, None, "", "done"),
    "nan": (float("nan"), None, "", "done"),
    "infinite": (float("inf"), 10, "", "done"),
    "bool": (True, None, "", "done"),
    "too large a whole number": (10**400, 7, "", "done"),
    "too large a total": (1, 2**53 + 1, "", "total"),
    "str": ("3", None, "", "done"),
    "none": (None, None, "", "done"),
    "zero total": (1, 0, "", "total"),
    "negative total": (1, -5, "", "total"),
    "infinite total": (1, float("inf"), "", "total"),
    "bool total": (1, False, "", "total"),
    "str total": (1, "10", "", "total"),
    "no note": (1, None, None, "note"),
    "bytes note": (1, None, b"bytes", "note"),
    "long note": (1, None, "x" * 201, "note"),
    "at the limits": (0, 1e-9, "é" * 200, "accepted"),
}


@redis_task(queue=QUEUE, takes_context=True)
def refused(context: RedisTaskContext, bad: str) -> str:
    """Say 1 of 2, then BAD[bad]: the argument it was refused for."""
    context.set_progress(1, 2, "good")
    done, total, note, _ = BAD[bad]
    try:
        context.set_progress(done, total, note)
    except InvalidInput as error:
        return error.field
    return "accepted"


@redis_task(queue=QUEUE, takes_context=True, max_retries=1, retry_backoff=0.01)
def half_then_fail(context: RedisTaskContext) -> list[object] | None:
    """Its first attempt says 5 of 10 and fails; the retry returns what it finds."""
    if context.attempt == 1:
        context.set_progress(5, 10, "half")
        raise ValueError("failed on purpose")
    found = get_progress(context.task_result.id)
    return None if found is None else [found.done, found.total, found.note]


@redis_task(queue=QUEUE, takes_context=True)
async def areport(context: RedisTaskContext) -> bool:
    return await context.aset_progress(2.5, None, "async")


def run() -> int:
    return drain([QUEUE], fail_fast=False)


@pytest.fixture
def interval() -> Iterator[Callable[[float], None]]:
    """``interval(seconds)`` sets TASK_PROGRESS_INTERVAL (and a heartbeat too rare to
    add a command) for the rest of the test."""
    entered: list[Any] = []

    def set_to(seconds: float) -> None:
        changed = {"TASK_PROGRESS_INTERVAL": seconds, "TASK_HEARTBEAT_INTERVAL": 600}
        entered.append(override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, **changed}))
        entered[-1].enable()

    yield set_to
    for each in reversed(entered):
        each.disable()


def commands_to_run(count_commands: CommandCount, times: int) -> int:
    """The commands a worker sends to run ``report`` once, saying ``times`` progresses."""
    report.enqueue(times)
    with count_commands as counted:
        assert run() == 1
    return counted.sent


def test_progress_is_read_with_the_result_and_alone(redis_mode: str) -> None:
    result = report.enqueue(3, 4)
    assert isinstance(result, RedisTaskResult)
    assert result.progress is None
    assert get_progress(result.id) is None  # said nothing yet
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    run()
    found = get_result(result.id)
    assert isinstance(found, RedisTaskResult)
    assert found.status == TaskResultStatus.SUCCESSFUL
    progress = found.progress
    assert progress is not None
    assert (progress.done, progress.total, progress.note) == (3, 4, "item 3")
    assert progress.fraction == 0.75
    assert before < progress.at < before + datetime.timedelta(seconds=60)
    assert get_progress(result.id) == progress
    result.refresh_progress()
    assert result.progress == progress
    assert result.status == TaskResultStatus.READY  # (nothing else was read)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL


def test_without_a_total_there_is_no_fraction() -> None:
    result = report.enqueue(7)
    run()
    progress = get_progress(result.id)
    assert progress is not None
    assert (progress.done, progress.total, progress.fraction) == (7, None, None)


@pytest.mark.parametrize("bad", list(BAD))
def test_bad_progress_is_refused_naming_the_argument_and_changes_nothing(
    interval: Callable[[float], None], bad: str
) -> None:
    interval(0)  # (the good one is saved at once: a bad one could only overwrite it)
    result = refused.enqueue(bad)
    run()
    assert get_result(result.id).return_value == BAD[bad][3]
    progress = get_progress(result.id)
    assert progress is not None
    if bad == "at the limits":
        assert (progress.done, progress.total, progress.note) == (0, 1e-9, "é" * 200)
    else:
        assert (progress.done, progress.total, progress.note) == (1, 2, "good")


def test_progress_said_between_saves_rides_with_the_outcome(
    count_commands: CommandCount, interval: Callable[[float], None]
) -> None:
    """Ten calls in a short task cost no command: what they said is saved with the run's
    outcome, in the script that records it. With an interval of 0, each call is one."""
    interval(0)
    commands_to_run(count_commands, 1)  # (loads the scripts, the one that saves too)
    silent = commands_to_run(count_commands, 0)
    assert commands_to_run(count_commands, 5) == silent + 5
    interval(60)
    assert commands_to_run(count_commands, 10) == silent


def test_frequent_progress_is_coalesced(
    count_commands: CommandCount, interval: Callable[[float], None]
) -> None:
    """A task that says its progress 100,000 times sends about one command per
    TASK_PROGRESS_INTERVAL of its run (2 ms here, so that even a fast run writes some;
    its first call may write at once),
    and its last word is saved."""
    interval(0.002)
    commands_to_run(count_commands, 1)  # (loads the scripts)
    silent = commands_to_run(count_commands, 0)
    result = report.enqueue(100_000, 100_000)
    with count_commands as counted:
        run()
    seconds = get_result(result.id).return_value
    writes = counted.sent - silent
    assert 1 <= writes <= seconds / 0.002 + 2, (writes, seconds)
    progress = get_progress(result.id)
    assert progress is not None
    assert (progress.done, progress.note, progress.fraction) == (100_000, "item 100000", 1.0)


def test_progress_stays_across_a_retry() -> None:
    result = half_then_fail.enqueue()
    run()
    done = get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == [5, 10, "half"]  # the failed attempt's, saved with its error
    assert get_progress(result.id) == done.progress  # type: ignore[attr-defined]


def test_aset_progress_saves_from_an_async_task(interval: Callable[[float], None]) -> None:
    interval(0)
    result = areport.enqueue()
    run()
    assert get_result(result.id).return_value is True
    progress = get_progress(result.id)
    assert progress is not None
    assert (progress.done, progress.total, progress.note) == (2.5, None, "async")


def test_aget_progress_reads_it_too() -> None:
    result = report.enqueue(1, 2)
    assert asyncio.run(aget_progress(result.id)) is None
    run()
    assert asyncio.run(aget_progress(result.id)) == get_progress(result.id) is not None


def test_a_run_that_no_longer_holds_its_task_saves_no_progress() -> None:
    """The save is fenced by the attempt, as an outcome is: a run given up for dead,
    whose task was taken again, changes nothing."""
    result = report.enqueue(1)
    worker = ScriptedWorker([QUEUE])
    assert worker.take() is not None  # the task's current attempt is this worker's
    stale = f"1 {worker.id}"  # an earlier take of the same worker
    said = '{"done":1,"total":null,"note":"lost"}'
    assert TaskStore().save_metadata(result.id, stale, "", said) is False
    assert get_progress(result.id) is None
    assert worker.succeed(result.id, 0.0)
    assert get_progress(result.id) is None


@pytest.mark.parametrize(
    "stored",
    [
        b"not json",
        b"[1, 2]",
        b'{"done": -1, "total": null, "note": "", "at": 1}',
        b'{"done": 1, "total": 0, "note": "", "at": 1}',
        b'{"done": 1, "total": null, "note": 7, "at": 1}',
        b'{"done": 1, "total": null, "note": ""}',
        b'{"done": 1, "total": null, "note": "", "at": 1e400}',
        b'{"done": NaN, "total": null, "note": "", "at": 1}',
        b'{"done": 1, "total": null, "note": "", "at": 10000000000000000000}',
        b"\xff\xfe",
    ],
)
def test_bad_stored_progress_reads_as_none(r: redis.Redis, stored: bytes) -> None:
    result = report.enqueue(1)
    r.hset(result_key(result.id), "progress", stored)  # (hostile data, on purpose)
    assert get_progress(result.id) is None
    assert get_result(result.id).progress is None  # type: ignore[attr-defined]


def test_get_progress_of_a_running_task_is_one_command_from_any_process(
    r: redis.Redis, count_commands: CommandCount, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = tasks.progress_until_killed.enqueue("one")
    worker = start_worker("test", TASK_PROGRESS_INTERVAL=0)
    wait_until(lambda: r.exists("test:one:said"), worker.output)
    with count_commands as counted:
        progress = get_progress(result.id)
    assert counted.sent == 1
    assert progress is not None
    assert (progress.done, progress.total, progress.note) == (3, 10, "before the kill")
    assert get_result(result.id).progress == progress  # type: ignore[attr-defined]


def test_saved_progress_survives_a_kill_9_of_the_worker(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """What a run saved before its worker was killed with ``kill -9`` is read while the
    task waits to be recovered, and by its next run; that run's progress replaces it."""
    result = tasks.progress_until_killed.enqueue("kill")
    options = {"TASK_PROGRESS_INTERVAL": 0, "TASK_HEARTBEAT_INTERVAL": 1.0}
    worker = start_worker("test", **options)
    wait_until(lambda: r.exists("test:kill:said"), worker.output)
    worker.kill_all()
    saved = get_progress(result.id)
    assert saved is not None
    assert (saved.done, saved.total, saved.note) == (3, 10, "before the kill")
    again = start_worker("test", **options)
    wait_until(lambda: get_result(result.id).status == TaskResultStatus.SUCCESSFUL, again.output)
    assert get_result(result.id).return_value == [3, 10, "before the kill"]
    final = get_progress(result.id)
    assert final is not None
    assert (final.done, final.total, final.note) == (10, 10, "after")
    assert final.at >= saved.at


@pytest.mark.django_db
def test_rc_queues_and_the_admin_overview_show_a_running_tasks_progress(
    r: redis.Redis, viewer: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = tasks.progress_until_killed.enqueue("shown")
    worker = start_worker("test", TASK_PROGRESS_INTERVAL=0)
    wait_until(lambda: r.exists("test:shown:said"), worker.output)
    out = io.StringIO()
    call_command("rc_queues", stdout=out)
    lines = out.getvalue().splitlines()
    assert "Running tasks: 1" in lines
    [row] = [line for line in lines if line.startswith(result.id)]
    assert row.endswith("  3 of 10 (30%) · before the kill")
    assert "tests.testapp.tasks.progress_until_killed" in row
    page = viewer.get(ADMIN).content.decode()
    assert '<progress max="10" value="3"></progress> 3 of 10 · before the kill' in page


@pytest.mark.django_db
def test_the_admin_task_page_shows_the_progress(viewer: Client) -> None:
    result = report.enqueue(3, 4)
    silent = report.enqueue(0)
    run()
    page = viewer.get(f"{ADMIN}task/", {"id": result.id}).content.decode()
    assert '<progress max="4" value="3"></progress> 3 of 4 · item 3' in page
    assert "<progress" not in viewer.get(f"{ADMIN}task/", {"id": silent.id}).content.decode()


@pytest.mark.django_db
def test_the_admin_workflow_page_adds_up_its_steps_progress(viewer: Client) -> None:
    workflow = chain(report.s(3, 4), report.si(5, 6)).enqueue()
    run()
    page = viewer.get(f"{ADMIN}workflow/", {"id": workflow.id}).content.decode()
    assert '<progress max="10" value="8"></progress> 8 of 10' in page
    progress = workflow.progress()
    assert progress is not None
    assert (progress.done, progress.total, progress.note) == (8, 10, "")
