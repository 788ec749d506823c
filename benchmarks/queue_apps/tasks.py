"""The benchmark's tasks for redis_components (autodiscovered by rc_worker)."""

from __future__ import annotations

from redis_components import RedisTaskContext, concurrency_limit, rate_limit, redis_task

from . import work

noop = redis_task(name="bench.noop", queue=work.QUEUE)(work.noop)
# A no-op under a concurrency limit that never binds (benchmarks/limits.py).
limited = redis_task(
    name="bench.limited", queue=work.QUEUE, limits=[concurrency_limit(1000, key="bench")]
)(work.noop)
mark = redis_task(name="bench.mark", queue=work.QUEUE)(work.mark)
started = redis_task(name="bench.started", queue=work.QUEUE)(work.started)
record = redis_task(name="bench.record", queue=work.QUEUE)(work.record)
late = redis_task(name="bench.late", queue=work.QUEUE)(work.late)
scheduled = redis_task(name="bench.scheduled", queue="bench-scheduled")(work.noop)
# The API call under 3 at once and 20 a second (benchmarks/limit_peers.py).
limited_api = redis_task(
    name="bench.limited_api",
    queue=work.QUEUE,
    limits=[concurrency_limit(3, key="bench-api"), rate_limit(20, per=1.0, key="bench-api")],
)(work.limited_api)
# No-ops on three queues of their own (benchmarks/cluster_queues.py).
spread = {
    queue: redis_task(name=f"bench.noop.{queue}", queue=queue)(work.noop)
    for queue in work.SPREAD_QUEUES
}
# A fan-in's callback, after a group over the three (benchmarks/cluster_queues.py).
gather = redis_task(name="bench.gather", queue=work.SPREAD_QUEUES[0])(work.gather)


@redis_task(name="bench.reporting", queue=work.QUEUE, takes_context=True)
def reporting(context: RedisTaskContext) -> None:
    """A no-op that uses Django's proposed task APIs as a long task would: it sets its
    metadata once and reports its progress 10 times (benchmarks/task_apis.py)."""
    context.metadata["stage"] = "done"
    for done in range(1, 11):
        context.set_progress(done, 10)
