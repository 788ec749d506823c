"""What the task queues' admin pages can do (see :mod:`.queues`): each action, what it
applies to (a :class:`Target`, from the confirmation page's query string or the POST's
form), and how a target that names nothing becomes a 404."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from django.http import Http404
from django.utils.http import urlencode
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy, ngettext_lazy

from ..exceptions import InvalidInput, TaskResultDoesNotExist, WorkflowDoesNotExist
from ..tasks.messages import validate_queue
from ..tasks.results import TaskRecord, get_record
from ..tasks.status import dead_letter_entry, read_dead_letter
from ..tasks.store import TaskStore, cancel
from ..tasks.workflows import Workflow, get_workflow
from ..views import whole_number

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise as StrOrPromise


def entry_digest(entry: bytes) -> str:
    """Names one dead letter on a confirmation page, so that the action applies to the
    entry the user saw even if the list moved meanwhile."""
    return hashlib.sha256(entry).hexdigest()[:20]


@dataclass(frozen=True)
class Target:
    """What an action applies to, from the query string (confirmation) or the form (POST)."""

    queue: str = ""
    task_id: str = ""
    index: int | None = None
    digest: str = ""
    workflow_id: str = ""

    @classmethod
    def from_data(cls, data: Any) -> Target:
        index = data.get("index")
        queue = data.get("queue", "")
        return cls(
            queue=validate_queue(queue) if queue else "",
            task_id=data.get("task", "")[:100],
            index=whole_number(index, "index", 0) if index not in (None, "") else None,
            digest=data.get("digest", "")[:40],
            workflow_id=data.get("workflow", "")[:100],
        )

    def query(self) -> str:
        fields = {
            "queue": self.queue,
            "task": self.task_id,
            "digest": self.digest,
            "workflow": self.workflow_id,
        }
        if self.index is not None:
            fields["index"] = str(self.index)
        return urlencode({k: v for k, v in fields.items() if v})

    def dead_entry(self) -> bytes:
        """The dead letter this names, still at its place; else :class:`InvalidInput`."""
        if not self.queue or self.index is None:
            raise InvalidInput("index", gettext("a queue and the dead letter's index are needed"))
        entry = dead_letter_entry(self.queue, self.index)
        if entry is None or (self.digest and entry_digest(entry) != self.digest):
            raise InvalidInput(
                "index", gettext("that dead letter is no longer there (the list changed)")
            )
        return entry


def _requeue(target: Target) -> StrOrPromise:
    if TaskStore().requeue_dead_entry(target.queue, target.dead_entry()):
        return format_lazy(
            gettext_lazy("Requeued the dead letter on {queue}."), queue=repr(target.queue)
        )
    return gettext_lazy(
        "That dead letter could not be requeued (another user moved it, or it is unreadable)."
    )


def _delete(target: Target) -> StrOrPromise:
    if TaskStore().delete_dead_entry(target.queue, target.dead_entry()):
        return format_lazy(
            gettext_lazy("Deleted the dead letter from {queue}."), queue=repr(target.queue)
        )
    return gettext_lazy("That dead letter was already gone.")


def _requeue_all(target: Target) -> StrOrPromise:
    moved, left = TaskStore().requeue_dead(_queue_of(target))
    done = format_lazy(
        ngettext_lazy(
            "Requeued {count} dead letter on {queue}.",
            "Requeued {count} dead letters on {queue}.",
            moved,
        ),
        count=moved,
        queue=repr(target.queue),
    )
    if not left:
        return done
    kept = ngettext_lazy(
        "{count} unreadable dead letter stays in the list.",
        "{count} unreadable dead letters stay in the list.",
        left,
    )
    return format_lazy("{} {}", done, format_lazy(kept, count=left))


def _purge(target: Target) -> StrOrPromise:
    purged = TaskStore().purge(_queue_of(target))
    return format_lazy(
        ngettext_lazy(
            "Purged {count} task from {queue}.", "Purged {count} tasks from {queue}.", purged
        ),
        count=purged,
        queue=repr(target.queue),
    )


def _cancel(target: Target) -> StrOrPromise:
    cancel(target.task_id)
    return format_lazy(gettext_lazy("Cancelled task {task}."), task=target.task_id)


def _terminate(target: Target) -> StrOrPromise:
    outcome = cancel(target.task_id, terminate=True)
    if outcome == "cancelled":  # it had not started after all
        return format_lazy(
            gettext_lazy("Cancelled task {task} (it had not started)."), task=target.task_id
        )
    return format_lazy(
        gettext_lazy("Task {task} is being stopped (its worker process is replaced)."),
        task=target.task_id,
    )


def _cancel_workflow(target: Target) -> StrOrPromise:
    dropped, running = workflow_or_404(target.workflow_id).cancel()
    return format_lazy(
        gettext_lazy(
            "Cancelled workflow {workflow}: {dropped} steps dropped, {running} running "
            "asked to stop."
        ),
        workflow=target.workflow_id,
        dropped=dropped,
        running=running,
    )


def _queue_of(target: Target) -> str:
    if not target.queue:
        raise InvalidInput("queue", gettext("which queue?"))
    return target.queue


@dataclass(frozen=True)
class Action:
    title: StrOrPromise
    warning: StrOrPromise
    confirm: StrOrPromise  # the button that does it
    # What it did, as a lazy string: the message shows it in the user's language, the log
    # line in English.
    run: Callable[[Target], StrOrPromise]
    needs: Literal["dead letter", "queue", "task", "workflow"]


ACTIONS = {
    "requeue": Action(
        gettext_lazy("Requeue a dead letter"),
        gettext_lazy("It goes back to its queue with fresh retries."),
        gettext_lazy("Yes, requeue a dead letter"),
        _requeue,
        "dead letter",
    ),
    "delete": Action(
        gettext_lazy("Delete a dead letter"),
        gettext_lazy("It is gone for good."),
        gettext_lazy("Yes, delete a dead letter"),
        _delete,
        "dead letter",
    ),
    "requeue-all": Action(
        gettext_lazy("Requeue every dead letter of a queue"),
        gettext_lazy("Each goes back to its queue with fresh retries."),
        gettext_lazy("Yes, requeue every dead letter of a queue"),
        _requeue_all,
        "queue",
    ),
    "purge": Action(
        gettext_lazy("Purge a queue"),
        gettext_lazy(
            "Every ready, delayed, dead task of the queue, and every one waiting on a limit, "
            "is deleted; running ones finish."
        ),
        gettext_lazy("Yes, purge a queue"),
        _purge,
        "queue",
    ),
    "cancel": Action(
        gettext_lazy("Cancel a waiting task"),
        gettext_lazy("It leaves its queue and its result says CANCELLED."),
        gettext_lazy("Yes, cancel a waiting task"),
        _cancel,
        "task",
    ),
    "terminate": Action(
        gettext_lazy("Terminate a running task"),
        gettext_lazy("The worker process running it is stopped and replaced; the attempt fails."),
        gettext_lazy("Yes, terminate a running task"),
        _terminate,
        "task",
    ),
    "cancel-workflow": Action(
        gettext_lazy("Cancel a workflow"),
        gettext_lazy(
            "No further step starts: waiting and queued steps are dropped, running ones are "
            "asked to stop."
        ),
        gettext_lazy("Yes, cancel a workflow"),
        _cancel_workflow,
        "workflow",
    ),
}


def existing_dead_entry(target: Target) -> bytes:
    """The dead letter ``target`` names; a 404 when there is none."""
    try:
        return target.dead_entry()
    except InvalidInput as error:
        raise Http404(error.problem) from None


def result_or_404(task_id: str) -> TaskRecord:
    try:
        return get_record(task_id)
    except (TaskResultDoesNotExist, InvalidInput):
        raise Http404("No such task is kept (unknown, or its result expired).") from None


def workflow_or_404(workflow_id: str) -> Workflow:
    try:
        return get_workflow(workflow_id)
    except (WorkflowDoesNotExist, InvalidInput):
        raise Http404("No such workflow is kept (unknown, or expired).") from None


def target_or_404(data: Any) -> Target:
    try:
        return Target.from_data(data)
    except InvalidInput as error:
        raise Http404(str(error)) from None


def confirmable(action: Action, data: Any) -> tuple[Target, list[tuple[str, str]]]:
    """The target as the confirmation page's form names it, and what the page lists
    about it; a 404 when it names no target, or a dead letter or task that does not
    exist."""
    target = target_or_404(data)
    given = {
        "dead letter": target.index is not None,
        "queue": target.queue,
        "task": target.task_id,
        "workflow": target.workflow_id,
    }
    if not given[action.needs]:
        raise Http404(f"Which {action.needs}?")
    shown = [(gettext("Queue"), target.queue)] if target.queue else []
    if action.needs == "dead letter":
        entry = existing_dead_entry(target)
        letter = read_dead_letter(target.queue, entry)
        shown += [
            (gettext("Dead letter"), letter.reason),
            (gettext("Error"), letter.error),
            (gettext("Task"), letter.task),
        ]
        return Target(target.queue, index=target.index, digest=entry_digest(entry)), shown
    if action.needs == "task":
        result = result_or_404(target.task_id)
        shown += [
            (gettext("Task"), f"{result.task} ({result.status.value})"),
            (gettext("Id"), result.id),
        ]
    if action.needs == "workflow":
        summary = workflow_or_404(target.workflow_id).summary()
        states = ", ".join(f"{n} {state}" for state, n in summary.counts.items())
        shown += [
            (gettext("Workflow"), f"{summary.id} ({summary.status})"),
            (gettext("Steps"), states),
        ]
    return target, shown
