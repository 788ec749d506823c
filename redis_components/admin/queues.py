"""The task queues in Django's admin: what waits, runs and failed, and what to do about it.

``redis_components.admin`` registers :class:`TaskQueuesAdmin` for the table-less
:class:`~redis_components.models.TaskQueues` model, which gives the admin index its
"Task queues" entry and two permissions: ``view_task_queues`` to see the pages,
``manage_task_queues`` to act (requeue, delete, cancel, terminate, purge); the rule
that reads them is :func:`~redis_components.models.can_view_task_queues`. Every action
is a POST with Django's CSRF token, after a confirmation page that says what it will do,
and is logged (logger ``redis_components.tasks``) with the user's name.

The pages read Redis page by page (never a whole queue), show what they cannot decode
instead of failing, work without JavaScript, and refresh themselves when it is on.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import django
import redis
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode
from django.utils.translation import gettext, override, pgettext_lazy

from .. import tracing
from ..exceptions import (
    InvalidInput,
    TaskNotCancellable,
)
from ..models import can_manage_task_queues, can_view_task_queues, refusal
from ..tasks.messages import validate_queue
from ..tasks.schedules import schedule_states
from ..tasks.status import (
    Minute,
    WaitingTask,
    dead_letter_page,
    held_back,
    home_stats,
    limits_in_use,
    oldest_ready,
    queue_stats,
    read_dead_letter,
    running_tasks,
    throughput,
    waiting_tasks,
    workers,
)
from ..tasks.store import TaskStore
from ..tasks.workflows import workflows
from ..views import INT64_MAX, whole_number
from .actions import (
    ACTIONS,
    Target,
    confirmable,
    entry_digest,
    existing_dead_entry,
    result_or_404,
    target_or_404,
    workflow_or_404,
)

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise

log = logging.getLogger("redis_components.tasks")

PAGE_SIZE = 50
LAST_PAGE = INT64_MAX // PAGE_SIZE  # its entries' positions are still integers Redis takes
CHART_HOURS = 6
REFRESH_SECONDS = 10

# A queue's pages, by the state of the tasks they list.
STATES = {
    "ready": pgettext_lazy("tasks", "Ready"),
    "delayed": pgettext_lazy("tasks", "Delayed"),
    "on_limits": pgettext_lazy("tasks", "On limits"),
    "dead": pgettext_lazy("tasks", "Dead"),
}


# -- throughput chart ------------------------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT = 720, 120
SERIES = (
    ("processed", pgettext_lazy("tasks", "processed"), "#2e7d32"),
    ("failed", pgettext_lazy("tasks", "failed"), "#c62828"),
    ("retried", pgettext_lazy("tasks", "retried"), "#ef6c00"),
)


@dataclass(frozen=True)
class Line:
    kind: str
    label: StrOrPromise
    color: str
    points: str  # an SVG polyline's points
    total: int


@dataclass(frozen=True)
class Chart:
    """One queue's finished tasks per minute, as polylines (server-rendered SVG)."""

    queue: str
    lines: list[Line]
    peak: int
    start: datetime.datetime
    end: datetime.datetime
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT


def chart(queue: str, minutes: list[Minute]) -> Chart | None:
    """``None`` when nothing finished in the window (there is nothing to draw)."""
    peak = max((max(m.processed, m.failed, m.retried) for m in minutes), default=0)
    if not peak:
        return None
    step = CHART_WIDTH / max(len(minutes) - 1, 1)
    lines = []
    for kind, label, color in SERIES:
        values = [getattr(minute, kind) for minute in minutes]
        points = " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value * CHART_HEIGHT / peak:.1f}"
            for i, value in enumerate(values)
        )
        lines.append(Line(kind, label, color, points, sum(values)))
    return Chart(queue, lines, peak, minutes[0].at, minutes[-1].at)


# -- the admin -------------------------------------------------------------------------------


class TaskQueuesAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """The "Task queues" pages of the admin; nothing here reads or writes the database."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_view_task_queues(request.user)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return can_view_task_queues(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"

        def page(view: Callable[..., HttpResponse]) -> Any:
            return self.admin_site.admin_view(self._guarded(view))

        return [
            path("", page(self.overview), name=f"{prefix}_changelist"),
            path("queue/", page(self.queue), name=f"{prefix}_queue"),
            path("dead/", page(self.dead_letter), name=f"{prefix}_dead"),
            path("task/", page(self.task), name=f"{prefix}_task"),
            path("workflows/", page(self.workflows), name=f"{prefix}_workflows"),
            path("workflow/", page(self.workflow), name=f"{prefix}_workflow"),
            path("do/<str:action>/", page(self.action), name=f"{prefix}_action"),
        ]

    def url(self, name: str, *args: str, query: str = "") -> str:
        found = reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{name}",
            args=args,
        )
        return f"{found}?{query}" if query else found

    def _cancel_url(self, task: WaitingTask, queue: str) -> str:
        if not task.task_id:
            return ""
        return self.url("action", "cancel", query=Target(queue, task.task_id).query())

    def _guarded(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        """Permission first; then bad input is a message, Redis down a 503 page."""

        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not can_view_task_queues(request.user):
                return self._refused(request, refusal())
            try:
                return view(request, *args, **kwargs)
            except InvalidInput as error:
                messages.error(request, str(error))
                return HttpResponseRedirect(self.url("changelist"))
            except redis.RedisError as error:
                log.warning("Task queues page: Redis cannot be reached: %s", error)
                context = self._context(request, gettext("Task queues"), error=str(error))
                return render(request, "admin/redis_components/error.html", context, status=503)

        return guarded

    def _refused(self, request: HttpRequest, why: str) -> HttpResponse:
        """A 403 page in the admin's frame that says which permission is missing."""
        context = self._context(request, gettext("Task queues"), refused=why)
        return render(request, "admin/redis_components/refused.html", context, status=403)

    def _context(self, request: HttpRequest, title: StrOrPromise, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "overview_url": self.url("changelist"),
            # Django 6.1's admin styles breadcrumbs as a list, before it a <div>.
            "breadcrumbs_list": django.VERSION >= (6, 1),
            "can_manage": can_manage_task_queues(request.user),
            **extra,
        }

    def overview(self, request: HttpRequest) -> HttpResponse:
        stats = queue_stats()
        now = datetime.datetime.now(datetime.timezone.utc)
        running = running_tasks()
        by_worker: dict[str, list[dict[str, Any]]] = {}
        for task in running:
            seconds = (now - task.started_at).total_seconds() if task.started_at else None
            by_worker.setdefault(task.worker_id, []).append(
                {
                    "task": task,
                    "seconds": seconds,
                    "terminate_url": self.url(
                        "action", "terminate", query=Target(task_id=task.task_id).query()
                    ),
                }
            )
        found_workers = [
            {"worker": worker, "running": by_worker.pop(worker.id, [])} for worker in workers()
        ]
        limits_total, limits = limits_in_use()
        ages = oldest_ready([s.name for s in stats])
        minutes = throughput([s.name for s in stats], CHART_HOURS)
        charts = [c for s in stats if (c := chart(s.name, minutes[s.name])) is not None]
        context = self._context(
            request,
            gettext("Task queues"),
            refresh=REFRESH_SECONDS,
            queues=[
                {
                    "stats": s,
                    "oldest_ready": ages[s.name],
                    "url": self.url("queue", query=urlencode({"name": s.name})),
                    "dead_url": self.url(
                        "queue", query=urlencode({"name": s.name, "state": "dead"})
                    ),
                    "requeue_url": self.url("action", "requeue-all", query=Target(s.name).query()),
                    "purge_url": self.url("action", "purge", query=Target(s.name).query()),
                }
                for s in stats
            ],
            workers=found_workers,
            orphans=[entry for entries in by_worker.values() for entry in entries],
            schedules=schedule_states(),
            limits_total=limits_total,
            limits=limits,
            running_workflows=TaskStore().running_workflow_count(),
            workflows_url=self.url("workflows"),
            charts=charts,
            chart_hours=CHART_HOURS,
        )
        return render(request, "admin/redis_components/overview.html", context)

    def queue(self, request: HttpRequest) -> HttpResponse:
        name = validate_queue(request.GET.get("name", ""))
        state = request.GET.get("state", "ready")
        if state not in STATES:
            raise Http404("No such state: ready, delayed, on_limits or dead.")
        number = whole_number(request.GET.get("page", "1"), "page", 1, None)
        offset = (min(number, LAST_PAGE) - 1) * PAGE_SIZE
        rows: list[dict[str, Any]] = []
        if state == "dead":
            total, letters = dead_letter_page(name, offset, PAGE_SIZE)
            for i, letter in enumerate(letters):
                query = Target(name, index=offset + i).query()
                failed = datetime.datetime.fromtimestamp(letter.failed_at, datetime.timezone.utc)
                rows.append(
                    {"letter": letter, "failed": failed, "url": self.url("dead", query=query)}
                )
        else:
            total, waiting = waiting_tasks(name, state, offset, PAGE_SIZE)
            rows = [
                {
                    "waiting": task,
                    "url": self.url("task", query=urlencode({"id": task.task_id})),
                    "cancel_url": self._cancel_url(task, name),
                }
                for task in waiting
            ]
        pages = max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1)
        homes = home_stats(name)
        ages = [home.oldest_ready for home in homes if home.oldest_ready is not None]
        homes = homes if len(homes) > 1 else []  # (a table for its partitions)
        base: dict[str, str | int] = {"name": name, "state": state}

        def page_url(n: int) -> str:
            return self.url("queue", query=urlencode({**base, "page": n})) if 0 < n <= pages else ""

        if number > pages:  # past the end (the list shrank, or a made-up page): the last
            return redirect(page_url(pages))
        context = self._context(
            request,
            gettext("Queue %(name)s") % {"name": name},
            refresh=REFRESH_SECONDS,
            requeue_all_url=self.url("action", "requeue-all", query=Target(name).query()),
            queue=name,
            homes=homes if len(homes) > 1 else [],
            oldest_ready=max(ages, default=None),
            state=state,
            rows=rows,
            total=total,
            offset=offset,
            last_shown=offset + len(rows),
            page=number,
            pages=pages,
            tabs=[
                (tab, label, self.url("queue", query=urlencode({**base, "state": tab})))
                for tab, label in STATES.items()
            ],
            previous_url=page_url(number - 1),
            next_url=page_url(number + 1),
        )
        return render(request, "admin/redis_components/queue.html", context)

    def dead_letter(self, request: HttpRequest) -> HttpResponse:
        target = target_or_404(request.GET)
        entry = existing_dead_entry(target)
        found = Target(target.queue, index=target.index, digest=entry_digest(entry))
        context = self._context(
            request,
            gettext("Dead letter on %(queue)s") % {"queue": target.queue},
            letter=read_dead_letter(target.queue, entry),
            queue=target.queue,
            queue_url=self.url("queue", query=urlencode({"name": target.queue, "state": "dead"})),
            requeue_url=self.url("action", "requeue", query=found.query()),
            delete_url=self.url("action", "delete", query=found.query()),
        )
        return render(request, "admin/redis_components/dead_letter.html", context)

    def task(self, request: HttpRequest) -> HttpResponse:
        """One task with its arguments in full (the list pages show only their start)."""
        result = result_or_404(request.GET.get("id", ""))
        target = Target(result.queue, result.id).query()
        context = self._context(
            request,
            gettext("Task %(id)s") % {"id": result.id},
            result=result,
            held_back=held_back([result.id]).get(result.id),
            arguments=json.dumps(result.args, ensure_ascii=False, indent=2),
            keyword_arguments=json.dumps(result.kwargs, ensure_ascii=False, indent=2),
            metadata=json.dumps(result.metadata, ensure_ascii=False, indent=2),
            trace=tracing.creation_trace(result.metadata),
            queue_url=self.url("queue", query=urlencode({"name": result.queue})),
            cancel_url=self.url("action", "cancel", query=target),
            terminate_url=self.url("action", "terminate", query=target),
        )
        return render(request, "admin/redis_components/task.html", context)

    def workflows(self, request: HttpRequest) -> HttpResponse:
        """The running workflows and the finished ones still kept, at a glance."""
        running, finished = workflows()
        rows = [
            {"summary": summary, "url": self.url("workflow", query=urlencode({"id": summary.id}))}
            for summary in [*running, *finished]
        ]
        context = self._context(request, gettext("Workflows"), refresh=REFRESH_SECONDS, rows=rows)
        return render(request, "admin/redis_components/workflows.html", context)

    def workflow(self, request: HttpRequest) -> HttpResponse:
        """One workflow's steps: each one's state and its result (or failure)."""
        found = workflow_or_404(request.GET.get("id", ""))
        summary = found.summary()
        listed = found.steps()
        limited = held_back(step.task_id for step in listed if step.state == "QUEUED")
        steps = [
            {
                "step": step,
                "value": json.dumps(step.value, ensure_ascii=False),
                "url": self.url("task", query=urlencode({"id": step.task_id})),
                "held_back": limited.get(step.task_id),
            }
            for step in listed
        ]
        context = self._context(
            request,
            gettext("Workflow %(id)s") % {"id": found.id},
            refresh=REFRESH_SECONDS,
            summary=summary,
            progress=found.progress(),
            steps=steps,
            workflows_url=self.url("workflows"),
            cancel_url=self.url(
                "action", "cancel-workflow", query=Target(workflow_id=found.id).query()
            ),
        )
        return render(request, "admin/redis_components/workflow.html", context)

    def action(self, request: HttpRequest, action: str) -> HttpResponse:
        """GET: the confirmation page; POST (with CSRF): do it, log it, go back."""
        chosen = ACTIONS.get(action)
        if chosen is None:
            raise Http404(f"No such action: {action[:40]!r}.")
        if not can_manage_task_queues(request.user):
            return self._refused(request, refusal(manage=True))
        if request.method != "POST":
            target, shown = confirmable(chosen, request.GET)
            context = self._context(
                request, chosen.title, action=chosen, target=target, shown=shown
            )
            return render(request, "admin/redis_components/confirm.html", context)
        target = Target.from_data(request.POST)
        try:
            outcome = chosen.run(target)
        except TaskNotCancellable as error:
            messages.error(request, str(error))
            return HttpResponseRedirect(self.url("changelist"))
        with override("en"):
            title, said = str(chosen.title), str(outcome)
        log.info("%s (admin user %r): %s", title, request.user.get_username(), said)
        messages.success(request, outcome)
        if target.workflow_id:
            query = urlencode({"id": target.workflow_id})
            return HttpResponseRedirect(self.url("workflow", query=query))
        if target.queue:
            state = "dead" if action in ("requeue", "delete") else "ready"
            query = urlencode({"name": target.queue, "state": state})
            return HttpResponseRedirect(self.url("queue", query=query))
        return HttpResponseRedirect(self.url("changelist"))
