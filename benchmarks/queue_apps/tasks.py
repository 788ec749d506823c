"""The benchmark's tasks for redis_components (autodiscovered by rc_worker)."""

from __future__ import annotations

from redis_components import redis_task

from . import work

noop = redis_task(name="bench.noop", queue=work.QUEUE)(work.noop)
mark = redis_task(name="bench.mark", queue=work.QUEUE)(work.mark)
started = redis_task(name="bench.started", queue=work.QUEUE)(work.started)
record = redis_task(name="bench.record", queue=work.QUEUE)(work.record)
late = redis_task(name="bench.late", queue=work.QUEUE)(work.late)
scheduled = redis_task(name="bench.scheduled", queue="bench-scheduled")(work.noop)
