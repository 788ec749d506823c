"""The book's queues (Redis in Action 6.4): RPUSH + a BLPOP loop, and execute_later with
a polling mover (poll_queue) that takes a lock per moved task.

python -m benchmarks.queue_apps.book   runs worker_watch_queue, and poll_queue in a
thread, on BENCH_REDIS_URL until killed.

Fixed only to run here: redis-py 3+ ``zadd`` takes a mapping, and worker_watch_queue
reads the last two fields of an item, because the listing's delayed items carry four
([identifier, queue, name, args]) where its queue items carry two ([name, args]).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from typing import Any

import redis

from benchmarks.book_lock import acquire_lock, release_lock

from . import work

CALLBACKS = {
    "noop": work.noop,
    "mark": work.mark,
    "started": work.started,
    "record": work.record,
    "late": work.late,
}


def send(conn: redis.Redis, name: str, *args: Any) -> None:
    conn.rpush("queue:" + work.QUEUE, json.dumps([name, list(args)]))


def execute_later(
    conn: redis.Redis, queue: str, name: str, args: list[Any], delay: float = 0
) -> str:
    identifier = str(uuid.uuid4())
    item = json.dumps([identifier, queue, name, args])
    if delay > 0:
        conn.zadd("delayed:", {item: time.time() + delay})
    else:
        conn.rpush("queue:" + queue, item)
    return identifier


def poll_queue(conn: redis.Redis) -> None:
    while True:
        item = conn.zrange("delayed:", 0, 0, withscores=True)
        if not item or item[0][1] > time.time():
            time.sleep(0.01)
            continue
        raw = item[0][0]
        identifier, queue, _function, _args = json.loads(raw)
        locked = acquire_lock(conn, identifier)
        if not locked:
            continue
        if conn.zrem("delayed:", raw):
            conn.rpush("queue:" + queue, raw)
        release_lock(conn, identifier, locked)


def worker_watch_queue(conn: redis.Redis, queue: str, callbacks: dict[str, Any]) -> None:
    while True:
        packed = conn.blpop([queue], 30)
        if not packed:
            continue
        name, args = json.loads(packed[1])[-2:]
        if name not in callbacks:
            print(f"Unknown callback {name}")
            continue
        try:
            callbacks[name](*args)
        except Exception as error:  # the book logs and goes on
            print(f"Task {name} failed: {error}")


if __name__ == "__main__":
    poller = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    threading.Thread(target=poll_queue, args=(poller,), daemon=True).start()
    worker_watch_queue(work.client(), "queue:" + work.QUEUE, CALLBACKS)
