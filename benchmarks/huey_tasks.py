"""The benchmark's tasks for Huey (huey_consumer benchmarks.huey_tasks.huey)."""

from __future__ import annotations

import os

from huey import RedisHuey

from . import common

huey = RedisHuey(common.QUEUE, url=os.environ["BENCH_REDIS_URL"])

noop = huey.task()(common.noop)
mark = huey.task()(common.mark)
started = huey.task()(common.started)
record = huey.task()(common.record)
