"""Task metadata, as Django's proposal has it (django/new-features#141): a conformance
suite, each test quoting the sentence of the proposal it checks. Tasks run on a real
worker (in this process, or in a worker process of their own); results are read
through ``get_result``."""

from __future__ import annotations

import dataclasses
import json
import pickle
import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.test import override_settings

from redis_components import chain, get_result, group, redis_task
from redis_components.exceptions import InvalidInput
from redis_components.tasks import RedisTaskBackend, RedisTaskContext, RedisTaskResult
from redis_components.tasks.framework import TaskResult, TaskResultStatus, task_backends
from redis_components.tasks.messages import MalformedTask, TaskMessage
from redis_components.tasks.status import queue_stats, waiting_tasks
from redis_components.tasks.store import TaskStore
from redis_components.testing import ScriptedWorker, drain
from tests.processes import WorkerProcess, wait_until
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")
QUEUE = "meta"


@redis_task(queue=QUEUE, takes_context=True, max_retries=1, retry_backoff=0.01)
def annotate(context: RedisTaskContext, note: str, fail: str = "") -> dict[str, Any]:
    """Add ``note`` to its metadata's "notes" and return its metadata; raise when ``fail``
    is "always", or "once" in its first attempt (it is retried once)."""
    context.metadata.setdefault("notes", []).append(note)
    if fail == "always" or (fail == "once" and context.attempt == 1):
        raise ValueError(f"failed on purpose ({note})")
    return dict(context.metadata)


@redis_task(queue=QUEUE, takes_context=True)
def metadata_of(context: RedisTaskContext, *previous: object) -> Any:
    """What its metadata is (the proof that it is a dict, never None)."""
    return {"type": type(context.metadata).__name__, "metadata": context.metadata}


@redis_task(queue=QUEUE, takes_context=True)
async def asave(context: RedisTaskContext, label: str) -> bool:
    context.metadata["label"] = label
    return await context.asave_metadata()


@redis_task(queue=QUEUE, takes_context=True, max_retries=0)
def oversize(context: RedisTaskContext) -> str:
    """Try to save metadata over the limit; keep what fits."""
    context.metadata["big"] = "x" * 200
    try:
        context.save_metadata()
    except InvalidInput as error:
        del context.metadata["big"]
        context.metadata["refused"] = True
        return str(error)
    return "saved"


@redis_task(queue=QUEUE)
def plain(label: str) -> str:
    return label


def run(queue: str = QUEUE) -> int:
    """Run what is queued, retries included (as a burst worker would, until none is due)."""
    return drain([queue], fail_fast=False)


def waiting() -> int:
    stats = queue_stats([QUEUE])[0]
    return stats.ready + stats.delayed


def test_metadata_given_at_enqueue_is_read_by_the_task_and_kept_by_its_result() -> None:
    """#141: "``my_task.using(metadata={"trace_id": 123}).enqueue(foo=1)`` would enqueue the
    ``my_task`` task with metadata ``{"trace_id": 123}`` and arguments ``foo=1``." and
    "Metadata could be retrieved using task context ``context.metadata``"."""
    result = annotate.using(metadata={"trace_id": 123}).enqueue(note="a")
    assert isinstance(result, RedisTaskResult)
    assert result.metadata == {"trace_id": 123}
    assert get_result(result.id).metadata == {"trace_id": 123}  # READY, from its message
    assert run() == 1
    done = get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"trace_id": 123, "notes": ["a"]}
    assert done.metadata == {"trace_id": 123, "notes": ["a"]}
    assert done.kwargs == {"note": "a"}  # the arguments stay apart from the metadata


def test_using_keeps_the_task_and_its_other_options() -> None:
    """#141: "``my_task.using(metadata=...)``": a copy of the task, of our type, whose other
    ``using()`` changes keep the metadata (and the caller's dict is copied)."""
    given = {"who": "ann"}
    task = annotate.using(metadata=given).using(priority=5)
    given["who"] = "bob"
    assert task.metadata == {"who": "ann"}
    assert task.priority == 5
    assert annotate.metadata is None
    assert task.using(metadata={}).metadata == {}


def test_modified_metadata_is_saved_when_the_task_succeeds() -> None:
    """#141: "If the ``context.metadata`` is modified, it is saved when a task finishes
    (successfully or otherwise)": successfully."""
    result = annotate.enqueue(note="ok é 😀")
    run()
    assert get_result(result.id).metadata == {"notes": ["ok é 😀"]}


def test_modified_metadata_is_saved_when_the_task_fails() -> None:
    """#141: "If the ``context.metadata`` is modified, it is saved when a task finishes
    (successfully or otherwise)": a failure that is retried, then dead-lettered."""
    result = annotate.using(metadata={"n": 1}).enqueue(note="x", fail="always")
    run()
    failed = get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 2
    assert failed.metadata == {"n": 1, "notes": ["x", "x"]}


