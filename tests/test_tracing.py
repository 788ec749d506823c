"""OpenTelemetry spans of tasks (redis_components/tracing.py): the names and attributes
of the messaging conventions, the link from each attempt to its task's creation across
processes, a retry's link to the attempt that failed, the ``settle`` of a dead letter,
and nothing of OpenTelemetry imported while tracing is off. Spans are read from the
SDK's in-memory exporter here, and from a file a worker process writes
(tests/spans.py)."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.checks import run_checks
from django.test import Client, override_settings
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from conftest import CommandCount
from redis_components import chain, get_result, group, redis_task
from redis_components.exceptions import InvalidTaskArguments
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.results import read_records
from redis_components.tasks.schedules import Claim, Scheduler, build
from redis_components.tasks.store import TaskStore
from redis_components.testing import drain
from redis_components.tracing import KEEP_AFTER, TaskContextFilter, schedule_context
from tests import spans
from tests.processes import WorkerProcess, wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")

# The names this package uses, as open-telemetry/semantic-conventions names them
# (docs/messaging/messaging-spans.md and docs/registry/attributes/messaging.md, status
# Development): span names "{messaging.operation.name} {destination}", and these
# attributes. Ours are under "redis_components.".
OPERATIONS = {
    "create": SpanKind.PRODUCER,
    "send": SpanKind.PRODUCER,
    "process": SpanKind.CONSUMER,
    "settle": SpanKind.INTERNAL,
}
CONVENTIONS = {
    "messaging.system",
    "messaging.operation.name",
    "messaging.operation.type",
    "messaging.destination.name",
    "messaging.destination.partition.id",
    "messaging.message.id",
    "messaging.message.conversation_id",
    "messaging.client.id",
}


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in found if span.name == name]


def check_conventions(span: ReadableSpan) -> None:
    """A span of ours is named and attributed as the conventions say."""
    operation, _, destination = span.name.partition(" ")
    attributes = dict(span.attributes or {})
    assert span.kind == OPERATIONS[operation]
    assert attributes["messaging.operation.name"] == operation
    assert attributes["messaging.destination.name"] == destination
    assert attributes["messaging.system"] == "redis_components"
    unknown = {
        name
        for name in attributes
        if name not in CONVENTIONS and not name.startswith("redis_components.")
    }
    assert not unknown, unknown


def test_a_send_span_wraps_the_enqueue_and_its_context_travels_in_the_metadata(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    with trace.get_tracer("test").start_as_current_span("request") as request:
        result = tasks.add.enqueue(1, 2)
    [send] = named(exported(), "send test")
    check_conventions(send)
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.attributes is not None
    assert send.attributes["messaging.message.id"] == result.id
    assert send.attributes["redis_components.task.name"] == "tests.testapp.tasks.add"
    assert send.end_time is not None
    assert send.start_time is not None
    assert send.end_time > send.start_time  # the script's round trip, not zero
    carrier = get_result(result.id).metadata["trace"]
    assert carrier["traceparent"].split("-")[2] == f"{send.context.span_id:016x}"
    assert result.args == [1, 2]  # the context is never an argument


def test_an_attempt_in_another_process_links_to_its_tasks_creation(
    r: redis.Redis,
    start_worker: Callable[..., WorkerProcess],
    exported: Callable[[], list[ReadableSpan]],
    tmp_path: Path,
) -> None:
    """Two processes: this one enqueues (its ``send`` span), a worker process runs it
    (its ``process`` span): a new trace, linked to the ``send`` span."""
    result = tasks.add.enqueue(2, 3)
    [send] = named(exported(), "send test")
    written = tmp_path / "spans.jsonl"
    worker = start_worker("test", TRACING=True, environment={"RC_TEST_SPANS": str(written)})
    wait_until(lambda: named_in_file(written, "process test"), worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    [process] = named_in_file(written, "process test")
    assert get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["parent_id"] is None
    assert process["context"]["trace_id"] != f"0x{send.context.trace_id:032x}"
    [link] = process["links"]
    assert link["context"]["span_id"] == f"0x{send.context.span_id:016x}"
    assert link["context"]["trace_id"] == f"0x{send.context.trace_id:032x}"
    attributes = process["attributes"]
    assert attributes["messaging.message.id"] == result.id
    assert attributes["redis_components.task.attempt"] == 1
    assert attributes["redis_components.task.queue_wait_ms"] >= 0
    assert attributes["messaging.client.id"]  # the worker's id
    assert set(attributes) - CONVENTIONS <= {
        "redis_components.task.name",
        "redis_components.task.attempt",
        "redis_components.task.queue_wait_ms",
    }


def named_in_file(path: Path, name: str) -> list[dict[str, Any]]:
    return [span for span in spans.read_file(path) if span["name"] == name]


def test_enqueue_many_sends_a_span_per_task_and_ends_them_when_one_is_bad(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    results = tasks.add.enqueue_many([(1, 1), (2, 2)])
    sent = named(exported(), "send test")
    assert {dict(span.attributes or {})["messaging.message.id"] for span in sent} == {
        result.id for result in results
    }
    drain(["test"])
    links = {
        link.context.span_id for span in named(exported(), "process test") for link in span.links
    }
    assert links == {span.context.span_id for span in sent}
    with pytest.raises(InvalidTaskArguments):
        tasks.add.enqueue_many([(3, 3), (4,)])
    [unsent] = named(exported(), "send test")[2:]  # (the first's, ended: nothing sent)
    assert unsent.status.status_code == StatusCode.ERROR


def test_a_delayed_task_links_to_its_creation_when_it_runs(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """Delayed (its run_after), then moved to its queue by a worker's take: its attempt's
    span still links to the ``send`` span of its enqueue, and starts once it is due."""
    with trace.get_tracer("test").start_as_current_span("request"):
        tasks.add.using(run_after=timezone.now() + timedelta(seconds=0.3)).enqueue(2, 2)
    drain(["test"])
    [send] = named(exported(), "send test")
    [process] = named(exported(), "process test")
    [link] = process.links
    assert link.context.span_id == send.context.span_id
    assert process.start_time is not None
    assert send.end_time is not None
    assert process.start_time - send.end_time >= 0.29e9


def test_a_retry_links_to_the_attempt_that_failed(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    tasks.retry_once.enqueue("again")
    drain(["test"])
    first, second = sorted(named(exported(), "process test"), key=lambda s: s.start_time or 0)
    for span in (first, second):
        check_conventions(span)
    assert first.status.status_code == StatusCode.ERROR
    assert [event.name for event in first.events] == ["exception", "retry"]
    assert second.status.status_code == StatusCode.UNSET
    links = {link.attributes["redis_components.link"]: link for link in second.links}  # type: ignore[index]
    assert set(links) == {"creation", "failed attempt"}
    assert links["failed attempt"].context.span_id == first.context.span_id
    assert links["creation"].context == first.links[0].context  # both: the same send
    assert (second.attributes or {})["redis_components.task.attempt"] == 2


def test_a_task_run_again_after_its_worker_died_links_to_the_lost_attempt(
    r: redis.Redis,
    start_worker: Callable[..., WorkerProcess],
    exported: Callable[[], list[ReadableSpan]],
    tmp_path: Path,
) -> None:
    """kill -9 of a real worker in a task's first attempt: the lost attempt's span never
    ends (the process is gone), but the context it saved before the task ran is what the
    next attempt links to; the lost attempt's own child span, exported before the kill,
    names the same span as its parent."""
    result = tasks.traced_crash.enqueue("lost")
    written = tmp_path / "spans.jsonl"
    worker = start_worker("test", TRACING=True, environment={"RC_TEST_SPANS": str(written)})
    wait_until(lambda: get_result(result.id).is_finished, worker.output)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    done = get_result(result.id)
    assert (done.status, done.attempts) == (TaskResultStatus.SUCCESSFUL, 2)
    inside = named_in_file(written, "before the crash lost")
    assert len(inside) == 2  # one in each attempt
    [process] = named_in_file(written, "process test")  # the lost one never ended
    lost = next(
        span for span in inside if span["context"]["trace_id"] != process["context"]["trace_id"]
    )
    links = {link["attributes"]["redis_components.link"]: link for link in process["links"]}
    assert set(links) == {"creation", "lost attempt"}
    assert links["lost attempt"]["context"]["span_id"] == lost["parent_id"]
    assert links["lost attempt"]["context"]["trace_id"] == lost["context"]["trace_id"]
    assert process["attributes"]["redis_components.task.attempt"] == 2
    [send] = named(exported(), "send test")
    assert links["creation"]["context"]["span_id"] == f"0x{send.context.span_id:016x}"


def test_an_attempt_after_one_that_ended_does_not_say_it_was_lost(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """An attempt that ran long enough for its context to be kept, then was retried: the
    next one links to it as failed, not as lost."""
    result = tasks.slow_retry_once.enqueue("kept")
    drain(["test"])
    first, second = sorted(named(exported(), "process test"), key=lambda s: s.start_time or 0)
    reasons = {link.attributes["redis_components.link"]: link for link in second.links}  # type: ignore[index]
    assert set(reasons) == {"creation", "failed attempt"}
    assert reasons["failed attempt"].context.span_id == first.context.span_id
    kept = read_records([result.id])[0]
    assert kept is not None
    assert kept.trace.split("-")[2] == f"{second.context.span_id:016x}"  # (the last kept)


def test_an_attempt_stopped_at_its_time_limit_ends_its_span_then(
    r: redis.Redis, exported: Callable[[], list[ReadableSpan]]
) -> None:
    """The worker settles an attempt at its hard time limit, while its code runs on: the
    span ends then, as a failure, and the next attempt links to it as failed, not lost.
    The abandoned code's own end, later, does not end the span again."""
    result = tasks.stuck_once.enqueue("stuck")
    drain(["test"], fail_fast=False)
    assert get_result(result.id).return_value == "second"
    wait_until(lambda: r.exists("{test}:stuck:ended"))
    code_ended = int(r.get("{test}:stuck:ended") or 0)
    first, second = sorted(named(exported(), "process test"), key=lambda s: s.start_time or 0)
    assert first.end_time is not None
    assert first.end_time < code_ended
    assert first.status.status_code == StatusCode.ERROR
    assert first.status.description == "time limit"
    assert [event.name for event in first.events] == ["abandoned", "retry"]
    links = {link.attributes["redis_components.link"]: link for link in second.links}  # type: ignore[index]
    assert set(links) == {"creation", "failed attempt"}
    assert links["failed attempt"].context.span_id == first.context.span_id


