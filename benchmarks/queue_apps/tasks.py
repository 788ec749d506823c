"""The benchmark's tasks for redis_components (autodiscovered by rc_worker)."""

from __future__ import annotations

from redis_components import task

from . import work

noop = task(name="bench.noop", queue=work.QUEUE)(work.noop)
mark = task(name="bench.mark", queue=work.QUEUE)(work.mark)
started = task(name="bench.started", queue=work.QUEUE)(work.started)
record = task(name="bench.record", queue=work.QUEUE)(work.record)
late = task(name="bench.late", queue=work.QUEUE)(work.late)
scheduled = task(name="bench.scheduled", queue="bench-scheduled")(work.noop)
