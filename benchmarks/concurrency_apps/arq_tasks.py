"""The benchmark's job for arq (arq benchmarks.concurrency_apps.arq_tasks.WorkerSettings).

Only ``max_jobs`` differs from arq's defaults; ``BENCH_CONCURRENCY`` sets it.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings

from . import work


async def async_sleep(ctx: dict[str, Any], seconds: float) -> None:
    await work.async_sleep(seconds)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [async_sleep]
    redis_settings = RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://"))
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "10"))
