"""The benchmark's actors for Dramatiq (dramatiq benchmarks.queue_apps.dramatiq_tasks)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from . import work

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))

noop = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.noop)
mark = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.mark)
started = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.started)
record = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.record)
late = dramatiq.actor(queue_name=work.QUEUE, max_retries=0)(work.late)