def test_a_retry_sees_the_metadata_its_failed_attempt_saved() -> None:
    """#141: "it is saved when a task finishes (successfully or otherwise)": the next attempt
    starts from what the failed one saved, not from the metadata it was enqueued with."""
    result = annotate.using(metadata={"n": 1}).enqueue(note="again", fail="once")
    run()
    done = get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.attempts == 2
    assert done.return_value == {"n": 1, "notes": ["again", "again"]}
    assert done.metadata == done.return_value


def test_save_metadata_saves_during_the_run_for_any_process(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """#141: "Metadata can be saved within a task using ``context.save_metadata()``" and "A
    ``TaskResult`` should have ``metadata`` - a writable persistent ``dict``": saved by a
    worker process, read here while the task runs, and after it ended."""
    result = tasks.save_and_wait.enqueue("m")
    worker = start_worker("test")
    wait_until(lambda: r.exists("test:m:saved"), worker.output)
    running = get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING
    assert running.metadata == {"stage": "saved"}
    r.set("test:m:go", 1)
    wait_until(lambda: get_result(result.id).status == TaskResultStatus.SUCCESSFUL, worker.output)
    assert get_result(result.id).return_value is True
    assert get_result(result.id).metadata == {"stage": "done"}


def test_a_save_by_a_run_that_no_longer_holds_its_task_changes_nothing() -> None:
    """#141: "Metadata can be saved within a task using ``context.save_metadata()``", by
    the run that holds the task: one given up for dead, whose task was taken again,
    saves nothing (as its outcome records nothing): the save is fenced by the attempt."""
    result = plain.using(metadata={"kept": 1}).enqueue("x")
    worker = ScriptedWorker([QUEUE])
    assert worker.take() is not None  # the task's current attempt is this worker's
    stale = f"1 {worker.id}"  # an earlier take of the same worker
    assert TaskStore().save_metadata(result.id, stale, '{"lost":1}') is False
    assert get_result(result.id).metadata == {"kept": 1}
    assert worker.succeed(result.id, "done")
    assert get_result(result.id).metadata == {"kept": 1}


def test_asave_metadata_saves_from_an_async_task() -> None:
    """#141: "Metadata can be saved within a task using ``context.save_metadata()`` (or
    ``.asave_metadata``)"."""
    result = asave.enqueue("async")
    run()
    done = get_result(result.id)
    assert done.return_value is True
    assert done.metadata == {"label": "async"}


def test_metadata_is_always_a_dict() -> None:
    """#141: "``metadata`` is always a ``dict``": in a task enqueued without any, in its
    results, and in a payload that carries none (the wire format of such a task is
    unchanged: no "metadata" key)."""
    result = metadata_of.enqueue()
    assert result.metadata == {}
    [queued] = waiting_tasks(QUEUE, "ready")[1]
    assert queued.task_id == result.id
    assert '"metadata"' not in queued.shown
    run()
    done = get_result(result.id)
    assert done.return_value == {"type": "dict", "metadata": {}}
    assert done.metadata == {}
    assert get_result(plain.enqueue("p").id).metadata == {}


@pytest.mark.parametrize(
    ("metadata", "field", "says"),
    [
        ([1, 2], "metadata", "must be a dict, not list"),
        ("trace", "metadata", "must be a dict, not str"),
        ({1: "a"}, "metadata", "keys must be strings"),
        ({"when": object()}, "metadata['when']", "cannot be stored as JSON"),
        ({"ok": 1, "nan": float("nan")}, "metadata['nan']", "cannot be stored as JSON"),
    ],
)
def test_metadata_that_is_not_a_json_object_is_refused_and_nothing_is_enqueued(
    metadata: Any, field: str, says: str
) -> None:
    """#141: "a writable persistent ``dict`` (JSON-compatible)": anything else is refused with
    ``InvalidInput`` naming the key, at ``using()``, and at the enqueue of a task that
    carries it some other way; nothing is enqueued."""
    with pytest.raises(InvalidInput) as refused:
        annotate.using(metadata=metadata)
    assert refused.value.field == field
    assert says in str(refused.value)
    carried = dataclasses.replace(annotate, metadata=metadata)
    with pytest.raises(InvalidInput) as at_enqueue:
        carried.enqueue(note="never")
    assert at_enqueue.value.field == field
    assert waiting() == 0


def test_metadata_over_the_size_limit_is_refused() -> None:
    """#141: "a writable persistent ``dict``", bounded: over ``TASK_METADATA_MAX_BYTES`` (of
    JSON) it is refused at ``using()`` and at the enqueue, and a save in the task
    raises (the task keeps what fits)."""
    with override_settings(REDIS_COMPONENTS={"TASK_METADATA_MAX_BYTES": 100}):
        with pytest.raises(InvalidInput, match="over TASK_METADATA_MAX_BYTES \\(100\\)"):
            annotate.using(metadata={"big": "x" * 100})
        fits = annotate.using(metadata={"small": "x" * 50})
    with override_settings(REDIS_COMPONENTS={"TASK_METADATA_MAX_BYTES": 20}):
        with pytest.raises(InvalidInput, match="bytes of JSON, over TASK_METADATA_MAX_BYTES"):
            fits.enqueue(note="never")
        assert waiting() == 0
        result = oversize.enqueue()
        run()
    done = get_result(result.id)
    assert "over TASK_METADATA_MAX_BYTES (20)" in done.return_value
    assert done.metadata == {"refused": True}


def test_the_backend_says_it_supports_metadata() -> None:
    """#141: "Metadata support is opt-in - backends must set the ``supports_metadata``"."""
    assert RedisTaskBackend.supports_metadata is True
    assert task_backends["default"].supports_metadata is True


def test_django_tasks_on_our_backend_take_metadata_too() -> None:
    """#141: "``my_task.using(metadata={"trace_id": 123}).enqueue(foo=1)``", where ``my_task``
    is Django's ``@task`` on :class:`RedisTaskBackend` (whose task class is ours)."""
    task = framework_tasks.multiply.using(metadata={"trace_id": 123})
    result = task.enqueue(a=2, b=3)
    assert result.metadata == {"trace_id": 123}
    run("test")
    done = get_result(result.id)
    assert done.return_value == 6
    assert done.metadata == {"trace_id": 123}


def test_a_payload_with_metadata_reads_back_as_written() -> None:
    """#141: "``metadata`` is always a ``dict``": a message carries it as a JSON object, and
    one that is not an object is not a task."""
    message = TaskMessage(id="ab", task="t", queue="q", args=[], kwargs={}, metadata={"é": [1]})
    assert TaskMessage.decode(message.encode()) == message
    payload = message.encode().replace('"metadata":{"é":[1]}', '"metadata":[1]')
    with pytest.raises(MalformedTask, match="'metadata' must be an object"):
        TaskMessage.decode(payload)


def test_results_with_metadata_pickle_as_django_results_do() -> None:
    """#141: "A ``TaskResult`` should have ``metadata``": Django's ``TaskResult`` still,
    pickled as Django's own result of the same task is."""
    result = annotate.using(metadata={"k": [1, "a"]}).enqueue(note="p")
    fields = [field.name for field in dataclasses.fields(TaskResult) if field.init]
    plain = TaskResult(**{name: getattr(result, name) for name in fields})
    try:
        pickle.dumps(plain)
    except pickle.PicklingError as error:  # the backport's tasks (Django 5.2) do not pickle
        pytest.skip(f"Django's own TaskResult of this task does not pickle here: {error}")
    assert pickle.loads(pickle.dumps(result)) == result


def test_results_with_metadata_compare_and_refresh() -> None:
    """#141: "A ``TaskResult`` should have ``metadata``": compared as Django's results
    are, and ``refresh()`` reads the metadata again."""
    result = annotate.using(metadata={"k": [1, "a"]}).enqueue(note="p")
    assert get_result(result.id) == get_result(result.id)
    run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.metadata == {"k": [1, "a"], "notes": ["p"]}
    assert json.dumps(result.metadata)


def test_a_workflow_step_gets_the_metadata_of_its_task() -> None:
    """#141: "``my_task.using(metadata=...)``" in a workflow: a step made of a task with
    metadata carries it; the steps made of one without get ``{}``."""
    flow = chain(
        group([metadata_of.using(metadata={"step": "first"}).s(), metadata_of.s()]),
        metadata_of.s(),
    ).enqueue()
    run()
    assert flow.wait(10) == "SUCCESSFUL"
    steps = flow.steps()
    seen = [get_result(step.task_id).metadata for step in steps]
    assert seen == [{"step": "first"}, {}, {}]


def test_saved_metadata_survives_a_kill_9_and_the_next_attempt_starts_from_it(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """#141: "Metadata can be saved within a task using ``context.save_metadata()``" and
    "persist": what a run saved before its worker process was killed (kill -9) is kept,
    and the next attempt starts from it; what it changed after its last save is lost with
    the process."""
    result = tasks.save_then_crash.using(metadata={"given": 1}).enqueue("kept")
    worker = start_worker("test")
    wait_until(lambda: get_result(result.id).is_finished, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    done = get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"given": 1, "saved": "kept"}
    assert done.metadata == done.return_value
    assert done.attempts == 2
    assert done.errors[0].exception_class_path.endswith("WorkerCrashed")
    assert "died (signal 9)" in worker.output()
