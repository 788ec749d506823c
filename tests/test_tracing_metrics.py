"""OpenTelemetry's messaging metrics of tasks (redis_components/tracing/meters.py): the
four its conventions name, with their names, units, attributes and the advised buckets,
read from the SDK's in-memory reader; none while ``OTEL_METRICS`` is off."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from redis_components import get_result
from redis_components.tasks.framework import TaskResultStatus
from redis_components.testing import drain
from redis_components.tracing import meters
from redis_components.tracing.meters import BUCKETS, WAIT_BUCKETS
from tests import spans
from tests.processes import wait_until
from tests.testapp import tasks

pytestmark = pytest.mark.usefixtures("worker_may_check_db_connections")

# Their names and units, as open-telemetry/semantic-conventions's
# docs/messaging/messaging-metrics.md has them (status Development).
CONVENTIONS = {
    "messaging.client.sent.messages": "{message}",
    "messaging.client.operation.duration": "s",
    "messaging.client.consumed.messages": "{message}",
    "messaging.process.duration": "s",
}
OURS = {"redis_components.task.queue_wait": "s"}  # (the conventions name no such metric)
Points = Callable[[], dict[str, list[Any]]]


@pytest.fixture
def points() -> Iterator[Points]:
    """OTEL_METRICS on in this process; each of our metrics' points (its data points),
    recorded since the test started, by name."""
    reader = spans.metrics_reader()
    reader.get_metrics_data()  # (what earlier tests recorded: cumulative, so kept apart)
    before = _read(reader)

    def read() -> dict[str, list[Any]]:
        found = _read(reader)
        return {name: _since(found[name], before.get(name, [])) for name in found}

    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "OTEL_METRICS": True}):
        yield read


def _read(reader: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            if scope.scope.name != "redis_components":
                continue
            for metric in scope.metrics:
                assert metric.unit == {**CONVENTIONS, **OURS}[metric.name], metric.name
                found[metric.name] = list(metric.data.data_points)
    return found


def _since(now: list[Any], before: list[Any]) -> list[Any]:
    """The points of ``now`` less what ``before`` had (cumulative sums and counts, by
    attributes), those that changed."""
    earlier = {frozenset(p.attributes.items()): p for p in before}
    changed = []
    for point in now:
        old = earlier.get(frozenset(point.attributes.items()))
        total = point.value if hasattr(point, "value") else point.count
        previous = 0 if old is None else (old.value if hasattr(old, "value") else old.count)
        if total != previous:
            changed.append((dict(point.attributes), total - previous, point))
    return changed


def test_an_enqueue_and_an_attempt_record_the_four_conventional_metrics(points: Points) -> None:
    tasks.add.enqueue(1, 2)
    tasks.fail.enqueue("measured")  # 3 attempts (max_retries=2), then a dead letter
    drain(["test"], fail_fast=False)
    found = points()
    assert set(found) == set(CONVENTIONS) | set(OURS)
    base = {"messaging.system": "redis_components", "messaging.destination.name": "test"}
    send = {**base, "messaging.operation.name": "send", "messaging.operation.type": "send"}
    process = {**base, "messaging.operation.name": "process", "messaging.operation.type": "process"}
    [(attributes, sent, _)] = found["messaging.client.sent.messages"]
    assert (attributes, sent) == (send, 2)  # (a retry is not sent again)
    [(attributes, enqueues, duration)] = found["messaging.client.operation.duration"]
    assert (attributes, enqueues) == (send, 2)
    assert tuple(duration.explicit_bounds) == BUCKETS
    assert duration.sum > 0
    [(attributes, taken, _)] = found["messaging.client.consumed.messages"]
    assert (attributes, taken) == (process, 4)  # 1 + 3 attempts
    runs = {point[0].get("error.type"): point[1] for point in found["messaging.process.duration"]}
    assert runs == {None: 1, "builtins.ValueError": 3}
    [(attributes, waits, wait)] = found["redis_components.task.queue_wait"]
    assert (attributes, waits) == (process, 2)  # first attempts only
    assert tuple(wait.explicit_bounds) == WAIT_BUCKETS


def test_an_attempt_stopped_at_its_time_limit_records_its_run(
    points: Points, r: redis.Redis
) -> None:
    """The worker settles it at the limit while its code runs on: its run is recorded then."""
    tasks.stuck_once.enqueue("metered")
    drain(["test"], fail_fast=False)
    wait_until(lambda: r.exists("{test}:metered:ended"))  # (its code, left to itself)
    runs = {
        point[0].get("error.type"): point[1] for point in points()["messaging.process.duration"]
    }
    assert runs == {None: 1, "redis_components.exceptions.TimeLimitExceeded": 1}


def test_enqueue_many_is_one_operation_of_its_messages_per_queue(points: Points) -> None:
    tasks.add.enqueue_many([(1, 1), (2, 2), (3, 3)])
    found = points()
    [(_, sent, _)] = found["messaging.client.sent.messages"]
    [(_, operations, _)] = found["messaging.client.operation.duration"]
    assert (sent, operations) == (3, 1)


def test_an_enqueue_that_raises_records_its_error_type(points: Points) -> None:
    with pytest.raises(ConnectionError), meters.sending("test"):
        raise ConnectionError("the server is away")
    [(attributes, sent, _)] = points()["messaging.client.sent.messages"]
    assert (attributes["error.type"], sent) == ("builtins.ConnectionError", 1)


def test_an_sdk_that_raises_costs_the_metric_not_the_task(
    points: Points, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def add(self, *args: object) -> None:
            raise RuntimeError("the meter is broken")

        record = add

    monkeypatch.setattr(meters, "_instruments", lambda: (Broken(),) * 5)
    result = tasks.add.enqueue(1, 2)
    drain(["test"])
    assert get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert caplog.text.count("A metric of tasks is not recorded") == 3  # sent, taken, run


def test_nothing_is_recorded_while_the_setting_is_off() -> None:
    reader = spans.metrics_reader()
    before = _read(reader)
    tasks.add.enqueue(1, 2)
    drain(["test"])
    after = _read(reader)
    assert all(not _since(after[name], before.get(name, [])) for name in after)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_bad_otel_metrics_setting_fails_the_checks(value: object) -> None:
    with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "OTEL_METRICS": value}):
        assert "redis_components.E024" in {message.id for message in run_checks()}
