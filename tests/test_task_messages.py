"""The task message: its JSON layout (a contract with the Lua scripts) and decoding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from redis_components.exceptions import InvalidInput, TaskSerializationError
from redis_components.tasks.messages import (
    MalformedTask,
    TaskMessage,
    random_id,
    task_id_of,
    validate_priority,
)

DEEP = "[" * 100_000 + "]" * 100_000


def test_the_payload_starts_with_id_and_priority_and_ends_with_the_retries() -> None:
    message = TaskMessage(
        id="ab12", task="t", queue="q", args=[1], kwargs={"k": "é"}, priority=-5, backend="default"
    )
    payload = message.encode()
    assert payload.startswith('{"id":"ab12","priority":-5,')
    assert payload.endswith(',"backend":"default","retries":0}')
    assert "é" in payload  # not escaped: payloads are UTF-8
    assert TaskMessage.decode(payload) == message
    crashed = TaskMessage(id="ab12", task="t", queue="q", args=[], kwargs={}, crashes=2)
    assert crashed.encode().endswith('"retries":0,"crashes":2}')
    assert TaskMessage.decode(crashed.encode()) == crashed
    # The enqueue script writes the enqueue time just before the retries.
    dated = TaskMessage(
        id="ab12", task="t", queue="q", args=[], kwargs={}, enqueued_at=1_700_000_000_123, retries=1
    )
    assert dated.encode().endswith(',"enqueued_at":1700000000123,"retries":1}')
    assert TaskMessage.decode(dated.encode()) == dated


def test_a_first_attempt_was_due_at_its_enqueue_its_delays_end_or_its_tick() -> None:
    """``due_ms``, from which a first attempt's wait in its queue counts (its metric and
    its span's attribute): the enqueue script stamps ``due_at`` after ``enqueued_at``
    for a task enqueued with a delay; a tick counts from its tick. Without its enqueue
    time (a deferral's, a requeued dead letter's) it is not known to be a first one."""

    def message(**times: int) -> TaskMessage:
        return TaskMessage(id="ab12", task="t", queue="q", args=[], kwargs={}, **times)

    delayed = message(enqueued_at=1_000, due_at=1_500)
    assert delayed.encode().endswith(',"enqueued_at":1000,"due_at":1500,"retries":0}')
    assert TaskMessage.decode(delayed.encode()) == delayed
    assert delayed.due_ms == 1_500
    assert message(enqueued_at=1_000).due_ms == 1_000
    assert message(scheduled_for=900, enqueued_at=1_000).due_ms == 900  # a tick
    assert message(scheduled_for=900).due_ms is None
    assert message(enqueued_at=1_000, retries=1).due_ms is None  # not a first attempt
    assert message(enqueued_at=1_000, crashes=1).due_ms is None
    assert message().due_ms is None  # a deferral's (its enqueue time dropped)


def new_message(
    task: str, queue: str, args: Any, kwargs: dict[str, Any]
) -> tuple[TaskMessage, str]:
    """A new task's message and its payload (what an enqueue writes)."""
    message = TaskMessage(id=random_id(), task=task, queue=queue, args=list(args), kwargs=kwargs)
    return message, message.encode()


def test_new_messages_get_random_hex_ids() -> None:
    first, payload = new_message("t", "q", (1, 2), {})
    second, _ = new_message("t", "q", (), {})
    assert first.id != second.id
    assert len(first.id) == 32
    assert int(first.id, 16) >= 0
    assert first.args == [1, 2]  # tuples travel as lists
    assert task_id_of(payload.encode()) == first.id


@pytest.mark.parametrize(
    "payload",
    [
        b"not a task",
        b"0",
        b'{"id":"zz"}',
        b'{"ID":"ab"}',
        b'{"id":"ab\xff"}',
        b"",
    ],
)
def test_task_id_of_reads_only_hex_ids_at_the_start(payload: bytes) -> None:
    assert task_id_of(payload) == ""


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe\xfa not utf-8", "not JSON"),
        (b'{"id": "\xc3\x28"}', "not JSON"),
        (DEEP.encode(), "nested too deeply"),
        (b"[1, 2]", "a JSON list"),
        (b'"text"', "a JSON str"),
        (b"null", "a JSON NoneType"),
        (b"", "not JSON"),
        (b'{"id": 1, "task": "t", "queue": "q", "args": [], "kwargs": {}}', "'id'"),
        (b'{"id": "1", "task": "t", "queue": "q", "args": {}, "kwargs": {}}', "'args'"),
        (b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": []}', "'kwargs'"),
        (
            b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "retries": -1}',
            "negative",
        ),
        (
            b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "priority": 1.5}',
            "'priority'",
        ),
        (
            b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "backend": 3}',
            "'backend'",
        ),
        (
            b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "enqueued_at": "1"}',
            "'enqueued_at'",
        ),
        (
            b'{"id": "1", "task": "t", "queue": "q", "args": [], "kwargs": {}, "due_at": 1.5}',
            "'due_at'",
        ),
    ],
)
def test_anything_that_is_not_a_task_raises_malformed_task_saying_why(
    payload: bytes, problem: str
) -> None:
    with pytest.raises(MalformedTask, match=problem):
        TaskMessage.decode(payload)


@pytest.mark.parametrize("bad", [object(), {1, 2}, float("nan"), b"bytes"])
def test_arguments_json_cannot_carry_raise_task_serialization_error(bad: object) -> None:
    with pytest.raises(TaskSerializationError, match="arguments of task 't'"):
        new_message("t", "q", [bad], {})


def test_a_lone_surrogate_raises_task_serialization_error_naming_it() -> None:
    # JSON encodes it, but UTF-8 (what Redis is sent) cannot.
    with pytest.raises(TaskSerializationError, match=r"'\\udc80' is a lone surrogate"):
        new_message("t", "q", ["caf\u00e9 \udc80"], {})
    assert new_message("t", "q", ["caf\u00e9 \U0001f600"], {})[1].endswith('"retries":0}')

    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(TaskSerializationError, match="nested too deeply"):
        new_message("t", "q", [deep], {})
    assert json.loads(new_message("t", "q", [[[[1]]]], {})[1])["args"] == [[[[1]]]]


@pytest.mark.parametrize("priority", [-101, 101, 1.0, True, "1", None])
def test_priorities_are_whole_numbers_from_minus_100_to_100(priority: object) -> None:
    with pytest.raises(InvalidInput, match="priority"):
        validate_priority(priority)
    assert [validate_priority(p) for p in (-100, 0, 100)] == [-100, 0, 100]
