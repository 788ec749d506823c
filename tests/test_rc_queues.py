from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command, get_commands
from django.test import override_settings

from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.status import queue_stats, waiting_tasks
from redis_components.tasks.store.layout import dead_key
from redis_components.testing import crashed_worker, no_registered_tasks
from tests.processes import ROOT
from tests.settings import caches
from tests.testapp import tasks


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("rc_queues", *args, stdout=out)
    return out.getvalue()


def bury(r: redis.Redis, queue: str, label: str) -> None:
    payload = TaskMessage(
        id=label, task="tests.testapp.tasks.record", queue=queue, args=[label], kwargs={}, retries=3
    ).encode()
    r.rpush(dead_key(queue), json.dumps({"task": payload, "queue": queue, "reason": "failed"}))


# The head of rc_queues' table of queues, split at spaces.
QUEUES_HEADER = [
    *("queue", "ready", "oldest", "ready", "delayed", "on", "limits"),
    *("in", "progress", "dead", "limit"),
]


def test_the_table_shows_each_queue_and_the_workers(redis_mode: str, r: redis.Redis) -> None:
    tasks.record.enqueue("a")
    tasks.record.enqueue_in(60, "b")
    bury(r, "mail", "m")
    worker = crashed_worker(["test", "mail"], take=0)
    lines = run().splitlines()
    assert lines[0].split() == QUEUES_HEADER
    table = lines[1 : lines.index("")]
    rows = {line.split()[0]: line.split()[1:] for line in table}
    ready, oldest, *rest = rows["test"]
    assert (ready, rest) == ("1", ["1", "0", "0", "0", "-"])
    assert re.fullmatch(r"\d+\.\ds", oldest)  # ("a" has waited since its enqueue)
    assert rows["mail"] == ["0", "-", "0", "0", "0", "1", "-"]
    assert "Workers: 1" in lines
    assert any(worker.id in line and "test, mail" in line and "s left" in line for line in lines)


@override_settings(TASKS={})
def test_no_queues_yet() -> None:
    with no_registered_tasks():
        assert run() == "No queues yet.\n\nWorkers: 0\n"


def test_requeue_dead_of_one_queue_or_all(r: redis.Redis) -> None:
    bury(r, "test", "a")
    bury(r, "mail", "b")
    assert run("--requeue-dead", "test") == "test: requeued 1 dead tasks\n"
    total, [waiting] = waiting_tasks("test", "ready")
    assert total == 1
    assert waiting.message is not None, waiting.shown
    assert waiting.message.retries == 0
    assert queue_stats(["mail"])[0].dead == 1
    r.sadd("rc:queue:{tasks}:queues", "mail")
    assert "mail: requeued 1 dead tasks" in run("--requeue-dead")
    assert queue_stats(["mail"])[0].dead == 0


def test_purge_asks_first(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks.record.enqueue("a")
    monkeypatch.setattr("builtins.input", lambda question: "n")
    with pytest.raises(CommandError, match="Nothing was deleted"):
        run("--purge", "test")
    assert queue_stats(["test"])[0].ready == 1
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda question: asked.append(question) or "y")
    assert run("--purge", "test") == "test: deleted 1 tasks (there were 1 a moment ago)\n"
    assert asked == [
        "Delete 1 ready, 0 delayed, 0 on limits and 0 dead tasks of queue 'test'? [y/N] "
    ]
    tasks.record.enqueue("b")
    assert "deleted 1 tasks" in run("--purge", "test", "--yes")
    assert queue_stats(["test"])[0].ready == 0


