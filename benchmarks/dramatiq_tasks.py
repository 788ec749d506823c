"""The benchmark's actors for Dramatiq (dramatiq benchmarks.dramatiq_tasks)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from . import common

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))

noop = dramatiq.actor(queue_name=common.QUEUE, max_retries=0)(common.noop)
mark = dramatiq.actor(queue_name=common.QUEUE, max_retries=0)(common.mark)
started = dramatiq.actor(queue_name=common.QUEUE, max_retries=0)(common.started)
record = dramatiq.actor(queue_name=common.QUEUE, max_retries=0)(common.record)
