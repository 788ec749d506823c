"""Thread slots: one worker process running several sync tasks at once (``--threads``)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from conftest import cancelled
from redis_components import cancel, chain, get_result
from redis_components.exceptions import InvalidInput
from redis_components.tasks.framework import TaskResultStatus, task_finished
from redis_components.tasks.status import queue_stats, running_tasks, workers
from redis_components.tasks.store import TaskStore
from redis_components.tasks.store.layout import ready_key
from redis_components.tasks.waker import Waker
from redis_components.tasks.worker import Worker
from tests.processes import ROOT, WorkerProcess, running_worker, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def met(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(flag) for label, flag in r.hgetall("{test}:met").items()}


def test_four_threads_run_four_tasks_at_once(r: redis.Redis) -> None:
    handles = [tasks.together.enqueue(f"t{i}", 4) for i in range(4)]
    assert Worker(["test"], burst=True, threads=4).run() == 4
    assert met(r) == {"t0": 1, "t1": 1, "t2": 1, "t3": 1}
    assert [get_result(h.id).return_value for h in handles] == [True] * 4


def test_one_thread_runs_one_task_at_a_time(r: redis.Redis) -> None:
    tasks.together.enqueue("first", 2, 0.2)
    tasks.together.enqueue("second", 2, 0.2)
    assert Worker(["test"], burst=True).run() == 2
    assert met(r) == {"first": 0, "second": 1}  # the first waited alone, in vain


def test_a_task_is_taken_only_when_a_thread_is_free(r: redis.Redis) -> None:
    """No prefetch: while both threads are busy, the third task stays in Redis, where
    any worker may take it (and a higher priority enqueued meanwhile goes first)."""
    tasks.gated.enqueue("a")
    tasks.gated.enqueue("b")
    tasks.record.enqueue("third")
    with running_worker(["test"], threads=2):
        wait_until(lambda: r.exists("test:a:started") and r.exists("test:b:started"))
        assert r.zcard(ready_key("test")) == 1
        tasks.at(5).enqueue("urgent")
        # One thread frees up: it takes the higher priority first, then the other.
        r.set("test:a:open", 1)
        wait_until(lambda: runs(r) == {"third": 1, "urgent": 1})
        assert r.lrange("{test}:order", 0, -1) == [b"urgent", b"third"]
        r.set("test:b:open", 1)


def test_one_slot_runs_its_tasks_as_many_do(r: redis.Redis) -> None:
    """With one slot (the default) a task runs as with many: in a slot (the thread that
    called run(), so it shares a test's database transaction), never in the loop's,
    under the same soft and hard limits, with no supervisor to stop it."""
    here = tasks.thread_ident.enqueue()
    polite = tasks.slow_but_polite.enqueue("polite")
    stuck = tasks.forever.enqueue("forever")  # time_limit 2 s, one retry
    # Its retry is due 10 ms later: a burst worker may or may not take it.
    assert Worker(["test"], burst=True).run() in (3, 4)
    assert get_result(here.id).return_value == threading.get_ident()
    assert get_result(polite.id).return_value == "stopped in time"
    errors = get_result(stuck.id).errors
    assert [e.exception_class_path for e in errors] == [
        "redis_components.exceptions.TimeLimitExceeded"
    ] * len(errors)
    assert 1 <= len(errors) == runs(r)["forever"] <= 2
    # (The worker's threads end with it; tracing's keeper, if a test started it, stays.)
    left = lambda: [t for t in threading.enumerate() if t.name.startswith("rc-")]  # noqa: E731
    wait_until(lambda: {t.name for t in left()} <= {"rc-trace-keeper"})


def test_a_limit_is_kept_for_a_task_its_slot_took_while_the_loop_waited(
    r: redis.Redis,
) -> None:
    """A slot whose task ended takes the next one itself; the loop, waiting a heartbeat
    (3 s) for the first task, which has no limit, is woken for the next one's 0.3 s."""
    tasks.record.enqueue("first", 0.2)
    polite = tasks.slow_but_polite.enqueue("polite")
    started = time.monotonic()
    assert Worker(["test"], burst=True).run() == 2
    assert get_result(polite.id).return_value == "stopped in time"
    assert time.monotonic() - started < 2.5  # the soft limit came in time, not at a beat


def test_a_soft_time_limit_is_raised_in_the_tasks_own_thread(r: redis.Redis) -> None:
    handle = tasks.slow_but_polite.enqueue("polite")
    tasks.together.enqueue("beside", 1)
    assert Worker(["test"], burst=True, threads=2).run() == 2
    assert get_result(handle.id).return_value == "stopped in time"
    assert met(r) == {"beside": 1}


def test_a_soft_limit_that_lands_after_the_code_ended_changes_nothing(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look at the task's frame and the raise are two steps: force a thread switch
    between them (0.3 s), long enough for the task to return and reach Django's
    task_finished signal. A soft limit that comes once the code's end is claimed must
    neither fail a task that succeeded nor leave it unrecorded."""
    from redis_components.tasks import slots

    raise_now = slots.raise_in_thread

    def raise_late(ident: int, error: type[BaseException]) -> bool:
        time.sleep(0.3)
        return raise_now(ident, error)

    def slow_receiver(**kwargs: Any) -> None:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            time.sleep(0.01)

    monkeypatch.setattr(slots, "raise_in_thread", raise_late)
    task_finished.connect(slow_receiver)
    try:
        handle = tasks.ends_at_its_soft_limit.enqueue("late")
        with running_worker(["test"]):
            wait_until(
                lambda: (
                    get_result(handle.id).status != TaskResultStatus.RUNNING
                    and get_result(handle.id).status != TaskResultStatus.READY
                ),
                timeout=10,
            )
    finally:
        task_finished.disconnect(slow_receiver)
    result = get_result(handle.id)
    assert (result.status, result.return_value, result.errors) == (
        TaskResultStatus.SUCCESSFUL,
        "late",
        [],
    )
    assert queue_stats(["test"])[0].dead == 0


def test_a_task_past_its_hard_limit_is_settled_without_stopping_the_others(
    r: redis.Redis,
) -> None:
    """``forever`` (time_limit 2 s, one retry) never ends: each attempt is settled at
    its limit, the others run beside it, and its abandoned thread is told to stop."""
    handle = tasks.forever.enqueue("forever")
    for i in range(10):
        tasks.record.enqueue(f"short{i}")
    # The retry is due 10 ms after the first attempt is settled: a burst worker takes it
    # if it looks for work again by then (a slow server), else leaves it for the next.
    assert Worker(["test"], burst=True, threads=2).run() in (11, 12)
    wait_until(
        lambda: (
            Worker(["test"], burst=True, threads=2).run() == 0 and get_result(handle.id).is_finished
        )
    )
    result = get_result(handle.id)
    assert result.status is TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "redis_components.exceptions.TimeLimitExceeded"
    ] * 2
    assert runs(r) == {"forever": 2, **{f"short{i}": 1 for i in range(10)}}
    wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("rc-slot")])


def test_a_cancel_with_terminate_stops_only_that_task(r: redis.Redis) -> None:
    spinning = tasks.spin.enqueue("spin")
    with running_worker(["test"], threads=2):
        wait_until(lambda: runs(r) == {"spin": 1})
        cancel(spinning.id, terminate=True)
        wait_until(lambda: cancelled(get_result(spinning.id)))
        tasks.together.enqueue("after", 2)
        tasks.together.enqueue("after too", 2)
        wait_until(lambda: met(r) == {"after": 1, "after too": 1})  # both slots serve


def test_retries_unique_tasks_and_current_task_work_in_threads(r: redis.Redis) -> None:
    """``retry_once`` reads its own ``current_task()`` (per thread) to ask for one retry."""
    handles = [tasks.retry_once.enqueue(label) for label in ("a", "b", "c")]
    first = tasks.unique_record.enqueue("u")
    assert tasks.unique_record.enqueue("u").id == first.id
    wait_until(
        lambda: (
            Worker(["test"], burst=True, threads=4).run() >= 0
            and all(get_result(h.id).is_finished for h in [*handles, first])
        )
    )
    assert runs(r) == {"a": 2, "b": 2, "c": 2, "u": 1}
    assert [get_result(h.id).attempts for h in handles] == [2, 2, 2]


def test_a_worker_says_how_many_threads_it_runs(r: redis.Redis) -> None:
    with running_worker(["test"], threads=3) as worker:
        wait_until(lambda: [w.threads for w in workers()] == [3])
        out = io.StringIO()
        call_command("rc_queues", stdout=out)
        assert re.search(rf"{re.escape(worker.id)} +\d+ +3 +test ", out.getvalue())


def test_a_wake_up_after_the_worker_closed_writes_nowhere() -> None:
    """A thread that outlives its worker (a task abandoned at its time limit) wakes the
    worker when its task ends at last: the closed pipe's fd may belong to a socket to
    Redis by then, which must not receive a byte."""
    waker = Waker(["channel"])
    closed_fd = waker.fd
    waker.close()
    read, write = os.pipe()  # takes the lowest free fds: the closed pipe's
    try:
        os.set_blocking(read, False)
        assert closed_fd in (read, write)
        waker.wake()
        os.close(write)
        assert os.read(read, 10) == b""  # end of file: nothing was written
    finally:
        os.close(read)


def test_bad_thread_counts_are_refused() -> None:
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InvalidInput, match=r"^threads"):
            Worker(["test"], threads=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=r"^async_tasks"):
            Worker(["test"], async_tasks=bad)  # type: ignore[arg-type]


# -- rc_worker processes ----------------------------------------------------------------


def test_a_thread_stuck_in_sleep_is_abandoned_and_capacity_stays(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """``stuck`` sleeps an hour in one C call (time_limit 2 s): it is settled after its
    limit while 40 short tasks run beside it, and 4 tasks still meet on 4 threads."""
    handle = tasks.stuck.enqueue("stuck")
    for i in range(40):
        tasks.record.enqueue(f"short{i}")
    for i in range(4):
        tasks.together.enqueue(f"t{i}", 4, 30)
    worker = start_worker("test", "--threads", "4")
    wait_until(lambda: get_result(handle.id).is_finished, worker.output)
    wait_until(lambda: len(met(r)) == 4, worker.output)
    assert met(r) == {f"t{i}": 1 for i in range(4)}
    assert runs(r) == {"stuck": 1, **{f"short{i}": 1 for i in range(40)}}
    [error] = get_result(handle.id).errors
    assert error.exception_class_path == "redis_components.exceptions.TimeLimitExceeded"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert workers() == []


@pytest.mark.parametrize("in_flight", [10, 50])
def test_kill_9_with_tasks_in_flight_puts_all_back_at_once(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], in_flight: int
) -> None:
    """The supervisor sees its child die and puts back all its tasks: each runs once more."""
    for i in range(in_flight):
        tasks.record.enqueue(f"t{i}", 60.0)
    worker = start_worker("test", "--threads", str(in_flight))
    wait_until(lambda: len(runs(r)) == in_flight, worker.output)
    [child] = [w.pid for w in workers()]
    assert child is not None
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: sum(runs(r).values()) == 2 * in_flight, worker.output)
    assert runs(r) == {f"t{i}": 2 for i in range(in_flight)}
    assert f"put back {in_flight} of its tasks" in worker.output()
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "signal again" in worker.output(), worker.output)
    worker.signal(signal.SIGTERM)  # stop at once: the tasks sleep a minute
    assert worker.wait() == 0


def test_with_the_supervisor_killed_too_the_lease_brings_the_tasks_back(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    for i in range(10):
        tasks.record.enqueue(f"t{i}", 60.0)
    first = start_worker("test", "--threads", "10", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: len(runs(r)) == 10, first.output)
    first.kill_all()
    second = start_worker("test", "--threads", "10", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: sum(runs(r).values()) == 20, second.output)
    assert runs(r) == {f"t{i}": 2 for i in range(10)}


def test_sigterm_lets_every_running_task_finish_once(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    handles = [tasks.whoami.enqueue(f"t{i}", 0.5) for i in range(5)]
    worker = start_worker("test", "--threads", "5")
    wait_until(lambda: len(runs(r)) == 5, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {f"t{i}": 1 for i in range(5)}
    assert all(get_result(h.id).status is TaskResultStatus.SUCCESSFUL for h in handles)
    assert workers() == []


def test_a_paused_worker_coming_back_cannot_record_over_the_rerun(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """SIGSTOP a worker past its lease (its process and their supervisor, as a paused
    machine): another worker recovers its tasks and runs them again; after SIGCONT, the
    old executions' outcomes are refused and the results read the re-run's."""
    handles = [tasks.whoami.enqueue(f"t{i}", 1.0) for i in range(3)]
    paused = start_worker("test", "--threads", "3", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: len(runs(r)) == 3, paused.output)
    [paused_pid] = [w.pid for w in workers()]
    assert paused_pid is not None
    os.killpg(paused.process.pid, signal.SIGSTOP)
    try:
        other = start_worker("test", "--threads", "3", TASK_HEARTBEAT_INTERVAL=0.5)
        wait_until(
            lambda: all(get_result(h.id).is_finished for h in handles),
            lambda: paused.output() + other.output(),
        )
    finally:
        os.killpg(paused.process.pid, signal.SIGCONT)
    rerun_by = {get_result(h.id).return_value for h in handles}
    assert paused_pid not in rerun_by
    wait_until(
        lambda: paused.output().count("was put back on its queue while this worker ran it") == 3,
        paused.output,
    )
    assert {get_result(h.id).return_value for h in handles} == rerun_by
    assert runs(r) == {f"t{i}": 2 for i in range(3)}


@pytest.mark.django_db(transaction=True)
def test_sync_and_async_tasks_use_the_orm_from_threads(r: redis.Redis) -> None:
    """Django's connections belong to their thread: the sync tasks use at most one per
    slot (closed around each task as around a request), the async ones go through the
    async ORM; no SynchronousOnlyOperation, no connection shared between threads."""
    from tests.testapp.models import Document

    handles = [tasks.write_document.enqueue(f"sync{i}", 0.05) for i in range(50)]
    handles += [tasks.write_document_async.enqueue(f"async{i}") for i in range(10)]
    assert Worker(["test"], burst=True, threads=10).run() == 60
    assert [get_result(h.id).return_value for h in handles] == [1] * 60
    assert Document.objects.count() == 60
    assert 2 <= r.scard("{test}:db-threads") <= 10


def test_threads_and_the_orm_on_postgresql(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], postgres: dict[str, Any]
) -> None:
    """An rc_worker process of 10 threads writing through the ORM to PostgreSQL, from
    60 sync tasks and async ones: every task succeeds, and the server never sees more
    connections from it than its threads plus one (the async ORM's thread).

    The connections persist (``CONN_MAX_AGE``), as in production: one closed around each
    task would count twice for a moment, since its server process outlives the close."""
    import psycopg

    environment = {"RC_TEST_DATABASE": json.dumps({**postgres, "CONN_MAX_AGE": None})}
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
        env={**os.environ, **environment},
        check=True,
        cwd=ROOT,
    )
    handles = [tasks.write_document.enqueue(f"sync{i}", 0.2) for i in range(50)]
    handles += [tasks.write_document_async.enqueue(f"async{i}") for i in range(10)]
    dsn = {k.lower(): v for k, v in postgres.items() if k in {"HOST", "PORT", "USER"}}
    with psycopg.connect(dbname=postgres["NAME"], autocommit=True, **dsn) as watcher:

        def connections() -> int:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            assert row is not None
            return int(row[0])

        worker = start_worker("test", "--threads", "10", environment=environment)
        most = 0
        while not all(get_result(h.id).is_finished for h in handles):
            most = max(most, connections())
            assert worker.process.poll() is None, worker.output()
        [[rows]] = watcher.execute("SELECT count(*) FROM testapp_document").fetchall()
    assert [get_result(h.id).return_value for h in handles] == [1] * 60
    assert rows == 60
    assert 2 <= most <= 11, most
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


# -- async def tasks on the event loop ---------------------------------------------------


def test_async_tasks_run_many_at_once_on_one_event_loop(r: redis.Redis) -> None:
    handles = [tasks.together_async.enqueue(f"a{i}", 10) for i in range(10)]
    assert Worker(["test"], burst=True, async_tasks=10).run() == 10
    assert met(r) == {f"a{i}": 1 for i in range(10)}
    assert [get_result(h.id).return_value for h in handles] == [True] * 10


def test_a_sync_task_does_not_hold_up_the_async_ones(r: redis.Redis) -> None:
    tasks.slow.enqueue("sync", 3.0)
    for i in range(5):
        tasks.together_async.enqueue(f"a{i}", 5)
    with running_worker(["test"], threads=2, async_tasks=5):
        wait_until(lambda: len(met(r)) == 5)
        assert not r.exists("test:sync:finished")  # they met while the sync task slept
        assert met(r) == {f"a{i}": 1 for i in range(5)}


def test_an_async_tasks_soft_limit_cancels_its_coroutine(r: redis.Redis) -> None:
    tidied = tasks.async_polite.enqueue("tidied", True)
    ended = tasks.async_polite.enqueue("ended", False)
    assert Worker(["test"], burst=True, async_tasks=2).run() == 2
    assert get_result(tidied.id).return_value == "tidied"
    result = get_result(ended.id)
    assert result.status is TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "redis_components.exceptions.SoftTimeLimitExceeded"
    assert runs(r) == {"tidied": 1, "ended": 1}


def test_an_async_task_past_its_hard_limit_is_settled_and_the_loop_goes_on(
    r: redis.Redis,
) -> None:
    handle = tasks.async_forever.enqueue("forever")
    others = [tasks.together_async.enqueue(f"a{i}", 2) for i in range(2)]
    worker = Worker(["test"], burst=True, async_tasks=3)
    assert worker.run() == 3
    assert not worker.worn_out
    [error] = get_result(handle.id).errors
    assert error.exception_class_path == "redis_components.exceptions.TimeLimitExceeded"
    assert [get_result(h.id).return_value for h in others] == [True, True]


def test_a_blocked_event_loop_is_noticed_and_its_process_replaced(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """``time.sleep(4)`` in an async def task with a time limit of 1 s: the loop runs
    nothing else, which is logged; the task is settled at its limit, and the worker,
    its loop stuck, stops taking tasks to be replaced."""
    handle = tasks.blocks_the_loop.enqueue("blocker", 4.0)
    waiting = tasks.record.enqueue("waiting")
    worker = Worker(["test"], burst=True, threads=2, async_tasks=2)
    worker.run()
    assert worker.worn_out
    [error] = get_result(handle.id).errors
    assert error.exception_class_path == "redis_components.exceptions.TimeLimitExceeded"
    assert "has run nothing for" in caplog.text
    assert get_result(waiting.id).is_finished  # the sync slot served meanwhile


def test_rc_worker_runs_async_tasks_together_and_stops_cleanly(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    handles = [tasks.together_async.enqueue(f"a{i}", 20, 30) for i in range(20)]
    worker = start_worker("test", "--async-tasks", "20")
    wait_until(lambda: len(met(r)) == 20, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert met(r) == {f"a{i}": 1 for i in range(20)}
    assert all(get_result(h.id).status is TaskResultStatus.SUCCESSFUL for h in handles)
    assert workers() == []


def test_a_process_whose_event_loop_is_stuck_is_replaced_and_nothing_is_lost(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A task blocks the loop for an hour (time limit 1 s): it is settled, the process
    stops and is replaced, and the task that waited on the stuck loop runs again."""
    blocker = tasks.blocks_the_loop.enqueue("blocker", 3600.0)
    waiting = tasks.together_async.enqueue("waiting", 1)
    worker = start_worker("test", "--async-tasks", "2")
    wait_until(lambda: get_result(waiting.id).is_finished, worker.output)
    assert get_result(waiting.id).return_value is True
    [error] = get_result(blocker.id).errors
    assert error.exception_class_path == "redis_components.exceptions.TimeLimitExceeded"
    output = worker.output()
    assert "has run nothing for" in output
    assert "stopped with tasks stuck past their time limit" in output
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        *[("sync", label) for label in ("KeyboardInterrupt", "GeneratorExit", "Halt")],
        *[("async", label) for label in ("KeyboardInterrupt", "GeneratorExit", "Halt")],
        ("async", "CancelledError"),  # from an awaited task that something else cancelled
    ],
)
def test_a_task_ending_with_any_base_exception_fails_and_its_workflow_goes_on(
    r: redis.Redis, kind: str, label: str
) -> None:
    """Whatever a task raises is its failure: recorded, dead-lettered (no retries left),
    the steps after it not run, and its slot free for the next task."""
    step = tasks.raise_base if kind == "sync" else tasks.araise_base
    flow = chain(step.s(label), tasks.member.si("after")).enqueue()
    with running_worker(["test"], threads=2, async_tasks=1):
        wait_until(lambda: flow.finished)
        others = [tasks.async_add.enqueue(i, 1) for i in range(3)]
        others += [tasks.add.enqueue(i, 1) for i in range(3)]
        wait_until(lambda: all(get_result(h.id).is_finished for h in others))
    assert flow.status == "FAILED"
    first = flow.steps()[0]
    result = get_result(first.task_id)
    assert result.status is TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path.rsplit(".", 1)[-1] == label
    assert runs(r) == {label: 1}  # the step after it never ran
    assert [get_result(h.id).return_value for h in others] == [1, 2, 3] * 2


def test_a_task_that_returned_is_not_settled_again_at_its_hard_limit(r: redis.Redis) -> None:
    """Once its code returned, a task's outcome is decided, however long Django's
    ``task_finished`` receivers take: its time limit (1 s) no longer applies."""
    seen: list[str] = []

    def slow_receiver(sender: object, task_result: Any, **kwargs: object) -> None:
        seen.append(task_result.status.name)
        time.sleep(1.5)

    task_finished.connect(slow_receiver)
    # The idle loop looks at the limits at least once per heartbeat interval.
    faster = {**settings.REDIS_COMPONENTS, "TASK_HEARTBEAT_INTERVAL": 0.5}
    try:
        handle = tasks.quick_with_limit.enqueue("quick")
        with override_settings(REDIS_COMPONENTS=faster):
            assert Worker(["test"], burst=True, threads=2).run() == 1
    finally:
        task_finished.disconnect(slow_receiver)
    assert seen == ["SUCCESSFUL"]
    result = get_result(handle.id)
    assert result.status is TaskResultStatus.SUCCESSFUL
    assert result.return_value == "quick"


def test_a_task_that_kills_its_process_is_charged_alone(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """A task ends its process beside three others: a crash in company is counted but
    never dead-letters a task, and a task in two crashes runs alone; so the three
    innocent ones finish and only the culprit, crashing alone, reaches
    TASK_MAX_CRASHES (3)."""
    innocent = [tasks.whoami.enqueue(f"t{i}", 1.0) for i in range(3)]
    worker = start_worker("test", "--threads", "4")
    wait_until(lambda: len(runs(r)) == 3, worker.output)
    culprit = tasks.exit_process.enqueue("exit")
    wait_until(lambda: get_result(culprit.id).is_finished, worker.output, timeout=60)
    wait_until(lambda: all(get_result(h.id).is_finished for h in innocent), worker.output)
    assert [get_result(h.id).status for h in innocent] == [TaskResultStatus.SUCCESSFUL] * 3
    counted = runs(r)
    assert counted.pop("exit") == 3  # crashes 1 and 2 (one at least in company), 3 alone
    # Each innocent one ran beside it once or twice (the second time, the restarted
    # process may have taken it before or after the culprit's crash), then finished.
    assert set(counted) == {"t0", "t1", "t2"}
    assert all(2 <= n <= 3 for n in counted.values()), counted
    failed = get_result(culprit.id)
    assert failed.status is TaskResultStatus.FAILED
    assert [e.traceback for e in failed.errors][-1].endswith("(3 of 3)")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_task_holding_the_gil_past_the_lease_keeps_its_live_worker(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], threads: str
) -> None:
    """A C call holding the GIL for several leases (0.75 s each) stops the process's
    heartbeat thread, not the process: its supervisor renews its lease, so neither it
    nor the task beside it runs twice or is taken for crashed."""
    held = tasks.hold_gil.enqueue("gil", 10**8)
    beside = tasks.whoami.enqueue("beside", 2.0)
    worker = start_worker(
        "test", "--concurrency", "2", "--threads", threads, TASK_HEARTBEAT_INTERVAL=0.5
    )
    wait_until(lambda: get_result(held.id).is_finished, worker.output, timeout=60)
    wait_until(lambda: get_result(beside.id).is_finished, worker.output)
    assert get_result(held.id).status is TaskResultStatus.SUCCESSFUL
    assert get_result(beside.id).status is TaskResultStatus.SUCCESSFUL
    assert runs(r) == {"gil": 1, "beside": 1}
    assert "stopped renewing its lease" not in worker.output()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize("processes", [1, 2])
def test_two_deliveries_of_one_task_at_once_are_each_recorded(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, processes: int
) -> None:
    """A copy of a task delivered while the task runs (by hand, or by at-least-once
    delivery) runs beside it, in another slot or process: each delivery's outcome is
    recorded, nothing stays held, and nothing runs a third time."""
    with contextlib.ExitStack() as stack:
        for _ in range(processes):
            stack.enter_context(running_worker(["test"], threads=3 - processes))
        handle = tasks.copies.enqueue("dup")
        wait_until(lambda: runs(r) == {"dup": 1})
        store = TaskStore()
        message = store.queued_message(handle.id)
        assert message is not None
        copy = dataclasses.replace(message, retries=1)
        store.enqueue(copy, copy.encode())
        wait_until(lambda: get_result(handle.id).is_finished)
        wait_until(lambda: queue_stats(["test"])[0].in_progress == 0)
        assert running_tasks() == []
    assert runs(r) == {"dup": 2}
    assert "put back on its queue while this worker ran it" not in caplog.text
    assert Worker(["test"], burst=True).run() == 0