def test_a_queue_nothing_uses_is_named_in_a_warning() -> None:
    for args in (["--purge", "tset", "--yes"], ["--requeue-dead", "tset"]):
        out, err = io.StringIO(), io.StringIO()
        call_command("rc_queues", *args, stdout=out, stderr=err)
        assert "no task, backend, worker or setting uses queue 'tset'" in err.getvalue()
        assert "did you mean 'test'?" in err.getvalue()
    err = io.StringIO()
    call_command("rc_queues", "--purge", "test", "--yes", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_bad_queue_names_are_refused() -> None:
    with pytest.raises(CommandError, match="queue: must not be empty"):
        run("--purge", "", "--yes")


def test_cancel_a_task_by_id(r: redis.Redis) -> None:
    result = tasks.record.enqueue("x")
    assert run("--cancel", result.id) == f"{result.id}: cancelled\n"
    with pytest.raises(CommandError, match="cannot be cancelled: it was already cancelled"):
        run("--cancel", result.id)
    with pytest.raises(CommandError, match="--terminate goes with --cancel"):
        run("--terminate")


def test_the_schedules_and_their_last_run(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {
        "task": "tests.testapp.tasks.record",
        "cron": "0 3 * * *",
        "tz": "Europe/Paris",
        "args": ["nightly"],
    }
    with override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": {"nightly": spec}}):
        lines = run("--schedules").splitlines()
    assert lines[0].split() == ["schedule", "task", "when", "next", "last", "result"]
    assert "nightly" in lines[1]
    assert "cron '0 3 * * *' (Europe/Paris)" in lines[1]
    bad = {"nightly": {"task": "nope", "every": 60}}
    with override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": bad}), pytest.raises(CommandError):
        run("--schedules")


def test_a_worker_serving_thousands_of_queues_is_listed() -> None:
    """Its registration adds its queues' names in pages (Lua cannot unpack 8,000)."""
    names = [f"q{i}" for i in range(8000)]
    worker = crashed_worker(names, take=0)
    lines = run().splitlines()
    assert "Workers: 1" in lines
    [row] = [line for line in lines if line.startswith(worker.id)]
    assert "q0, q1," in row
    assert "q7998, q7999 " in row


# -- every command, with Redis out of reach -----------------------------------------

# The apps whose management commands are ours: the package's and the demo's.
OUR_APPS = ("redis_components", "demo_project.marketplace")
# What a command needs besides Redis to start ({file}: a file to send); the others
# run without arguments.
ARGUMENTS = {
    "rc_files_send": ["{file}"],
    "rc_files_receive": ["--handler", "builtins.print"],
}
# rc_worker keeps trying until Redis answers (tests/test_rc_worker.py).
KEEPS_TRYING = {"rc_worker"}


def our_commands() -> list[str]:
    return sorted(name for name, app in get_commands().items() if app in OUR_APPS)


@pytest.fixture
def closed_url() -> Iterator[str]:
    """The URL of a port that refuses connections (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def test_the_commands_are_discovered() -> None:
    found = our_commands()
    assert {"rc_queues", "rc_worker", "rc_files_send", "market_check", "seed_demo"} <= set(found)
    assert "migrate" not in found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [name for name in our_commands() if name not in KEEPS_TRYING])
def test_every_command_says_in_one_line_that_redis_cannot_be_reached(
    name: str, closed_url: str, tmp_path: Path
) -> None:
    (tmp_path / "a.log").write_text("a line\n")
    arguments = [a.format(file=tmp_path / "a.log") for a in ARGUMENTS.get(name, [])]
    out, err = io.StringIO(), io.StringIO()
    with override_settings(CACHES=caches(closed_url)), pytest.raises(CommandError) as caught:
        call_command(name, *arguments, stdout=out, stderr=err)
    message = str(caught.value)
    assert message.startswith(f"Redis cannot be reached at {closed_url} (CACHES['default']): ")
    assert "\n" not in message
    assert caught.value.returncode == 1
    assert out.getvalue() == err.getvalue() == ""  # it stopped before doing anything


def test_rc_queues_without_redis_prints_one_line_and_fails(closed_url: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RC_TEST_")}
    result = subprocess.run(
        [sys.executable, "-m", "django", "rc_queues", "--settings=tests.settings"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "RC_TEST_REDIS_URL": closed_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"CommandError: Redis cannot be reached at {closed_url} (CACHES['default']): "
    )
    address = closed_url.removeprefix("redis://").removesuffix("/0")
    assert line.endswith(f"Error 111 connecting to {address}. Connection refused")
