"""``manage.py rc_queues``: look at the task queues, requeue dead letters, purge a queue."""

from __future__ import annotations

import datetime
import difflib
import time
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...exceptions import InvalidInput, TaskNotCancellable, WorkflowDoesNotExist
from ...tasks.messages import validate_queue
from ...tasks.schedules import schedule_states
from ...tasks.status import (
    home_stats,
    limits_in_use,
    oldest_ready,
    queue_names,
    queue_stats,
    running_tasks,
    waiting_tasks,
    workers,
)
from ...tasks.store import Progress, TaskStore, cancel
from ...tasks.workflows import Summary, get_workflow, workflows
from ..base import RedisCommand

# The most tasks --on-limits lists (the admin's On limits tab pages through them all).
ON_LIMITS_SHOWN = 100
# The most running tasks the table lists (the admin's overview shows them all).
RUNNING_SHOWN = 100


def _time(when: datetime.datetime | None) -> str:
    return when.isoformat(timespec="seconds") if when else "-"


def _age(seconds: float | None) -> str:
    """A wait in a cell, one word: "4.2s", "3m07s", "5h02m", "2d04h"; "-" for none."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _progress(said: Progress | None) -> str:
    """A task's progress in a cell: "3 of 10 (30%) · its note", "-" for none."""
    if said is None:
        return "-"
    shown = f"{said.done:g}" if said.total is None else f"{said.done:g} of {said.total:g}"
    if said.fraction is not None:
        shown += f" ({said.fraction:.0%})"
    return f"{shown} · {said.note}" if said.note else shown


