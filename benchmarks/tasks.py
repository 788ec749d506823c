"""The benchmark's tasks for redis_components (autodiscovered by rc_worker)."""

from __future__ import annotations

from redis_components import task

from . import common

noop = task(name="bench.noop", queue=common.QUEUE)(common.noop)
mark = task(name="bench.mark", queue=common.QUEUE)(common.mark)
started = task(name="bench.started", queue=common.QUEUE)(common.started)
record = task(name="bench.record", queue=common.QUEUE)(common.record)
