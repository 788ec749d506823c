"""Our no-op task (autodiscovered by redis_components' app, so by rc_worker)."""

from __future__ import annotations

from redis_components import redis_task

from . import work

noop = redis_task(name="memory.noop", queue=work.QUEUE)(work.noop)
