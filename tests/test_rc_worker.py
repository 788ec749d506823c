"""``manage.py rc_worker`` as a real process tree: kills, signals, Redis restarts."""

from __future__ import annotations

import datetime
import itertools
import json
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from conftest import CLUSTER, SERVER_CONFIG, long_test
from conftest import cancelled as cancelled_result
from redis_components import cancel, get_client, get_result
from redis_components.embedded import EmbeddedCluster, EmbeddedRedis, free_cluster_port, free_port
from redis_components.exceptions import TaskNotCancellable
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import (
    dead_letters,
    queue_stats,
    running_tasks,
    waiting_tasks,
    workers,
)
from redis_components.tasks.store.layout import ready_key, registry
from tests.processes import ROOT, WorkerProcess, wait_until
from tests.settings import caches
from tests.testapp import tasks


def runs(r: redis.Redis) -> dict[str, int]:
    return {label.decode(): int(count) for label, count in r.hgetall("{test}:runs").items()}


def test_kill_9_loses_no_task_and_duplicates_only_tasks_in_flight(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    labels = [f"t{i}" for i in range(1000)]
    for label in labels:
        tasks.record.enqueue(label, pause=0.003)
    settings = {"TASK_HEARTBEAT_INTERVAL": 1.0, "TASK_MAX_CRASHES": 100}
    in_flight = 0
    killed: set[str] = set()
    for progress in (150, 400, 650):
        worker = start_worker("test", "--concurrency", "2", **settings)
        wait_until(lambda p=progress: r.hlen("{test}:runs") >= p, worker.output)
        worker.kill_all()
        assert r.hlen("{test}:runs") < len(labels), "the run ended before the kill"
        # What the workers killed now held is all that may run twice (workers killed
        # earlier may still be waiting for recovery: their tasks are counted already).
        victims = {w.id for w in workers()} - killed
        in_flight += sum(1 for running in running_tasks() if running.worker_id in victims)
        killed |= victims
    worker = start_worker("test", "--concurrency", "2", **settings)

    def settled() -> bool:
        recovered = not killed & {w.id for w in workers()}
        return (
            recovered
            and queue_stats(["test"])[0].ready == 0
            and r.hlen("{test}:runs") == len(labels)
        )

    wait_until(settled, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0

    counts = runs(r)
    assert set(counts) == set(labels)  # every task ran at least once
    duplicates = sum(counts.values()) - len(labels)
    assert duplicates <= in_flight, (duplicates, in_flight)
    assert r.keys("rc:queue:{tasks}:running:*") == []
    assert workers() == []
    assert dead_letters("test") == []


# With a supervisor, and without (--no-supervisor): the stop signals act alike.
SUPERVISED = pytest.mark.parametrize(
    "mode", [[], ["--no-supervisor"]], ids=["supervised", "no-supervisor"]
)


@SUPERVISED
def test_sigterm_lets_the_running_task_finish(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], mode: list[str]
) -> None:
    tasks.slow.enqueue("s", 1.0)
    worker = start_worker("test", *mode)
    wait_until(lambda: r.exists("test:s:started"), worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert r.exists("test:s:finished")
    assert queue_stats(["test"])[0].ready == 0
    assert r.keys("rc:queue:{tasks}:running:*") == []
    assert workers() == []
    assert "signal again to stop at once" in worker.output()


@SUPERVISED
def test_a_second_signal_stops_at_once_and_puts_the_task_back(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], mode: list[str]
) -> None:
    tasks.slow.enqueue("s", 60.0)
    worker = start_worker("test", *mode)
    wait_until(lambda: r.exists("test:s:started"), worker.output)
    worker.signal(signal.SIGINT)
    time.sleep(0.1)
    worker.signal(signal.SIGTERM)
    stopped_and_put_back(r, worker)


def stopped_and_put_back(r: redis.Redis, worker: WorkerProcess) -> str:
    """Check that ``worker`` exited 0 and put its unfinished ``slow("s", 60.0)`` back on
    its queue without counting a crash; return the worker's output."""
    assert worker.wait(timeout=20) == 0
    assert not r.exists("test:s:finished")
    total, [waiting] = waiting_tasks("test", "ready")
    assert total == 1
    message = waiting.message
    assert message is not None, waiting.shown
    assert (message.args, message.crashes) == (["s", 60.0], 0)  # a stop is not a crash
    assert workers() == []
    output = worker.output()
    assert "put back 1 of its tasks" in output
    return output


@SUPERVISED
def test_a_task_still_running_after_the_grace_period_goes_back_and_the_worker_exits(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess], mode: list[str]
) -> None:
    tasks.slow.enqueue("s", 60.0)
    worker = start_worker("test", *mode, TASK_SHUTDOWN_GRACE=0.5)
    wait_until(lambda: r.exists("test:s:started"), worker.output)
    worker.signal(signal.SIGTERM)
    output = stopped_and_put_back(r, worker)
    assert "within 0.5 s (TASK_SHUTDOWN_GRACE)" in output
    assert "still running 0.5 s after the stop signal" in output


