"""Tasks that a release left queued in Redis run after an upgrade.

Each ``tests/upgrade/queued-<version>.json`` holds the keys that release wrote for
queued tasks of every kind (see ``tests/upgrade/capture.py``); they are restored into
the empty server, and a worker of this code runs them. On the suite's cluster, where each
queue now has a home of its own, the releases' keys are all in the registry's home
(``{tasks}``): the worker moves them into their queues' homes as it starts (see
store/migration.py), and their ids still find their results.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from redis_components import get_result
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.status import dead_letters, queue_stats
from redis_components.tasks.store.layout import shared_home
from tests.processes import WorkerProcess
from tests.testapp import framework_tasks

CAPTURES = sorted((Path(__file__).parent / "upgrade").glob("queued-*.json"))


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.stem)
def test_tasks_a_release_left_queued_run_and_read_successful(
    capture: Path, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    data = json.loads(capture.read_text(encoding="utf-8"))
    for entry in data["keys"]:
        key, dump = base64.b64decode(entry["key"]), base64.b64decode(entry["dump"])
        r.restore(key, entry["ttl_ms"], dump, replace=True)
    if shared_home() is None:  # (one server: the release's keys are the queue's)
        [queue] = [stats for stats in queue_stats() if stats.name == "test"]
        assert queue.ready + queue.delayed == len(data["tasks"])

    worker = start_worker("test", "--burst")
    assert worker.wait() == 0, worker.output()
    if shared_home() is not None:
        assert f"Moved {len(data['tasks'])} tasks of test" in worker.output()

    for expected in data["tasks"]:
        if expected["door"] == "task":
            ours = get_result(expected["id"])
            assert (ours.status, ours.return_value) == (
                TaskResultStatus.SUCCESSFUL,
                expected["return_value"],
            ), ours
        else:
            theirs = framework_tasks.echo.get_result(expected["id"])
            assert (theirs.status.value, theirs.return_value) == (
                "SUCCESSFUL",
                expected["return_value"],
            ), theirs
    assert dead_letters("test") == []
