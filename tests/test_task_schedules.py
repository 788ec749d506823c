"""Schedules: tick arithmetic in time zones, validation, and claims that happen once."""

from __future__ import annotations

import datetime
import math
import threading
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from redis_components import get_result, periodic
from redis_components.exceptions import ConfigurationError, InvalidInput, InvalidTaskArguments
from redis_components.tasks.framework import TaskResultStatus
from redis_components.tasks.messages import TaskMessage
from redis_components.tasks.schedules import (
    Scheduler,
    build,
    schedule_registry,
    schedule_states,
    schedules,
)
from redis_components.tasks.status import waiting_tasks
from redis_components.tasks.store.layout import schedule_last_key as last_key
from redis_components.tasks.store.layout import schedule_next_key as next_key
from tests.commands import tasks_added
from tests.testapp import tasks

UTC = datetime.timezone.utc


def ms(when: datetime.datetime) -> int:
    return round(when.timestamp() * 1000)


def schedule(**options: Any) -> Any:
    return build(
        options.pop("name", "s"),
        task_name="tests.testapp.tasks.record",
        queue="test",
        priority=0,
        backend=None,
        **options,
    )


def test_every_ticks_fall_on_multiples_of_the_interval() -> None:
    every = schedule(every=datetime.timedelta(seconds=5))
    assert every.next_after(12_345) == 15_000
    assert every.next_after(15_000) == 20_000


def test_cron_ticks_follow_the_time_zone_across_daylight_saving_time() -> None:
    paris = schedule(cron="30 2 * * *", tz="Europe/Paris")
    # 2026-03-29: clocks jump from 02:00 to 03:00 in Paris, so 02:30 does not exist.
    before = datetime.datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    first = datetime.datetime.fromtimestamp(
        paris.next_after(ms(before)) / 1000, ZoneInfo("Europe/Paris")
    )
    assert (first.month, first.day, first.hour, first.minute) == (3, 29, 3, 0)
    second = datetime.datetime.fromtimestamp(
        paris.next_after(ms(first)) / 1000, ZoneInfo("Europe/Paris")
    )
    assert (second.day, second.hour, second.minute) == (30, 2, 30)
    utc = schedule(cron="30 2 * * *")
    assert utc.next_after(ms(before)) == ms(datetime.datetime(2026, 3, 29, 2, 30, tzinfo=UTC))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "cron"),
        ({"cron": "* * * * *", "every": 5}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": 5}, "cron"),
        ({"every": 0.5}, "every"),
        ({"every": -1}, "every"),
        ({"every": 60, "tz": "Mars/Olympus"}, "tz"),
        ({"every": 60, "missed": "all"}, "missed"),
        ({"every": 60, "args": "x"}, "args"),
        ({"every": 60, "args": [math.nan]}, "args"),
        ({"every": 60, "args": [{1, 2}]}, "args"),
        ({"every": 60, "args": [b"bytes"]}, "args"),
        ({"every": 60, "kwargs": {"when": b"bytes"}}, "kwargs"),
        ({"every": 60, "kwargs": {1: "not a name"}}, "kwargs"),
        ({"every": 60, "name": ""}, "name"),
    ],
)
def test_bad_schedules_are_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        schedule(**options)
    assert caught.value.field == field


def test_periodic_decorates_tasks_only() -> None:
    with pytest.raises(InvalidInput, match="above @redis_task"):
        periodic(every=60)(lambda: None)  # type: ignore[type-var]


def test_a_schedule_whose_task_cannot_take_its_arguments_is_refused_when_defined() -> None:
    with pytest.raises(InvalidTaskArguments, match=r"tasks\.add.*too many") as caught:
        periodic(every=60, name="tests.wrong", args=[1, 2, 3])(tasks.add)
    assert caught.value.field == "args"
    assert "tests.wrong" not in {found.name for found in schedules()}
    spec = {
        "task": "tests.testapp.tasks.record",
        "every": 60,
        "args": ["x"],
        "kwargs": {"colour": 1},
    }
    with (
        override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": {"wrong": spec}}),
        pytest.raises(ConfigurationError, match=r"TASK_SCHEDULES\['wrong'\].*colour"),
    ):
        schedules()


def test_the_setting_schedules_tasks_declared_elsewhere() -> None:
    spec = {"task": "tests.testapp.tasks.record", "every": 60, "args": ["tick"]}
    with override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": {"minutely": spec}}):
        [found] = [s for s in schedules() if s.name == "minutely"]
    assert (found.task, found.queue, found.every_ms, found.args) == (
        "tests.testapp.tasks.record",
        "test",
        60_000,
        ["tick"],
    )
    for bad in ({"every": 60}, {"task": "no.such.task", "every": 60}, {"task": "x", "cron": 1}):
        with (
            override_settings(REDIS_COMPONENTS={"TASK_SCHEDULES": {"bad": bad}}),
            pytest.raises(ConfigurationError, match="TASK_SCHEDULES"),
        ):
            schedules()


