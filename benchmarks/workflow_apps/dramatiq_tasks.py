"""The workflow benchmark's steps for Dramatiq: a group with a completion callback.

Dramatiq's callback gets no results (its users read them from the Results backend), so
the reduce is given none and the benchmark reports only when and how often it ran. A
redelivery enqueues the step's own message again (CurrentMessage).
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage, GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend

from . import work

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
broker.add_middleware(CurrentMessage())
broker.add_middleware(GroupCallbacks(RedisBackend(url=os.environ["BENCH_REDIS_URL"])))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=work.QUEUE, max_retries=0)
def member(number: int) -> None:
    if work.member(number):
        message = CurrentMessage.get_current_message()
        assert message is not None
        broker.enqueue(message)


@dramatiq.actor(queue_name=work.QUEUE, max_retries=0)
def reduce() -> None:
    work.reduce(None)
