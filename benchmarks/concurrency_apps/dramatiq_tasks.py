"""The benchmark's actor for Dramatiq (dramatiq benchmarks.concurrency_apps.dramatiq_tasks)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from . import work

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))

sleep = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.sleep)