def test_without_a_supervisor_the_worker_is_the_command_and_its_lease_recovers_it(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """--no-supervisor: one process, the command's own; after its kill -9, nothing puts
    its task back at once, and another worker runs it once its lease has run out."""
    handle = tasks.record.enqueue("t", 60.0)
    alone = start_worker("test", "--no-supervisor", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: runs(r) == {"t": 1}, alone.output)
    assert [w.pid for w in workers()] == [alone.process.pid]
    assert "1 process, with no supervisor, of 1 thread serving test" in alone.output()
    alone.kill_all()
    other = start_worker("test", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: runs(r) == {"t": 2}, other.output)
    [crash] = get_result(handle.id).errors  # (its lease ran out: a crash is counted)
    assert crash.exception_class_path == "redis_components.exceptions.WorkerCrashed"


def test_no_supervisor_runs_one_worker_only(start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("test", "--no-supervisor", "-c", "2", "--burst")
    assert worker.wait(timeout=15) == 1
    assert worker.output().splitlines() == [
        "CommandError: --no-supervisor: runs one worker process, this one: leave -c out, not -c 2"
    ]


def test_a_task_that_kills_its_worker_is_dead_lettered_after_repeated_crashes(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    tasks.crash.enqueue("c")
    tasks.record.enqueue("after")
    worker = start_worker("test", TASK_MAX_CRASHES=2)
    wait_until(lambda: runs(r).get("after") == 1, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {"c": 2, "after": 1}
    [letter] = dead_letters("test")
    assert letter.reason == "crashed"
    assert json.loads(letter.task)["task"] == "tests.testapp.tasks.crash"
    output = worker.output()
    assert output.count("died (signal 9)") == 2
    assert "dead-lettered 1" in output


def test_burst_and_max_tasks_end_the_command(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    for i in range(5):
        tasks.record.enqueue(f"t{i}")
    first = start_worker("test", "--max-tasks", "2")
    assert first.wait() == 0
    assert r.llen("{test}:order") == 2
    output = first.output()
    assert "stopped after 2 tasks" in output
    assert "Our @redis_tasks: " in output
    assert "Django's tasks of TASKS['default'] (RedisTaskBackend, queues: " in output
    assert start_worker("test", "--burst", "-c", "2").wait() == 0
    assert r.llen("{test}:order") == 5
    assert workers() == []


def test_the_worker_survives_a_redis_restart(
    tmp_path: Path, start_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "redis"
    server = EmbeddedRedis(directory=directory, persistent=True).start()
    client = server.client()
    push = redis.Redis.from_url(server.url)  # reconnects to the restarted server
    try:
        monkeypatch.setenv("RC_TEST_REDIS_URL", server.url)
        monkeypatch.delenv("RC_TEST_CLUSTER", raising=False)  # this one is a single server
        worker = start_worker("test", TASK_HEARTBEAT_INTERVAL=0.5)

        def enqueue(label: str) -> None:
            # The session's CACHES point at the other server: push the task directly.
            message = TaskMessage(
                id=label.encode().hex(),
                task="tests.testapp.tasks.record",
                queue="test",
                args=[label],
                kwargs={},
            )
            # (On a single server every queue's home is the registry's.)
            push.zadd(ready_key("test", registry()), {message.encode(): 1})

        enqueue("before")
        wait_until(lambda: client.hlen("{test}:runs") == 1, worker.output)
        port = server.port
        server.stop()
        time.sleep(0.5)
        server = EmbeddedRedis(directory=directory, persistent=True, port=port).start()
        client.close()
        client = server.client()
        enqueue("after")
        wait_until(lambda: client.hlen("{test}:runs") == 2, worker.output)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        output = worker.output()
        assert "lost Redis" in output
        assert "reached Redis again" in output
        assert {k.decode() for k in client.hkeys("{test}:runs")} == {"before", "after"}
    finally:
        push.close()
        client.close()
        server.stop()


def test_without_redis_the_worker_says_so_in_one_line_and_keeps_trying(
    start_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlike the other commands, rc_worker does not exit: Redis may start after it."""
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        url = f"redis://127.0.0.1:{port}/0"
        monkeypatch.setenv("RC_TEST_REDIS_URL", url)
        monkeypatch.delenv("RC_TEST_REDIS_OTHER_URL", raising=False)
        monkeypatch.delenv("RC_TEST_CLUSTER", raising=False)
        worker = start_worker("test")
        wait_until(lambda: "lost Redis" in worker.output(), worker.output)
        assert worker.process.poll() is None
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    output = worker.output()
    [line] = [line for line in output.splitlines() if "keep trying" in line]
    assert line.endswith(
        f"Redis cannot be reached at {url} (CACHES['default']): Error 111 connecting to "
        f"127.0.0.1:{port}. Connection refused; the workers will keep trying"
    )
    assert "Traceback" not in output


@pytest.mark.skipif(not CLUSTER, reason="a Redis Cluster's client: the cluster's pass")
def test_a_worker_started_before_its_cluster_waits_for_it(
    start_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compose file may start the workers before the cluster: its client cannot even be
    built then (no node answers), and the worker waits as it does for a single server."""
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_cluster_port())
    url = f"redis://127.0.0.1:{min(ports)}/0"
    monkeypatch.setenv("RC_TEST_REDIS_URL", url)
    monkeypatch.delenv("RC_TEST_REDIS_OTHER_URL", raising=False)
    worker = start_worker("test")
    wait_until(lambda: "keep trying" in worker.output(), worker.output)
    time.sleep(2)  # several tries
    assert worker.process.poll() is None, worker.output()
    output = worker.output()
    assert "Traceback" not in output
    assert output.count("cannot reach Redis") == 1
    [line] = [line for line in output.splitlines() if "keep trying" in line]
    assert f"Redis cannot be reached at {url} (CACHES['default']): Redis Cluster cannot" in line
    with EmbeddedCluster(ports=sorted(ports), config=SERVER_CONFIG) as cluster:
        with override_settings(CACHES=caches(cluster.url)):
            tasks.record.enqueue("after")
            wait_until(lambda: get_client().hget("{test}:runs", "after") == b"1", worker.output)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    output = worker.output()
    assert "reached Redis after" in output
    assert "Traceback" not in output
    assert output.count("Started worker process") == 1


def test_help_explains_the_guarantees() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "django", "rc_worker", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "may run twice after a crash, never zero times" in result.stdout
    assert "--concurrency" in result.stdout
    assert "--no-supervisor" in result.stdout
    assert "highest priority first" in result.stdout
    # Both things it turns off are named (the help text is wrapped: compare words).
    words = " ".join(result.stdout.split())
    assert "do not enqueue the ticks of periodic schedules (@periodic)" in words
    assert "one at a time; at most 1024)" in words


def test_bad_queue_names_are_refused(start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("ok", "")
    assert worker.wait() == 1
    assert "queues: must not be empty" in worker.output()


def test_more_threads_than_the_bound_are_refused_in_one_line(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker("test", "--threads", "100000", "--burst")
    assert worker.wait(timeout=15) == 1
    assert worker.output().splitlines() == [
        "CommandError: --threads: must be at most 1024 (a thread each), not 100000"
    ]


def test_a_worker_process_refused_its_threads_says_so_once_and_rc_worker_stops(
    start_worker: Callable[..., WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the bound, the system may still refuse threads (ulimit -u, a container's
    pids limit): here a limit on memory that its threads' stacks soon reach. The worker
    process is not replaced (a new one would be refused too): rc_worker exits 1."""
    port = free_port()
    monkeypatch.setenv("RC_TEST_REDIS_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.delenv("RC_TEST_REDIS_OTHER_URL", raising=False)
    monkeypatch.delenv("RC_TEST_CLUSTER", raising=False)  # this one is a single server
    # One malloc arena: the stacks are what the limit counts.
    worker = start_worker("test", "--threads", "1000", environment={"MALLOC_ARENA_MAX": "1"})
    wait_until(lambda: "lost Redis" in worker.output(), worker.output)  # no thread started yet
    [child] = re.findall(r"Started worker process 1 \(pid (\d+)\)", worker.output())
    status = Path(f"/proc/{child}/status").read_text()
    size = int(re.search(r"VmSize:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
    # Room for a few dozen stacks of 8 MiB, in this process and in any that replaces it.
    for pid in (int(child), worker.process.pid):
        resource.prlimit(pid, resource.RLIMIT_AS, (size + 256 * 2**20, resource.RLIM_INFINITY))
    with EmbeddedRedis(port=port):
        assert worker.wait() == 1
    output = worker.output()
    [line] = [line for line in output.splitlines() if " ERROR " in line]
    assert "could not start its threads: can't start new thread (" in line
    assert "lower --threads" in line
    assert output.count("Started worker process") == 1
    assert "Traceback" not in output
    assert output.splitlines()[-1] == (
        "CommandError: A worker process could not start its threads (see above): rc_worker stopped"
    )


def test_a_queue_that_no_task_uses_is_served_with_a_warning(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """A typo, most likely; but a queue fed by another service is served all the same."""
    worker = start_worker("reprots", "test", "--burst", QUEUE_PARTITIONS={"tset": 4, "test": 2})
    assert worker.wait() == 0
    output = worker.output()
    assert re.search(
        r"WARNING .*QUEUE_PARTITIONS\['tset'\] names a queue that no known task .* uses",
        output,
    )
    assert "QUEUE_PARTITIONS['test']" not in output
    [warning] = [line for line in output.splitlines() if "is used by no registered task" in line]
    assert "WARNING" in warning
    assert "Queue 'reprots' is used by no registered task and no RedisTaskBackend" in warning
    assert "(theirs: default, email, " in warning  # ... and the test app's own
    assert warning.endswith("a typo? It is served all the same.")
    assert "serving reprots, test" in output


def test_a_retry_is_one_line_and_the_traceback_comes_with_the_dead_letter(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    """With DEBUG on, Django's own line per run (logger django.tasks) is left out too."""

    def failed_for_good(*args: str) -> str:
        dead = queue_stats(["test"])[0].dead
        tasks.fail.enqueue("f")
        worker = start_worker("test", *args, environment={"RC_TEST_DEBUG": "1"})
        wait_until(lambda: queue_stats(["test"])[0].dead == dead + 1, worker.output)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        return worker.output()

    output = failed_for_good()
    assert output.count("; retry ") == 2  # tasks.fail has max_retries=2
    assert output.count("Traceback") == 1
    assert "dead-lettered after 2 retries\nTraceback" in output
    assert "Task id=" not in output
    # -v 2: the traceback of each attempt
    output = failed_for_good("-v", "2")
    assert output.count("Traceback") == 3
    assert "Task id=" not in output


def test_a_result_outlives_a_kill_9_and_ends_successful(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = tasks.slow.enqueue("k", 0.3)
    settings = {"TASK_HEARTBEAT_INTERVAL": 0.5}
    worker = start_worker("test", **settings)
    wait_until(lambda: r.exists("test:k:started"), worker.output)
    assert get_result(result.id).status is TaskResultStatus.RUNNING
    worker.kill_all()  # the supervisor too: a live worker's heartbeat must find the task
    dead_worker = get_result(result.id).worker_ids
    worker = start_worker("test", **settings)
    wait_until(lambda: get_result(result.id).status is TaskResultStatus.SUCCESSFUL, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    final = get_result(result.id)
    assert final.attempts == 2
    assert final.worker_ids[0] == dead_worker[0]
    [crash] = final.errors
    assert crash.exception_class_path == "redis_components.exceptions.WorkerCrashed"
    assert runs(r) == {}  # slow() counts nothing; it ran to its end once
    assert r.exists("test:k:finished")


def test_a_task_past_its_time_limit_is_stopped_and_fails_while_others_complete(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    stuck = tasks.forever.enqueue("stuck")
    for i in range(50):
        tasks.record.enqueue(f"t{i}")
    worker = start_worker("test", "--concurrency", "2", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: get_result(stuck.id).is_finished, worker.output, timeout=60)
    wait_until(lambda: r.hlen("{test}:runs") == 51, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    result = get_result(stuck.id)
    assert (result.status, result.attempts, runs(r)["stuck"]) == (TaskResultStatus.FAILED, 2, 2)
    assert [e.exception_class_path for e in result.errors] == [
        "redis_components.exceptions.TimeLimitExceeded"
    ] * 2
    [letter] = dead_letters("test")
    assert letter.reason == "time limit"
    assert all(runs(r)[f"t{i}"] == 1 for i in range(50))
    output = worker.output()
    assert output.count(f"tests.testapp.tasks.forever[{stuck.id}] ran past its time limit") == 2
    # Its thread was left to itself, and the process ran on: no worker process was replaced.
    assert output.count("Started worker process") == 2
    assert "restarting it" not in output


def test_a_soft_time_limit_is_an_exception_the_task_can_catch(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = tasks.slow_but_polite.enqueue("polite")
    worker = start_worker("test")
    wait_until(lambda: get_result(result.id).is_finished, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert get_result(result.id).return_value == "stopped in time"
    assert runs(r) == {"polite": 1}


def test_a_soft_time_limit_never_lands_in_the_worker_or_in_redis_py(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Tasks that run for about their 5 ms soft limit, sending Redis commands all along:
    # the limit falls in the task's loop, inside redis-py, or just after the return.
    # Only the first may raise; the others must neither break a connection nor the worker.
    rounds = random.Random(23)
    results = [
        tasks.near_soft_limit.enqueue(f"t{i}", rounds.uniform(0.003, 0.007)) for i in range(400)
    ]
    worker = start_worker("test", "--concurrency", "2")
    wait_until(lambda: all(get_result(x.id).is_finished for x in results), worker.output, 60)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    output = worker.output()
    assert "died" not in output, output
    assert output.count("Started worker process") == 2
    statuses = [get_result(result.id) for result in results]
    failed = [result for result in statuses if result.status is TaskResultStatus.FAILED]
    assert {result.status for result in statuses} <= {
        TaskResultStatus.SUCCESSFUL,
        TaskResultStatus.FAILED,
    }
    assert {e.exception_class_path for result in failed for e in result.errors} <= {
        "redis_components.exceptions.SoftTimeLimitExceeded"
    }
    assert all(result.attempts == 1 for result in statuses)


def test_a_worker_process_that_exits_with_code_0_in_a_task_is_a_crash(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    exiting = tasks.exit_process.enqueue("x")
    after = tasks.record.enqueue("after")
    worker = start_worker("test", "-c", "1", TASK_MAX_CRASHES=2)
    wait_until(lambda: get_result(after.id).status is TaskResultStatus.SUCCESSFUL, worker.output)
    assert worker.process.poll() is None, worker.output()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {"x": 2, "after": 1}
    assert get_result(exiting.id).status is TaskResultStatus.FAILED
    [letter] = dead_letters("test")
    assert letter.reason == "crashed"
    assert worker.output().count("died (exit code 0)") == 2


def test_a_child_forked_by_a_task_never_runs_the_worker_loop(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    forking = tasks.fork_and_exit.enqueue("f")
    worker = start_worker("test", "-c", "1")
    wait_until(lambda: get_result(forking.id).is_finished, worker.output)
    later = [tasks.record.enqueue(f"t{i}") for i in range(20)]
    wait_until(lambda: all(get_result(x.id).is_finished for x in later), worker.output)
    assert get_result(forking.id).return_value == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {"f-child": 1, **{f"t{i}": 1 for i in range(20)}}


def test_a_running_task_is_terminated_only_when_asked_to(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    result = tasks.slow.enqueue("long", 60.0)
    worker = start_worker("test", TASK_HEARTBEAT_INTERVAL=0.5)
    wait_until(lambda: r.exists("test:long:started"), worker.output)
    with pytest.raises(TaskNotCancellable, match="it is running; pass terminate=True"):
        cancel(result.id)
    assert cancel(result.id, terminate=True) == "terminating"
    wait_until(lambda: cancelled_result(get_result(result.id)), worker.output)
    after = tasks.record.enqueue("after")
    wait_until(lambda: get_result(after.id).status is TaskResultStatus.SUCCESSFUL, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert not r.exists("test:long:finished")
    output = worker.output()
    assert "was cancelled while running: its thread is abandoned" in output
    assert output.count("Started worker process") == 1  # its process ran on
    assert dead_letters("test") == []


def test_cancelling_while_workers_drain_the_queue_never_runs_a_cancelled_task(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    results = [tasks.record.enqueue(f"t{i}", pause=0.002) for i in range(500)]
    worker = start_worker("test", "--concurrency", "2")
    wait_until(lambda: r.hlen("{test}:runs") > 20, worker.output)
    cancelled = set()
    for result in reversed(results):
        try:
            cancel(result.id)
            cancelled.add(result.args[0])
        except TaskNotCancellable:
            pass
    wait_until(lambda: r.hlen("{test}:runs") + len(cancelled) == 500, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    ran = set(runs(r))
    assert not ran & cancelled
    assert ran | cancelled == {f"t{i}" for i in range(500)}
    assert all(count == 1 for count in runs(r).values())
    assert 0 < len(cancelled) < 480
    outcomes = {
        "cancelled" if cancelled_result(get_result(result.id)) else get_result(result.id).status
        for result in results
    }
    assert outcomes == {TaskResultStatus.SUCCESSFUL, "cancelled"}


LONG = long_test("runs for 3 minutes")


@LONG
@pytest.mark.timeout(300)
def test_four_schedulers_enqueue_every_tick_once_even_when_killed(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    settings = {
        "TASK_HEARTBEAT_INTERVAL": 0.5,
        "TASK_SCHEDULES": {
            "every5": {"task": "tests.testapp.tasks.tick", "every": 5, "args": ["every5"]},
            "minutely": {
                "task": "tests.testapp.tasks.tick",
                "cron": "* * * * *",
                "args": ["minutely"],
            },
        },
    }
    workers = [start_worker("test", **settings) for _ in range(4)]
    everyone = list(workers)
    started = time.monotonic()
    kills = 0
    while time.monotonic() - started < 180:
        time.sleep(random.uniform(10, 25))
        leader = r.get("rc:queue:{tasks}:scheduler")
        if leader is None:
            continue
        pid = int(leader.decode().split(".")[-3])
        for i, worker in enumerate(workers):
            if worker.process.pid == pid:
                worker.kill_all()  # the scheduler holding the lease, killed at any moment
                kills += 1
                workers[i] = start_worker("test", **settings)
                everyone.append(workers[i])
    time.sleep(6)  # the last ticks' tasks run
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        worker.wait()
    ticks: dict[str, list[int]] = {"every5": [], "minutely": []}
    for entry in r.lrange("{test}:ticks", 0, -1):
        name, tick = entry.decode().split()
        ticks[name].append(int(tick))
    assert kills >= 4
    # When no scheduler could run for a whole interval (the machine stalled), the next one
    # runs the first missed tick once and skips the others, and says so (missed="run_once").
    logged = "".join(worker.output() for worker in everyone)
    missed = {
        (name, int(datetime.datetime.fromisoformat(since).timestamp() * 1000))
        for name, since in re.findall(r"Schedule (\w+) missed its ticks since (\S+);", logged)
    }
    for name, step in (("every5", 5000), ("minutely", 60_000)):
        seen = sorted(ticks[name])
        assert len(seen) == len(set(seen)), f"{name}: a tick ran twice"
        for tick, after in itertools.pairwise(seen):
            assert after - tick == step or (name, tick) in missed, f"{name}: {tick + step} lost"
    assert len(ticks["every5"]) >= 30
    assert len(ticks["minutely"]) >= 2
