"""The book's simple lock (*Redis in Action* 6.2.3), as the seeds print it.

Changed only to run on redis-py 5+ with either kind of client: ``release_lock``
creates the pipeline it uses (the listing forgets to), and compares the stored
identifier whether the client returns it as ``bytes`` or ``str``. Nothing else is
changed: SETNX without a timeout, the 1 ms retry sleeps, the WATCH release.
"""

from __future__ import annotations

import time
import uuid

import redis


def acquire_lock(conn: redis.Redis, lockname: str, acquire_timeout: float = 10) -> str | None:
    identifier = str(uuid.uuid4())
    end = time.time() + acquire_timeout
    while time.time() < end:
        if conn.setnx("lock:" + lockname, identifier):
            return identifier
        time.sleep(0.001)
    return None


def release_lock(conn: redis.Redis, lockname: str, identifier: str) -> bool:
    pipe = conn.pipeline(True)
    lockname = "lock:" + lockname
    while True:
        try:
            pipe.watch(lockname)
            if pipe.get(lockname) in (identifier, identifier.encode()):
                pipe.multi()
                pipe.delete(lockname)
                pipe.execute()
                return True
            pipe.unwatch()
            break
        except redis.exceptions.WatchError:
            pass
    return False
