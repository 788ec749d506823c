"""``manage.py rc_worker``: run task workers (see ``redis_components.tasks.worker``)."""

from __future__ import annotations

import logging
from argparse import ArgumentTypeError, RawDescriptionHelpFormatter
from typing import Any

import redis
from django.core.management.base import CommandError, CommandParser
from redis.exceptions import RedisClusterException

from ...conf import conf
from ...connection import get_client, is_cluster
from ...exceptions import InvalidInput
from ...tasks.backend import declared_tasks, django_backends, queues_in_use
from ...tasks.definition import registered_tasks
from ...tasks.limits import from_settings, split_by_queue, unmatched_settings
from ...tasks.messages import DEFAULT_QUEUE
from ...tasks.slots import MAX_THREADS
from ...tasks.store import placement, server_warnings
from ...tasks.supervisor import Supervisor
from ..base import RedisCommand, unreachable
from ._console import configure_logging

logger = logging.getLogger("redis_components.worker")

# Django's Tasks framework logs a line of its own as each task starts and ends, under
# this logger ("django_tasks" on the backport); the workers log each run themselves.
DJANGO_TASK_LOGGERS = ("django.tasks", "django_tasks")

HELP = f"""Run task workers: processes that take tasks from Redis queues and run them.

Queues are served in the order given: a ready task in an earlier queue always runs
before one in a later queue; within a queue, higher priorities first, then the oldest.
Tasks of our @redis_task and of Django's Tasks framework (RedisTaskBackend) run alike.
Delivery is at least once: a task is held in the worker's in-progress set in Redis
while it runs, and if the worker dies (kill -9, a crash, a lost machine) its tasks go
back on their queue within about twice TASK_HEARTBEAT_INTERVAL.
So a task may run twice after a crash, never zero times.

--threads N: each process runs up to N sync tasks at once, in threads (N at most
{MAX_THREADS}), and up to M async def tasks on an event loop (--async-tasks M, by default N);
it takes a task only when it has room for it (priorities hold across processes). Time
limits are per task: past its time_limit a task is settled and its thread left behind,
a new thread takes the slot; a process with 3 such threads still running is replaced.
A process that the system refuses a thread (ulimit -u, a container's pids limit) is
not replaced: rc_worker says so, stops the others and exits 1.

Redis may start after rc_worker (a single server, or a Redis Cluster whose nodes are
not up or do not serve every slot yet): the workers say so in one line and keep trying,
backing off up to 5 s, and serve once it answers.

Ctrl-C or SIGTERM: each worker finishes its running tasks, then exits; a task still
running TASK_SHUTDOWN_GRACE seconds later (25 by default) goes back on its queue, and
the worker exits all the same. A second Ctrl-C or SIGTERM: stop at once (the running
tasks go back on their queue). Either way nothing is lost, and rc_worker exits 0.
"""


# The options that name the Supervisor's arguments, in its errors.
OPTIONS = {
    "threads": "--threads",
    "async_tasks": "--async-tasks",
    "concurrency": "--concurrency",
    "max_tasks": "--max-tasks",
    "supervise": "--no-supervisor",
}


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise ArgumentTypeError(f"must be at least 1, not {number}")
    return number