class Command(RedisCommand):
    help = (
        "Show each task queue's ready, delayed, in-progress and dead task counts and how "
        "long its oldest ready task has waited, the registered workers, the concurrency "
        "limits in use and the running workflows; or the schedules, the workflows, or the "
        "tasks waiting on limits; or requeue dead letters, purge a queue, cancel a task or "
        "a workflow. With -v 2, also where each queue's tasks are: partition by partition, "
        "on which node, next to its share of the queue's bound."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--requeue-dead",
            nargs="?",
            const="",
            metavar="QUEUE",
            help="Put the dead letters of QUEUE (default: of every queue) back on their "
            "queue, with fresh retries.",
        )
        action.add_argument(
            "--purge",
            metavar="QUEUE",
            help="Delete the ready, delayed and dead tasks of QUEUE, and those waiting on a "
            "concurrency limit (tasks in progress finish).",
        )
        action.add_argument(
            "--on-limits",
            metavar="QUEUE",
            help="List the tasks of QUEUE that wait for a concurrency limit's permit (the "
            "first 100), with the key each waits on: their ids are what --cancel takes.",
        )
        action.add_argument(
            "--schedules",
            action="store_true",
            help="List the schedules: when each runs next, when it ran last and how that ended.",
        )
        action.add_argument(
            "--cancel",
            metavar="TASK_ID",
            help="Cancel a task that has not started (it leaves its queue; its result says "
            "CANCELLED). A running task is refused unless --terminate is given.",
        )
        action.add_argument(
            "--workflows",
            action="store_true",
            help="List the running workflows and the finished ones still kept, with how "
            "many steps are in each state.",
        )
        action.add_argument(
            "--cancel-workflow",
            metavar="WORKFLOW_ID",
            help="Cancel a workflow: no further step starts; waiting and queued steps are "
            "dropped, running ones are asked to stop.",
        )
        parser.add_argument(
            "--terminate",
            action="store_true",
            help="With --cancel: stop the task even if it is running (its worker process is "
            "replaced).",
        )
        parser.add_argument(
            "--yes", action="store_true", help="Purge without asking for confirmation."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["terminate"] and options["cancel"] is None:
            raise CommandError("--terminate goes with --cancel TASK_ID")
        try:
            if options["requeue_dead"] is not None:
                self.requeue(options["requeue_dead"])
            elif options["purge"] is not None:
                self.purge(options["purge"], options["yes"])
            elif options["on_limits"] is not None:
                self.show_on_limits(options["on_limits"])
            elif options["schedules"]:
                self.show_schedules()
            elif options["workflows"]:
                self.show_workflows()
            elif options["cancel_workflow"] is not None:
                dropped, running = get_workflow(options["cancel_workflow"]).cancel()
                self.stdout.write(
                    f"{options['cancel_workflow']}: cancelled ({dropped} steps dropped, "
                    f"{running} running asked to stop)"
                )
            elif options["cancel"] is not None:
                done = cancel(options["cancel"], terminate=options["terminate"])
                self.stdout.write(
                    f"{options['cancel']}: "
                    + ("cancelled" if done == "cancelled" else "its worker will stop it")
                )
            else:
                self.show(where=options["verbosity"] >= 2)
        except (InvalidInput, TaskNotCancellable, WorkflowDoesNotExist) as error:
            raise CommandError(str(error)) from None

    def show(self, where: bool = False) -> None:
        rows: list[tuple[str, ...]] = [
            (
                "queue",
                "ready",
                "oldest ready",
                "delayed",
                "on limits",
                "in progress",
                "dead",
                "limit",
            )
        ]
        found = queue_stats()
        ages = oldest_ready([stats.name for stats in found])
        for stats in found:
            rows.append(
                (
                    stats.name,
                    str(stats.ready),
                    _age(ages[stats.name]),
                    str(stats.delayed),
                    str(stats.on_limits),
                    str(stats.in_progress),
                    str(stats.dead),
                    str(stats.limit) if stats.limit else "-",
                )
            )
        if len(rows) == 1:
            self.stdout.write("No queues yet.")
        else:
            self.write_table(rows)
        if where and found:
            self.show_homes([stats.name for stats in found])
        registered = workers()
        self.stdout.write(f"\nWorkers: {len(registered)}")
        if registered:
            table: list[tuple[str, ...]] = [("id", "pid", "threads", "queues", "up", "lease")]
            for worker in registered:
                lease = (
                    f"{worker.lease_left:.1f} s left"
                    if worker.lease_left >= 0
                    else "expired (being recovered)"
                )
                up = f"{time.time() - worker.started_at:.0f} s" if worker.started_at else "?"
                pid = "?" if worker.pid is None else str(worker.pid)
                queues = ", ".join(worker.queues) or "?"
                if worker.problem:
                    queues += f" ({worker.problem})"
                table.append((worker.id, pid, str(worker.threads), queues, up, lease))
            self.write_table(table)
        self.show_running()
        total, uses = limits_in_use()
        if total:  # most projects have none: no line for them
            shown = f" (the first {len(uses)})" if len(uses) < total else ""
            self.stdout.write(f"\nConcurrency limits in use: {total}{shown}")
            table = [("key", "limit", "holding", "waiting")]
            table += [(u.key, str(u.limit), str(u.held), str(u.waiting)) for u in uses]
            self.write_table(table)
        running, _ = workflows()
        if running:  # most projects have none: no line for them
            self.stdout.write(f"\nRunning workflows: {len(running)}")
            self.write_workflows(running)

    def show_running(self) -> None:
        running = running_tasks()
        if not running:  # (most of the time, for most projects: no line)
            return
        shown = f" (the first {RUNNING_SHOWN})" if len(running) > RUNNING_SHOWN else ""
        self.stdout.write(f"\nRunning tasks: {len(running)}{shown}")
        rows: list[tuple[str, ...]] = [("id", "task", "worker", "since", "progress")]
        rows += [
            (
                run.task_id,
                run.task or "?",
                run.worker_id,
                _time(run.started_at),
                _progress(run.progress),
            )
            for run in running[:RUNNING_SHOWN]
        ]
        self.write_table(rows)

    def show_homes(self, queues: list[str]) -> None:
        """Where each queue's tasks are (-v 2): partition by partition, with the node
        each is on, and what counts towards its share of the queue's bound."""
        self.stdout.write("\nWhere the tasks are (waiting: ready, delayed and on limits)")
        rows: list[tuple[str, ...]] = [
            ("queue", "partition", "node", "waiting", "bound", "in progress", "dead")
        ]
        for queue in queues:
            for home in home_stats(queue):
                rows.append(
                    (
                        queue,
                        f"{home.partition} of {home.of}",
                        home.node,
                        str(home.counts.waiting),
                        str(home.bound) if home.bound else "-",
                        str(home.counts.in_progress),
                        str(home.counts.dead),
                    )
                )
        self.write_table(rows)

    def show_on_limits(self, queue: str) -> None:
        total, waiting = waiting_tasks(queue, "on_limits", 0, ON_LIMITS_SHOWN)
        self.unknown(queue)
        if not total:
            self.stdout.write(f"No task of queue {queue!r} waits on a concurrency limit.")
            return
        shown = f" (the first {len(waiting)})" if len(waiting) < total else ""
        self.stdout.write(f"{queue}: {total} tasks wait on concurrency limits{shown}")
        rows: list[tuple[str, ...]] = [("id", "task", "waits on")]
        rows += [(t.task_id or "(unreadable)", t.task, t.waits_on) for t in waiting]
        self.write_table(rows)

    def show_workflows(self) -> None:
        running, finished = workflows()
        if not running and not finished:
            self.stdout.write("No workflows are kept.")
            return
        self.write_workflows([*running, *finished])

    def write_workflows(self, summaries: list[Summary]) -> None:
        rows: list[tuple[str, ...]] = [("workflow", "status", "steps", "states", "created")]
        for summary in summaries:
            states = ", ".join(f"{n} {state.lower()}" for state, n in summary.counts.items())
            status = summary.status
            if not summary.finished and status != "RUNNING":
                status += " (steps still running)"
            if summary.failed_step:
                status += f", step {summary.failed_step} failed"
            rows.append((summary.id, status, str(summary.steps), states, _time(summary.created_at)))
        self.write_table(rows)

    def show_schedules(self) -> None:
        states = schedule_states()
        if not states:
            self.stdout.write("No schedules.")
            return
        rows: list[tuple[str, ...]] = [("schedule", "task", "when", "next", "last", "result")]
        for state in states:
            result = state.last_result
            rows.append(
                (
                    state.schedule.name,
                    state.schedule.task,
                    state.schedule.describe(),
                    _time(state.next_run),
                    _time(state.last_run),
                    str(result.status) if result else "-",
                )
            )
        self.write_table(rows)

    def write_table(self, rows: Sequence[Sequence[str]]) -> None:
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            cells = [
                cell.ljust(width) if i == 0 or not cell[:1].isdigit() else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ]
            self.stdout.write("  ".join(cells).rstrip())

    def unknown(self, queue: str) -> None:
        """Say so when no task, backend, worker or setting uses ``queue`` (a typo?)."""
        known = queue_names()
        if queue not in known:
            close = difflib.get_close_matches(queue, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.stderr.write(
                f"Warning: no task, backend, worker or setting uses queue {queue!r}{hint}."
            )

    def requeue(self, queue: str) -> None:
        names = [validate_queue(queue)] if queue else queue_names()
        if queue:
            self.unknown(queue)
        for name in names:
            moved, left = TaskStore().requeue_dead(name)
            if moved or left or queue:
                kept = f"; left {left} that are not tasks this app can run" if left else ""
                self.stdout.write(f"{name}: requeued {moved} dead tasks{kept}")

    def purge(self, queue: str, yes: bool) -> None:
        [stats] = queue_stats([validate_queue(queue)])
        self.unknown(queue)
        waiting = stats.ready + stats.delayed + stats.on_limits + stats.dead
        if not yes:
            question = (
                f"Delete {stats.ready} ready, {stats.delayed} delayed, {stats.on_limits} on "
                f"limits and {stats.dead} dead tasks of queue {queue!r}? [y/N] "
            )
            try:
                answer = input(question)
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("Nothing was deleted.")
        deleted = TaskStore().purge(queue)
        self.stdout.write(f"{queue}: deleted {deleted} tasks (there were {waiting} a moment ago)")
