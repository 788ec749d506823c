"""The benchmark's tasks for redis_components (autodiscovered by rc_worker)."""

from __future__ import annotations

from redis_components import redis_task

from . import work

sleep = redis_task(name="conc.sleep", queue=work.QUEUE)(work.sleep)
async_sleep = redis_task(name="conc.async_sleep", queue=work.QUEUE)(work.async_sleep)