class Command(RedisCommand):
    help = HELP
    ping_first = False  # the workers wait for Redis: it may start after them

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = RawDescriptionHelpFormatter  # keep the paragraphs above
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "queues",
            nargs="*",
            metavar="QUEUE",
            help="Queues to serve, highest priority first. Default: every queue that a "
            "registered task or a RedisTaskBackend in settings.TASKS uses, in alphabetical "
            "order.",
        )
        parser.add_argument(
            "-c",
            "--concurrency",
            type=positive,
            default=1,
            help="Number of worker processes (default 1).",
        )
        parser.add_argument(
            "--threads",
            type=positive,
            default=1,
            metavar="N",
            help="Tasks each worker process runs at once, each in its own thread (default "
            f"1: one at a time; at most {MAX_THREADS}). Raise it for tasks that wait "
            "(e-mail, HTTP, the database): each slot costs a thread and, once used, a "
            "database connection, not a process. Keep it at 1 for CPU-bound tasks and add "
            "processes (-c) instead.",
        )
        parser.add_argument(
            "--async-tasks",
            type=positive,
            metavar="M",
            help="async def tasks each worker process runs at once, on one event loop "
            "(default: as many as --threads). They never take a thread, and a sync task "
            "never blocks the loop; a process takes a task while both kinds have room.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit when no task is ready (delayed tasks not yet due are left).",
        )
        parser.add_argument(
            "--max-tasks",
            type=positive,
            metavar="N",
            help="Each worker process exits after running N tasks.",
        )
        parser.add_argument(
            "--no-supervisor",
            action="store_true",
            help="Run the one worker (-c 1) in this process, with no supervisor process "
            "beside it: about half the memory, for a container whose orchestrator restarts "
            "it. The stop signals act as without it. What it gives up: a crashed worker's "
            "tasks come back when its lease runs out (about twice "
            "TASK_HEARTBEAT_INTERVAL), not at once, and nothing replaces a worker whose "
            "task holds the GIL past its time limit (a long call into C).",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not move due delayed tasks (enqueue_in, run_after, retries after their "
            "backoff) to their queues and do not enqueue the ticks of periodic schedules "
            "(@periodic): at least one other worker must do both.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        for name in DJANGO_TASK_LOGGERS:
            django_logger = logging.getLogger(name)
            if not django_logger.handlers:  # unless the project logs it on purpose
                django_logger.disabled = True  # (its records are not even made)
        tasks = registered_tasks()
        queues = options["queues"] or sorted(queues_in_use() or {DEFAULT_QUEUE})
        try:
            limits = from_settings(conf.TASK_LIMITS)
            supervisor = Supervisor(
                queues,
                concurrency=options["concurrency"],
                scheduler=not options["no_scheduler"],
                burst=options["burst"],
                max_tasks=options["max_tasks"],
                threads=options["threads"],
                async_tasks=options["async_tasks"],
                supervise=not options["no_supervisor"],
            )
        except InvalidInput as error:
            option = OPTIONS.get(error.field, error.field)
            raise CommandError(f"{option}: {error.problem}") from None
        logger.info(
            "rc_worker: %s of %d thread%s serving %s (in this priority order); "
            "heartbeat every %.3g s; delayed tasks and schedules %s",
            "1 process, with no supervisor,"
            if not supervisor.supervise
            else f"{supervisor.concurrency} process{'' if supervisor.concurrency == 1 else 'es'}",
            options["threads"],
            "" if options["threads"] == 1 else "s",
            ", ".join(placement(queue) for queue in supervisor.queues),
            conf.TASK_HEARTBEAT_INTERVAL,
            "handled by these workers"
            if not options["no_scheduler"]
            else "left to other workers (--no-scheduler)",
        )
        known = queues_in_use()
        for queue in supervisor.queues:
            if queue not in known:  # a typo, or a queue that another service feeds
                logger.warning(
                    "Queue %r is used by no registered task and no RedisTaskBackend in "
                    "settings.TASKS (theirs: %s): a typo? It is served all the same.",
                    queue,
                    ", ".join(sorted(known)) or "none",
                )
        known |= {declared.queue_name for declared in declared_tasks().values()}
        for queue in sorted(set(conf.QUEUE_PARTITIONS) - known):
            logger.warning(
                "QUEUE_PARTITIONS[%r] names a queue that no known task and no "
                "RedisTaskBackend in settings.TASKS uses: a typo? It changes nothing here.",
                queue,
            )
        logger.info("Our @redis_tasks: %s", ", ".join(sorted(tasks)) or "none registered")
        if limits:
            logger.info(
                "Limits from settings (TASK_LIMITS), replacing the tasks' own: %s",
                "; ".join(f"{key}: {limit}" for key, limit in limits.items()),
            )
            for line in unmatched_settings(limits, declared_tasks()):
                logger.warning("%s: it changes nothing.", line)
        for alias, backend_queues in django_backends().items():
            logger.info(
                "Django's tasks of TASKS[%r] (RedisTaskBackend, queues: %s): found by module "
                "path when they arrive",
                alias,
                ", ".join(map(str, backend_queues)) or "any",
            )
        try:
            client = get_client()
            for warning in server_warnings(client):
                logger.warning(warning)
            for line in split_by_queue(declared_tasks()) if is_cluster(client) else ():
                logger.warning(line)
        except (redis.exceptions.RedisError, RedisClusterException) as error:
            logger.warning("%s; the workers will keep trying", unreachable(error))
        if supervisor.run():
            raise CommandError(
                "A worker process could not start its threads (see above): rc_worker stopped"
            )
