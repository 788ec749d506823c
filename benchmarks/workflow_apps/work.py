"""What every library's steps do in the workflow benchmark, and the faults they inject.

Worker processes find the Redis server in BENCH_REDIS_URL. A member waits ``MEMBER``
seconds, records its run (``RUNS``: member -> runs; ``FIRST``: member -> the end of its
first run; ``ENDS``: the end of every run; ``PIDS``: the process) and returns its
number. The reduce records each call (``REDUCED``: the time, how many members had ended
by then, and whether it was given the 1,000 results in order). A tenth of the members
(those whose number ends in 3) are delivered twice: on its first run, such a member
sends a copy of its own message, as a redelivery would (each library's step module
says how).
"""

from __future__ import annotations

import json
import os
import time
from functools import cache

import redis

QUEUE = "wf"
MEMBERS = 1_000
MEMBER = 0.05  # seconds each member waits
RUNS = "wf:runs"
FIRST = "wf:first"
PIDS = "wf:pids"
ENDS = "wf:ends"
REDUCED = "wf:reduced"
DONE = "wf:done"  # the independent tasks' ends, for the baseline


@cache
def client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])


def member(number: int) -> bool:
    """Run member ``number``; True when this run is to be delivered twice."""
    time.sleep(MEMBER)
    pipe = client().pipeline(transaction=False)
    pipe.hincrby(RUNS, str(number), 1)
    pipe.hsetnx(FIRST, str(number), repr(time.time()))
    pipe.rpush(PIDS, os.getpid())
    pipe.rpush(ENDS, repr(time.time()))
    runs = pipe.execute()[0]
    return number % 10 == 3 and runs == 1


def reduce(results: object) -> None:
    """Record a call of the reduce: when it started, how many members had ended, whether
    it was given the results in order."""
    ended = client().hlen(FIRST)
    ordered = results == list(range(MEMBERS))
    client().rpush(REDUCED, json.dumps([time.time(), ended, ordered]))


def independent(number: int) -> bool:
    """A task of the baseline: as a member, then its end recorded in DONE."""
    again = member(number)
    client().hsetnx(DONE, str(number), repr(time.time()))
    return again