def test_an_attempt_that_ends_at_once_writes_nothing_to_keep_its_context(
    exported: Callable[[], list[ReadableSpan]], count_commands: CommandCount
) -> None:
    """A no-op task ends before its context would be kept: tracing costs it no command
    (the keeper writes only for an attempt still running KEEP_AFTER after its start)."""
    sent = {}
    for tracing in (False, False, True):  # (the first loads the scripts)
        traced = {**settings.REDIS_COMPONENTS, "TRACING": tracing}
        with override_settings(REDIS_COMPONENTS=traced):
            result = tasks.add.enqueue(1, 1)
            with count_commands as counted:
                drain(["test"])
                time.sleep(KEEP_AFTER * 3)
        sent[tracing] = [command.split()[0] for command in counted.commands]
    assert sent[True] == sent[False]
    [process] = named(exported(), "process test")
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == result.id
    record = read_records([result.id])[0]
    assert record is not None
    assert record.trace == ""


def test_a_task_enqueued_without_tracing_keeps_its_metadata_as_it_was(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """Enqueued where tracing was off, retried by a worker where it is on: its attempts
    have spans, but its metadata (the user's) gains nothing, and none is kept."""
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": False}):
        result = tasks.slow_retry_once.enqueue("untraced")
    drain(["test"])
    assert len(named(exported(), "process test")) == 2
    [record] = read_records([result.id])
    assert record is not None
    assert (record.metadata, record.trace) == ({}, "")


def test_a_span_processor_that_raises_costs_the_span_not_the_task(
    exported: Callable[[], list[ReadableSpan]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An SDK's processor that raises when a span ends (the SDK passes it on): the
    enqueue returns its result, and the attempt's outcome is recorded."""
    provider: Any = trace.get_tracer_provider()
    [processor] = provider._active_span_processor._span_processors

    def broken(span: ReadableSpan) -> None:
        raise RuntimeError("the exporter's queue is broken")

    monkeypatch.setattr(processor, "on_end", broken)
    result = tasks.add.enqueue(1, 2)
    drain(["test"])
    assert get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert "tracing failed" in caplog.text


def test_a_schedules_tick_is_a_root_linked_to_its_schedule(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """A tick's ``create`` span starts a trace of its own (not a child of whatever the
    scheduler's thread has current), linked to the context that stands for its schedule,
    the same in every process; its task's attempt links to the tick."""
    store = TaskStore()
    _, now = store.schedule_ticks()
    every = build(
        "nightly",
        task_name="tests.testapp.tasks.add",
        queue="test",
        priority=0,
        backend=None,
        every=60,
        args=[1, 2],
    )
    tick = every.next_after(now) - 60_000  # the last tick: due
    store.start_schedule("nightly", tick)
    with trace.get_tracer("test").start_as_current_span("the scheduler's loop"):
        Scheduler([every]).run_due()
    drain(["test"])
    [create] = named(exported(), "create test")
    check_conventions(create)
    assert create.parent is None
    [link] = create.links
    assert link.context == schedule_context("nightly")
    assert link.context != schedule_context("hourly")
    attributes = dict(create.attributes or {})
    assert attributes["redis_components.schedule.name"] == "nightly"
    assert attributes["redis_components.schedule.tick"] == tick
    assert not create.events  # claimed, and sent
    [process] = named(exported(), "process test")
    links = {link.attributes["redis_components.link"]: link for link in process.links}  # type: ignore[index]
    assert links["creation"].context.span_id == create.context.span_id
    # The same tick claimed again, as a second scheduler would: not sent, and said so.
    Scheduler([every])._claim([Claim.of(every, tick, now)])
    again = [span for span in named(exported(), "create test") if span is not create]
    assert [event.name for event in again[-1].events] == ["claimed by another scheduler"]


def test_a_fan_ins_callback_links_to_each_member(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """chain(group of 200, callback): the callback's attempt links to each member's
    attempt (a member that failed too: its failed attempt), and to nothing past
    TRACING_MAX_LINKS (set here above the SDK's own default of 128, as a project that
    wants 200 links sets both: tests/spans.py)."""
    members = [tasks.add.si(n, n) for n in range(199)] + [tasks.fail.si("member")]
    traced = {**settings.REDIS_COMPONENTS, "TRACING": True, "TRACING_MAX_LINKS": 250}
    with override_settings(REDIS_COMPONENTS=traced):
        chain(group(members), tasks.total.s("fan-in").set(allow_failure=True)).enqueue()
        drain(["test"], fail_fast=False)
    found = named(exported(), "process test")
    [callback] = [
        s for s in found if (s.attributes or {})["redis_components.task.name"].endswith(".total")
    ]
    last = {}  # each member's last attempt
    for span in found:
        if span is not callback:
            last[(span.attributes or {})["messaging.message.id"]] = span
    assert len(last) == 200
    reasons = [link.attributes["redis_components.link"] for link in callback.links]  # type: ignore[index]
    assert reasons.count("parent step") == 200
    linked = {link.context.span_id for link in callback.links}
    assert {span.context.span_id for span in last.values()} <= linked


def test_a_fan_in_links_to_its_first_members_up_to_the_setting(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    traced = {**settings.REDIS_COMPONENTS, "TRACING": True, "TRACING_MAX_LINKS": 3}
    with override_settings(REDIS_COMPONENTS=traced):
        chain(group([tasks.add.si(n, n) for n in range(5)]), tasks.total.s("few")).enqueue()
        drain(["test"])
    found = named(exported(), "process test")
    [callback] = [
        s for s in found if (s.attributes or {})["redis_components.task.name"].endswith(".total")
    ]
    parents = [
        link for link in callback.links if link.attributes["redis_components.link"] == "parent step"
    ]  # type: ignore[index]
    assert len(parents) == 3


def test_a_dead_letter_settles_its_task(exported: Callable[[], list[ReadableSpan]]) -> None:
    tasks.fail.enqueue("for good")  # 3 attempts (max_retries=2), then a dead letter
    drain(["test"], fail_fast=False)
    found = exported()
    assert len(named(found, "process test")) == 3
    [settle] = named(found, "settle test")
    check_conventions(settle)
    assert (settle.attributes or {})["redis_components.dead_letter.reason"] == "failed"
    last = max(named(found, "process test"), key=lambda s: s.start_time or 0)
    assert settle.parent is not None
    assert settle.parent.span_id == last.context.span_id
    assert last.status.status_code == StatusCode.ERROR
    assert [event.name for event in last.events] == ["exception"]


@pytest.mark.parametrize("mode", ["parent", "root"])
def test_the_setting_makes_an_attempt_a_child_or_a_root(
    exported: Callable[[], list[ReadableSpan]], mode: str
) -> None:
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": mode}):
        tasks.add.enqueue(1, 1)
        drain(["test"])
    [send] = named(exported(), "send test")
    [process] = named(exported(), "process test")
    assert not process.links
    if mode == "parent":
        assert process.parent is not None
        assert process.parent.span_id == send.context.span_id
        assert process.context.trace_id == send.context.trace_id
    else:
        assert process.parent is None
        assert process.context.trace_id != send.context.trace_id


def test_a_workflows_steps_link_to_where_it_was_made(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    with trace.get_tracer("test").start_as_current_span("request") as request:
        workflow = chain(tasks.add.si(1, 2), tasks.add.si(3, 4)).enqueue()
    drain(["test"])
    steps = named(exported(), "process test")
    assert len(steps) == 2
    for step in steps:
        [link] = step.links
        assert link.context.span_id == request.get_span_context().span_id
        assert (step.attributes or {})["messaging.message.conversation_id"] == workflow.id


def test_a_tasks_own_spans_are_children_of_its_attempt(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """No ritual: in a worker's slot (a thread) and on its event loop alike."""
    tasks.traced_child.enqueue("sync")
    tasks.async_traced_child.enqueue("async")
    drain(["test"])
    found = exported()
    for label in ("sync", "async"):
        [inside] = named(found, f"inside {label}")
        [attempt] = [
            span
            for span in named(found, "process test")
            if inside.parent is not None and span.context.span_id == inside.parent.span_id
        ]
        assert attempt.context.trace_id == inside.context.trace_id


def test_tracing_on_without_an_sdk_makes_nothing(r: redis.Redis) -> None:
    """With TRACING on but no tracer provider set (OpenTelemetry's API alone: every span
    would be a no-op), a task is enqueued and run as with tracing off: nothing is
    carried in its metadata, and nothing is kept in its result."""
    code = (
        "from redis_components.tasks.results import read_records\n"
        "from redis_components.testing import drain\n"
        "from tests.testapp import tasks\n"
        "result = tasks.slow_retry_once.enqueue('no sdk')\n"
        "drain(['test'])\n"
        "[record] = read_records([result.id])\n"
        "assert (record.status.name, record.metadata, record.trace) == ('SUCCESSFUL', {}, '')\n"
    )
    spans.run_django(code, {**settings.REDIS_COMPONENTS, "TRACING": True})


def test_nothing_of_opentelemetry_is_imported_while_tracing_is_off(r: redis.Redis) -> None:
    """With TRACING off (the default), enqueuing and running tasks never imports
    ``opentelemetry``: a process where it cannot be imported at all (as where the extra
    is not installed) runs them, and ``tracing`` never tried. (redis-py 8 imports it by
    itself where it is installed: that is redis-py's, not ours.)"""
    code = (
        "from redis_components import get_result\n"
        "from redis_components.testing import drain\n"
        "from tests.testapp import tasks\n"
        "result = tasks.add.enqueue(1, 2)\n"
        "drain(['test'])\n"
        "assert get_result(result.id).return_value == 3\n"
    )
    tried = spans.run_django(code, settings.REDIS_COMPONENTS, otel_absent=True)
    assert tried.strip() == "[]"


@pytest.mark.parametrize(("value", "check"), [("yes", "E021"), (1, "E021")])
def test_a_bad_tracing_setting_fails_the_checks(value: object, check: str) -> None:
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": value}):
        found = {message.id for message in run_checks()}
    assert f"redis_components.{check}" in found


def test_tracing_on_is_a_valid_setting() -> None:
    for value in (True, False, "link", "parent", "root"):
        with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "TRACING": value}):
            found = {message.id for message in run_checks()}
        assert not found & {"redis_components.E021", "redis_components.E022"}


@redis_task(queue="logged")
def logs_a_line(label: str) -> None:
    logging.getLogger("tests.tasklog").warning("inside %s", label)


def test_log_lines_written_in_a_task_carry_its_context(
    exported: Callable[[], list[ReadableSpan]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(TaskContextFilter())
    result = logs_a_line.enqueue("a")
    with caplog.at_level(logging.WARNING, logger="tests.tasklog"):
        logging.getLogger("tests.tasklog").warning("outside")
        drain(["logged"])
    outside, inside = [r for r in caplog.records if r.name == "tests.tasklog"]
    assert (outside.task_id, outside.task_attempt, outside.trace_id) == ("", 0, "")  # type: ignore[attr-defined]
    [process] = named(exported(), "process logged")
    assert inside.task_id == result.id  # type: ignore[attr-defined]
    assert inside.task_attempt == 1  # type: ignore[attr-defined]
    assert inside.task_queue == "logged"  # type: ignore[attr-defined]
    assert inside.trace_id == f"{process.context.trace_id:032x}"  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_the_admin_task_page_links_its_trace(
    exported: Callable[[], list[ReadableSpan]], viewer: Client
) -> None:
    result = tasks.add.enqueue(1, 2)
    [send] = named(exported(), "send test")
    trace_id = f"{send.context.trace_id:032x}"
    page = "/admin/redis_components/taskqueues/task/"
    shown = viewer.get(page, {"id": result.id}).content.decode()
    assert f"<code>{trace_id}</code>" in shown
    linked = {**settings.REDIS_COMPONENTS, "TRACING_LINK": "https://traces.example/t/{trace_id}"}
    with override_settings(REDIS_COMPONENTS=linked):
        shown = viewer.get(page, {"id": result.id}).content.decode()
    assert f'<a href="https://traces.example/t/{trace_id}"><code>{trace_id}</code></a>' in shown


@pytest.mark.parametrize("link", ["https://traces.example/", 5])
def test_a_tracing_link_without_a_trace_id_fails_the_checks(link: object) -> None:
    bad = {**settings.REDIS_COMPONENTS, "TRACING_LINK": link}
    with override_settings(REDIS_COMPONENTS=bad):
        assert "redis_components.E023" in {message.id for message in run_checks()}


def test_a_carrier_the_task_spoiled_costs_its_attempt_a_link_not_its_run(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    """What a task (or its enqueuer) wrote under the metadata's "trace" is not for the
    propagators: the attempt runs, in a span without a creation link."""
    result = tasks.add.using(metadata={"trace": {"traceparent": 5, "baggage": 7}}).enqueue(1, 2)
    drain(["test"])
    assert get_result(result.id).return_value == 3
    [process] = named(exported(), "process test")
    assert all(link.context.span_id != 0 for link in process.links)


def test_the_tracing_context_does_not_count_against_the_metadatas_limit(
    exported: Callable[[], list[ReadableSpan]],
) -> None:
    limited = {**settings.REDIS_COMPONENTS, "TRACING": True, "TASK_METADATA_MAX_BYTES": 200}
    with override_settings(REDIS_COMPONENTS=limited):
        result = tasks.add.using(metadata={"note": "x" * 180}).enqueue(1, 2)
        drain(["test"])
    done = get_result(result.id)
    assert done.return_value == 3
    assert done.metadata["note"] == "x" * 180
    assert "traceparent" in done.metadata["trace"]
