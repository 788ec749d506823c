"""The benchmark's tasks for Huey (huey_consumer benchmarks.queue_apps.huey_tasks.huey)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

from huey import RedisHuey
from huey.contrib.helpers import lock_task_semaphore
from huey.exceptions import RateLimitExceeded, TaskLockedException

from . import work

huey = RedisHuey(work.QUEUE, url=os.environ["BENCH_REDIS_URL"])

noop = huey.task()(work.noop)
mark = huey.task()(work.mark)
started = huey.task()(work.started)
record = huey.task()(work.record)
late = huey.task()(work.late)

# The API call under 3 at once and 20 a second (benchmarks/limit_peers.py), with Huey's
# own tools: huey.rate_limit (a fixed window; a refused task is scheduled for the next
# window's start, and that charges no retry) inside huey.contrib.helpers'
# lock_task_semaphore (a Redis semaphore; a refused task raises TaskLockedException,
# which is retried only while the task has retries left, each refusal spending one).
# retries: enough that none gives up (its default is 0: a refused task would fail);
# retry_delay is its default, 0 (requeued at once); the semaphore's timeout its default.
LIMITED_RETRIES = 1000


def counted(func: Callable[[int, float], None]) -> Callable[[int, float], None]:
    """Count each attempt, and each that a limiter refused."""

    @functools.wraps(func)
    def attempt(index: int, seconds: float) -> None:
        entered = work.limited_attempt(index)
        try:
            func(index, seconds)
        except TaskLockedException:
            work.limited_refused(entered, "concurrency")
            raise
        except RateLimitExceeded:
            work.limited_refused(entered, "rate")
            raise

    return attempt


@huey.task(retries=LIMITED_RETRIES)
@counted
@lock_task_semaphore(huey, "bench-api", 3)
@huey.rate_limit("bench-api", limit=20, per=1)
def limited_api(index: int, seconds: float) -> None:
    work.limited_work(index, seconds)
