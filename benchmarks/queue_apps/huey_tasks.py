"""The benchmark's tasks for Huey (huey_consumer benchmarks.queue_apps.huey_tasks.huey)."""

from __future__ import annotations

import os

from huey import RedisHuey

from . import work

huey = RedisHuey(work.QUEUE, url=os.environ["BENCH_REDIS_URL"])

noop = huey.task()(work.noop)
mark = huey.task()(work.mark)
started = huey.task()(work.started)
record = huey.task()(work.record)
late = huey.task()(work.late)
