"""Celery's no-op task (autodiscovered by benchmarks.memory_apps.celery_app)."""

from __future__ import annotations

from celery import shared_task

from . import work

noop = shared_task(name="memory.noop")(work.noop)
