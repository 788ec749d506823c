"""Retries as Django's proposal has them (django/new-features#142): a conformance suite,
each test quoting the sentence of the proposal it checks, then our own names
(``max_retries``, ``retry_backoff``, ``Retry``) on the same machinery, and what a
``backoff`` that answers nonsense does. Tasks run on a real worker (in this process, or
in worker processes of their own for the crashes); results are read by ``get_result``."""

from __future__ import annotations

import datetime
import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.test import override_settings

from redis_components import Retry, get_result, redis_task
from redis_components.connection import get_client
from redis_components.exceptions import InvalidInput
from redis_components.tasks import RedisTaskBackend
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.status import dead_letters, waiting_tasks
from redis_components.testing import ScriptedWorker, drain
from tests.processes import WorkerProcess, wait_until
from tests.testapp import framework_tasks, tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")
QUEUE = "retries"
BACKEND = "redis_components.tasks.backend.RedisTaskBackend"

# What the backoff of ``answering`` answers (or raises): set by each test.
ANSWER: dict[str, Any] = {}


def answer(exception: BaseException, task_result: Any) -> Any:
    given = ANSWER["value"]
    if isinstance(given, Exception):
        raise given
    return given


@redis_task(queue=QUEUE, max_attempts=3, backoff=answer)
def answering(label: str) -> None:
    tasks.fail.call(label)


@redis_task(queue=QUEUE, max_attempts=2, backoff=lambda exception, task_result: None)
def retry_asked(label: str, delay: float | None) -> None:
    """Ask for a retry, with or without its own delay."""
    get_client().hincrby("{test}:runs", label, 1)
    raise Retry(delay=delay)


@redis_task(queue=QUEUE, max_attempts=2, backoff=lambda exception, task_result: 0.01)
def flaky(label: str) -> None:
    tasks.fail.call(label)


@redis_task(queue=QUEUE, max_retries=1, retry_backoff=0.01)
def flaky_old(label: str) -> None:
    tasks.fail.call(label)


def run(queue: str = QUEUE, wait: float = 1.0) -> int:
    """Run what is queued, and the retries due within ``wait`` seconds."""
    return drain([queue], fail_fast=False, wait=wait)


def runs(r: redis.Redis) -> dict[str, int]:
    return {key.decode(): int(value) for key, value in r.hgetall("{test}:runs").items()}


# -- the proposal, sentence by sentence ---------------------------------------------------


def test_a_task_runs_at_most_max_attempts_times_with_the_backoffs_delay_between(
    r: redis.Redis,
) -> None:
    """#142: "``my_task.enqueue()  # Run at most 10 times, with 30 seconds in between``"
    (``@task(max_attempts=10, backoff=linear_backoff)``, ``linear_backoff`` answering 30):
    after its first attempt fails, its next waits 30 seconds."""
    result = framework_tasks.my_task.enqueue("mine")
    assert run("test", wait=0.1) == 1
    assert get_result(result.id).status == TaskResultStatus.READY  # waiting for its retry
    count, [waiting] = waiting_tasks("test", "delayed")
    assert count == 1
    assert waiting.task_id == result.id
    assert waiting.due_ms is not None
    assert 28_000 < waiting.due_ms - time.time() * 1000 <= 30_000
    assert framework_tasks.my_task.max_attempts == 10
    assert framework_tasks.my_task.backoff is framework_tasks.linear_backoff


def test_a_task_is_retried_until_its_attempts_are_spent(r: redis.Redis) -> None:
    """#142: "Tasks should support being retried." with "A fixed number of retries": a
    429 every time is retried at once (the backoff answers 0) until 3 attempts ran."""
    result = framework_tasks.fetch.enqueue("busy", 429)
    run("test")
    failed = get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 3
    assert runs(r) == {"busy": 3}
    assert len(failed.errors) == 3
    assert [letter.reason for letter in dead_letters("test")] == ["failed"]


