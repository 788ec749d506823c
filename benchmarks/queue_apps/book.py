"""The book's queue (Redis in Action 6.4.1): RPUSH a JSON task, a BLPOP loop runs it.

python -m benchmarks.queue_apps.book   runs worker_watch_queue on BENCH_REDIS_URL until killed.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from . import work

CALLBACKS = {
    "noop": work.noop,
    "mark": work.mark,
    "started": work.started,
    "record": work.record,
}


def send(conn: redis.Redis, name: str, *args: Any) -> None:
    conn.rpush("queue:" + work.QUEUE, json.dumps([name, list(args)]))


def worker_watch_queue(conn: redis.Redis, queue: str, callbacks: dict[str, Any]) -> None:
    while True:
        packed = conn.blpop([queue], 30)
        if not packed:
            continue
        name, args = json.loads(packed[1])
        if name not in callbacks:
            print(f"Unknown callback {name}")
            continue
        try:
            callbacks[name](*args)
        except Exception as error:  # the book logs and goes on
            print(f"Task {name} failed: {error}")


if __name__ == "__main__":
    worker_watch_queue(work.client(), "queue:" + work.QUEUE, CALLBACKS)
