"""The workflow benchmark's steps for Celery: a chord on Redis (broker and results).

Its documented settings for workers that die: late acknowledgement, and a task whose
worker process was lost is requeued. A redelivery sends the step again with the same
request (its id, group and chord), as Celery's own retry does.
"""

from __future__ import annotations

import os

from celery import Celery

from . import work

app = Celery("wf", broker=os.environ["BENCH_REDIS_URL"], backend=os.environ["BENCH_REDIS_URL"])
app.conf.task_default_queue = work.QUEUE
app.conf.task_acks_late = True
app.conf.task_reject_on_worker_lost = True
app.conf.worker_prefetch_multiplier = 1
app.conf.broker_connection_retry_on_startup = True


@app.task(name="wf.start", bind=True)
def start(self: object) -> None:
    return None


@app.task(name="wf.member", bind=True)
def member(self: object, number: int) -> int:
    if work.member(number):
        task: object = self
        task.signature_from_request(task.request).apply_async()  # type: ignore[attr-defined]
    return number


@app.task(name="wf.reduce")
def reduce(results: list[int]) -> None:
    work.reduce(results)