def test_a_backoff_that_answers_none_stops_the_retries(r: redis.Redis) -> None:
    """#142: "If the backoff function returns ``None``, the task isn't retried anymore.\""""
    result = framework_tasks.fetch.enqueue("gone", 502)
    run("test")
    failed = get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.attempts == 1
    assert runs(r) == {"gone": 1}
    assert failed.errors[-1].exception_class_path.endswith("framework_tasks.HTTPError")


def test_the_backoff_gets_the_result_as_this_attempt_left_it(r: redis.Redis) -> None:
    """#142: "The ``task_result`` passed to ``backoff`` will be after modification based on
    the current run (eg updating ``status``, adding error details to ``.errors``,
    incrementing ``attempts`` etc.\""""
    framework_tasks.fetch.enqueue("seen", 429)
    run("test")
    seen = [json.loads(item) for item in r.lrange("{test}:backoff", 0, -1)]
    # (The third attempt is the last: no backoff is asked after it.)
    assert [(s["status"], s["attempts"], len(s["errors"])) for s in seen] == [
        ("FAILED", 1, 1),
        ("FAILED", 2, 2),
    ]
    assert all(path.endswith("HTTPError") for s in seen for path in s["errors"])


def test_the_backoff_gets_the_raw_exception(r: redis.Redis) -> None:
    """#142: "The raw exception will also be passed, to access attributes which wouldn't
    survive serialization. This can be used to change the backoff based on the exception
    raised (eg changing the backoff if the HTTP error is ``429`` vs ``502``).\""""
    framework_tasks.fetch.enqueue("busy", 429)
    framework_tasks.fetch.enqueue("broken", 502)
    run("test")
    codes = [json.loads(item)["code"] for item in r.lrange("{test}:backoff", 0, -1)]
    assert sorted(codes) == [429, 429, 502]
    assert runs(r) == {"busy": 3, "broken": 1}


