"""The benchmark's task for Celery (celery -A benchmarks.concurrency_apps.celery_tasks worker)."""

from __future__ import annotations

import os

from celery import Celery

from . import work

app = Celery("conc", broker=os.environ["BENCH_REDIS_URL"])
app.conf.task_default_queue = work.QUEUE
app.conf.broker_connection_retry_on_startup = True  # Celery 5's default, without its warning

sleep = app.task(name="conc.sleep", ignore_result=True)(work.sleep)