def queued() -> list[TaskMessage]:
    total, waiting = waiting_tasks("test", "ready", count=1000)
    assert len(waiting) == total
    found = []
    for entry in waiting:
        assert entry.message is not None, entry.shown
        found.append(entry.message)
    return found


def test_a_new_schedule_waits_for_its_first_tick_then_runs_each_tick_once(
    r: redis.Redis,
) -> None:
    every = schedule(every=2)
    scheduler = Scheduler([every])
    wait = scheduler.run_due()
    assert 0 < wait <= 2
    assert queued() == []
    tick = int(r.hget(next_key(), "s") or 0)
    r.hset(next_key(), "s", tick - 2000)  # as if its tick had come
    scheduler.run_due()
    [message] = queued()
    assert (message.task, message.args, message.scheduled_for) == (
        "tests.testapp.tasks.record",
        [],
        tick - 2000,
    )
    assert int(r.hget(next_key(), "s") or 0) == tick
    scheduler.run_due()  # the next tick is not due yet
    assert len(queued()) == 1


@pytest.mark.parametrize(("missed", "runs"), [("run_once", 1), ("skip", 0)])
def test_missed_ticks_run_once_or_are_skipped(r: redis.Redis, missed: str, runs: int) -> None:
    every = schedule(every=1, missed=missed)
    seconds, _ = r.time()
    r.hset(next_key(), "s", (int(seconds) - 3600) * 1000)  # no scheduler ran for an hour
    Scheduler([every]).run_due()
    assert len(queued()) == runs
    assert int(r.hget(next_key(), "s") or 0) > int(seconds) * 1000


def test_racing_schedulers_enqueue_each_tick_once(r: redis.Redis) -> None:
    # Hourly, so that no tick of the real clock falls due while the test runs: each
    # claimed tick moves the next run an hour on, and only the ticks set here are due.
    every = schedule(every=3600)
    seconds, _ = r.time()
    ticks = []
    for n in range(30):
        tick = (int(seconds) - 100 + n) * 1000
        ticks.append(tick)
    schedulers = [Scheduler([every]) for _ in range(8)]
    for tick in ticks:
        r.hset(next_key(), "s", tick)
        barrier = threading.Barrier(len(schedulers))

        def claim(scheduler: Scheduler, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            scheduler.run_due()

        threads = [threading.Thread(target=claim, args=(s,)) for s in schedulers]
        with override_settings(REDIS_COMPONENTS={**settings.REDIS_COMPONENTS, "METRICS": True}):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    assert sorted(m.scheduled_for or 0 for m in queued()) == ticks
    # Counted in the metrics' tasks added by the claim that enqueued it: once each.
    assert tasks_added("test") == 30


def test_states_show_the_next_and_last_run_with_its_result(r: redis.Redis) -> None:
    with schedule_registry.isolated():
        declared = periodic(every=3600, name="tests.hourly", args=[1, 2])(tasks.add)
        assert declared is tasks.add
        Scheduler(schedules()).run_due()
        [state] = [s for s in schedule_states() if s.schedule.name == "tests.hourly"]
        assert state.next_run is not None
        assert (state.last_run, state.last_result) == (None, None)
        tick = ms(state.next_run)
        r.hset(next_key(), "tests.hourly", tick - 3_600_000)
        Scheduler(schedules()).run_due()
        [state] = [s for s in schedule_states() if s.schedule.name == "tests.hourly"]
    assert state.last_run == datetime.datetime.fromtimestamp((tick - 3_600_000) / 1000, UTC)
    assert state.last_result is not None
    assert state.last_result.status == TaskResultStatus.READY  # a record: our TaskStatus
    assert get_result(state.last_result.id).task == tasks.add
    assert r.hlen(last_key()) == 1


def test_a_claimed_tick_waits_for_the_replicas(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A tick's task is as durable as an enqueue: the claim WAITs for QUEUE_WAIT_REPLICAS
    (none acknowledges here, which the log says) and the task is queued all the same."""
    scheduler = Scheduler([schedule(every=3600)])
    scheduler.run_due()
    tick = int(r.hget(next_key(), "s") or 0)
    r.hset(next_key(), "s", tick - 3_600_000)  # as if its tick had come
    with override_settings(REDIS_COMPONENTS={"QUEUE_WAIT_REPLICAS": 1, "QUEUE_WAIT_TIMEOUT": 0.05}):
        scheduler.run_due()
    assert len(queued()) == 1
    assert "Schedules' ticks were enqueued, but 0 of 1 replicas" in caplog.text