def test_using_cannot_change_the_retry_options() -> None:
    """#142: "``.using`` cannot be used to modify these attributes.\""""
    task = framework_tasks.fetch
    with pytest.raises(TypeError):
        task.using(max_attempts=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        task.using(backoff=framework_tasks.linear_backoff)  # type: ignore[call-arg]
    changed = task.using(priority=5, queue_name="test")
    assert (changed.max_attempts, changed.backoff) == (3, framework_tasks.by_status)


def test_the_backends_settings_give_every_task_its_attempts_and_backoff(r: redis.Redis) -> None:
    """#142, settings.py: ``"MAX_ATTEMPTS": 10, "BACKOFF": lambda task_result: 30``
    beside ``BACKEND``: a task that sets neither takes them (and a backoff of one
    argument, as that example writes it, is given the result)."""
    given: list[Any] = []

    def backoff(task_result: Any) -> int:
        given.append(task_result)
        return 0

    backend = {"BACKEND": BACKEND, "QUEUES": ["test"], "MAX_ATTEMPTS": 3, "BACKOFF": backoff}
    with override_settings(TASKS={"default": backend}):
        result = framework_tasks.explode.enqueue("settings")
        run("test")
        failed = get_result(result.id)
    assert (failed.status, failed.attempts) == (TaskResultStatus.FAILED, 3)
    assert runs(r) == {"settings": 3}
    assert [seen.attempts for seen in given] == [1, 2]


def test_the_backends_options_take_a_dotted_path_too(r: redis.Redis) -> None:
    """The same in ``OPTIONS``, where this backend's other options are, with the backoff
    by its dotted path."""
    options = {"MAX_ATTEMPTS": 2, "BACKOFF": "tests.testapp.framework_tasks.by_status"}
    backend = {"BACKEND": BACKEND, "QUEUES": ["test"], "OPTIONS": options}
    with override_settings(TASKS={"default": backend}):
        framework_tasks.explode.enqueue("options")
        run("test")
    assert runs(r) == {"options": 1}  # by_status stops a ValueError (no code) at once
    assert len(r.lrange("{test}:backoff", 0, -1)) == 1


def test_a_tasks_backoff_by_dotted_path(r: redis.Redis) -> None:
    """A task's ``backoff`` given as a dotted path is imported when first needed."""
    framework_tasks.fetch_by_path.enqueue("path", 429)
    run("test")
    assert runs(r) == {"path": 2}


# -- what each answer of a backoff does -----------------------------------------------------


@pytest.mark.parametrize(
    ("given", "attempts", "due_in"),
    [(0, 3, None), (datetime.timedelta(0), 3, None), (None, 1, None), (30, 1, 30.0)],
)
def test_a_backoffs_answer_is_the_delay_or_the_end(
    r: redis.Redis, given: Any, attempts: int, due_in: float | None
) -> None:
    """0 (or a timedelta): the next attempt at once; 30: in 30 seconds; None: no more."""
    ANSWER["value"] = given
    result = answering.enqueue("a")
    run(wait=0.1)
    assert runs(r) == {"a": attempts}
    count, delayed = waiting_tasks(QUEUE, "delayed")
    if due_in is None:
        assert count == 0
        assert get_result(result.id).status == TaskResultStatus.FAILED
        assert [letter.reason for letter in dead_letters(QUEUE)] == ["failed"]
    else:
        assert count == 1
        assert delayed[0].due_ms is not None
        assert due_in - 2 < (delayed[0].due_ms - time.time() * 1000) / 1000 <= due_in


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (ZeroDivisionError("oops"), "raised ZeroDivisionError: oops"),
        ("soon", "returned 'soon': it must return the seconds"),
        (-1, "returned -1"),
        (True, "returned True"),
        (float("nan"), "returned nan"),
    ],
)
def test_a_backoff_that_fails_dead_letters_the_task_saying_why(
    r: redis.Redis, given: Any, said: str
) -> None:
    """A backoff that raises or answers what is not a delay: the task is dead-lettered at
    once with the reason "bad backoff", never lost, never retried forever."""
    ANSWER["value"] = given
    result = answering.enqueue("b")
    run()
    assert runs(r) == {"b": 1}
    failed = get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    [letter] = dead_letters(QUEUE)
    assert letter.reason == "bad backoff"
    assert said in letter.error
    assert "its backoff tests.test_task_retries.answer" in letter.error
    assert letter.error.startswith("ValueError: b failed on purpose")


# -- our names on the same machinery ----------------------------------------------------------


def test_retry_with_a_delay_counts_as_an_attempt(r: redis.Redis) -> None:
    """``raise Retry(delay=...)`` chooses its own delay (the backoff is not asked) and
    counts against ``max_attempts``."""
    result = retry_asked.enqueue("own delay", 0)
    run()
    assert runs(r) == {"own delay": 2}
    assert get_result(result.id).attempts == 2


def test_retry_without_a_delay_asks_the_backoff(r: redis.Redis) -> None:
    """``raise Retry()``: the task's backoff decides (here: no more)."""
    retry_asked.enqueue("backoff's", None)
    run()
    assert runs(r) == {"backoff's": 1}


def test_max_retries_is_max_attempts_less_one(r: redis.Redis) -> None:
    """``max_retries=1`` and ``max_attempts=2`` run a failing task twice."""
    old, new = flaky_old.enqueue("old"), flaky.enqueue("new")
    run()
    assert runs(r) == {"old": 2, "new": 2}
    assert get_result(old.id).attempts == get_result(new.id).attempts == 2


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2, "max_retries": 1}, "give max_attempts or max_retries"),
        ({"backoff": answer, "retry_backoff": 1.0}, "give backoff or retry_backoff"),
        ({"backoff": 5}, "backoff"),
        ({"backoff": "nodots"}, "backoff"),
    ],
)
def test_bad_retry_options_are_refused_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=named):
        redis_task(queue=QUEUE, **options)(lambda: None)


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"OPTIONS": {"MAX_ATTEMPTS": 0}}, "MAX_ATTEMPTS'] must be an integer of at least 1"),
        ({"OPTIONS": {"MAX_ATTEMPTS": 2, "MAX_RETRIES": 1}}, "give MAX_ATTEMPTS or MAX_RETRIES"),
        ({"OPTIONS": {"BACKOFF": "no.such.function"}}, "no.such"),
        ({"BACKOFF": 5}, "BACKOFF"),
        ({"MAX_ATTEMPTS": 2, "OPTIONS": {"MAX_ATTEMPTS": 3}}, "sets MAX_ATTEMPTS twice"),
    ],
)
def test_bad_backend_retry_options_fail_the_checks(params: dict[str, Any], said: str) -> None:
    backend = RedisTaskBackend("checked", {"BACKEND": BACKEND, **params})
    problems = [message.msg for message in backend.check()]
    assert any(said in problem for problem in problems), problems
    assert all(message.id == "redis_components.E012" for message in backend.check())


