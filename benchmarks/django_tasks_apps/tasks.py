"""The benchmark's tasks, declared with Django's ``@task`` for every backend.

They do what benchmarks/queue_apps/work.py does for benchmarks/queues.py, so the
two benchmarks measure the same work; the bodies only call it, because Django finds
a task by its module path (``benchmarks.django_tasks_apps.tasks.noop``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import django

from benchmarks.queue_apps import work

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import task
else:
    from django_tasks import task


@task
def noop() -> None:
    """The task whose throughput is measured."""


@task
def mark(name: str) -> None:
    """Record when the worker reached this task (the first and last of a throughput run)."""
    work.mark(name)


@task
def started(sent_at: float) -> None:
    """Record enqueue-to-start latency."""
    work.started(sent_at)


@task
def record(label: str) -> None:
    """Count a start, work 1 ms, count a finish (the kill runs)."""
    work.record(label)


@task
def slow(label: str) -> None:
    """Count a start, work 2 s, count a finish: the task a kill interrupts for sure."""
    client = work.client()
    client.hincrby("bench:started", label, 1)
    client.rpush("bench:slow", repr(time.time()))
    time.sleep(2)
    client.hincrby("bench:finished", label, 1)
