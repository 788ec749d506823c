"""The benchmark's job for saq (saq benchmarks.concurrency_apps.saq_tasks.settings).

Only ``concurrency`` differs from saq's defaults; ``BENCH_CONCURRENCY`` sets it.
"""

from __future__ import annotations

import os
from typing import Any

from saq import Queue

from . import work


async def async_sleep(ctx: dict[str, Any], *, seconds: float) -> None:
    await work.async_sleep(seconds)


def queue() -> Queue:
    return Queue.from_url(os.environ["BENCH_REDIS_URL"], name=work.QUEUE)


settings = {
    "queue": queue(),
    "functions": [async_sleep],
    "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "10")),
}