# -- crashes --------------------------------------------------------------------------------


def test_a_crash_counts_as_an_attempt_of_a_task_given_max_attempts(r: redis.Redis) -> None:
    """With ``max_attempts``, every attempt counts, crashes included: a task whose two
    attempts both crashed (its worker died holding it) is dead-lettered when next taken,
    without a third run; with ``max_retries``, a crash counts only against
    ``TASK_MAX_CRASHES``, as before."""
    new, old = flaky.enqueue("new"), flaky_old.enqueue("old")
    for _ in range(2):
        worker = ScriptedWorker([QUEUE])
        assert {worker.take().id, worker.take().id} == {new.id, old.id}  # type: ignore[union-attr]
        assert worker.crash() == (2, 0)
    run()
    assert runs(r) == {"old": 2}  # (its crashes are not attempts: it ran 1 + 1 retry)
    failed = get_result(new.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[-1].exception_class_path.endswith("WorkerCrashed")
    letters = {letter.reason: letter for letter in dead_letters(QUEUE)}
    assert set(letters) == {"crashed", "failed"}
    assert "its attempts are spent" in letters["crashed"].error


def test_a_task_killing_its_worker_runs_again_while_it_has_attempts(
    r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """kill -9 of the worker process in a task's attempt, on a real worker: the next
    attempt runs while ``max_attempts`` allows (``crash_first``: its second succeeds), and
    not once they are spent (``crash_always``: 2 runs, though ``TASK_MAX_CRASHES`` is 3)."""
    first = tasks.crash_first.enqueue("first")
    always = tasks.crash_always.enqueue("always")
    worker = start_worker("test", TASK_MAX_CRASHES=3)
    wait_until(
        lambda: get_result(first.id).is_finished and get_result(always.id).is_finished,
        worker.output,
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert runs(r) == {"first": 2, "always": 2}
    done = get_result(first.id)
    assert (done.status, done.return_value, done.attempts) == (TaskResultStatus.SUCCESSFUL, 2, 2)
    failed = get_result(always.id)
    assert failed.status == TaskResultStatus.FAILED
    [letter] = dead_letters("test")
    assert letter.reason == "crashed"
    assert "its attempts are spent" in letter.error


def test_a_task_whose_attempts_a_lowered_limit_spent_is_dead_lettered_as_failed(
    r: redis.Redis,
) -> None:
    """A task queued for its 3rd attempt when its task now allows 2 (a deploy lowered
    it) does not run: it is dead-lettered saying so, not as a crash."""
    result = flaky_old.enqueue("lowered")
    worker = ScriptedWorker([QUEUE])
    for _ in range(2):  # two failed attempts, each retried at once (as a higher limit did)
        taken = worker.take()
        assert taken is not None
        assert worker.retry(taken.id, 0)
    run()
    assert runs(r) == {}
    [letter] = dead_letters(QUEUE)
    assert letter.reason == "failed"
    assert "its 2 attempts are spent: the task allows 2 now" in letter.error
    assert get_result(result.id).status == TaskResultStatus.FAILED
