"""The benchmark's task for Huey (huey_consumer benchmarks.concurrency_apps.huey_tasks.huey)."""

from __future__ import annotations

import os

from huey import RedisHuey

from . import work

huey = RedisHuey(work.QUEUE, url=os.environ["BENCH_REDIS_URL"])

sleep = huey.task()(work.sleep)
