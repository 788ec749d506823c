"""The handle on a workflow: what ``enqueue()`` returns and :func:`get_workflow` finds,
from any process. It reads the workflow through the store's flows facet, whose codec
(``store/flow_records.py``) knows the fields Redis keeps."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import keys
from ..exceptions import InvalidInput, WorkflowDoesNotExist, WorkflowNotSuccessful
from .store import Progress, TaskStore
from .store.flow_records import STATES, Step, StepState, Summary

__all__ = ["STATES", "Step", "StepState", "Summary", "Workflow", "get_workflow", "workflows"]

T = TypeVar("T")


@dataclass(frozen=True)
class Workflow:
    """A handle on an enqueued workflow, usable from any process (:func:`get_workflow`)."""

    id: str

    def _gone(self) -> WorkflowDoesNotExist:
        return WorkflowDoesNotExist(f"no workflow {self.id} is kept (unknown, or expired)")

    def _kept(self, found: T | None) -> T:
        if found is None:
            raise self._gone()
        return found

    @property
    def status(self) -> str:
        """RUNNING, SUCCESSFUL, FAILED (a step failed for good: see :attr:`failed_step`)
        or CANCELLED. A FAILED workflow may still run steps that do not depend on the
        failed one: :attr:`finished` says when nothing more will run."""
        return self.summary().status

    @property
    def finished(self) -> bool:
        """Whether every step has ended (or will not run)."""
        return self.summary().finished

    @property
    def failed_step(self) -> str | None:
        """The task id of the step whose failure failed the workflow."""
        return self.summary().failed_step

    def steps(self) -> list[Step]:
        """Every step, in the order the workflow was written."""
        return self._kept(TaskStore().workflow_steps(self.id))

    def summary(self) -> Summary:
        """The workflow at a glance (its status, and how many steps are in each state):
        a few fields are read, never its steps or their results."""
        [found] = TaskStore().workflow_summaries([self.id])
        return self._kept(found)

    def progress(self) -> Progress | None:
        """Its steps' progress added up (what each said last): the sum of their ``done``,
        of their ``total`` (``None`` if one said none), the latest ``at``; ``None`` when no
        step said any. Steps that have not said any count for nothing yet."""
        store = TaskStore()
        said = [p for p in store.task_progress([s.task_id for s in self.steps()]) if p]
        if not said:
            return None
        totals = [p.total for p in said]
        return Progress(
            done=sum(p.done for p in said),
            total=None if None in totals else sum(t for t in totals if t is not None),
            note="",
            at=max(p.at for p in said),
        )

    def results(self) -> Any:
        """The workflow's result once it succeeded: its last step's for a chain, its members'
        list for a group, nested as the workflow is; else :class:`WorkflowNotSuccessful`."""
        status, failed, value = self._kept(TaskStore().workflow_outcome(self.id))
        if status != "SUCCESSFUL":
            raise WorkflowNotSuccessful(self.id, status, failed)
        return value

    def cancel(self, *, terminate: bool = True) -> tuple[int, int]:
        """Cancel the workflow: once this returns, no step starts. Waiting steps are
        dropped, queued ones taken out of their queue, and running ones asked to stop
        (as ``cancel(task_id, terminate=True)`` does; with ``terminate=False`` they
        finish, and release nothing). Returns how many steps were dropped and how many
        were still running; :class:`InvalidInput` for a workflow that had finished."""
        store = TaskStore()
        members = self._kept(store.workflow_members(self.id))
        cancelled, status, dropped, running = store.cancel_workflow(
            self.id, members, terminate=terminate
        )
        if status is None:
            raise self._gone()
        if cancelled:
            return dropped, running
        ended = "was cancelled already" if status == "CANCELLED" else f"has ended ({status})"
        raise InvalidInput("workflow", f"workflow {self.id} {ended}: nothing to cancel")

    def wait(self, timeout: float, interval: float = 0.05) -> str:
        """Wait until the workflow has finished, at most ``timeout`` seconds; its status.
        Raises ``TimeoutError`` if it has not. (It reads the workflow every ``interval``
        seconds: for scripts and tests, not for request handlers.)"""
        deadline = time.monotonic() + keys.seconds(timeout, "timeout")
        while True:
            summary = self.summary()
            if summary.finished:
                return summary.status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} has not finished in {timeout:g} s")
            time.sleep(interval)


def get_workflow(workflow_id: str) -> Workflow:
    """The workflow enqueued with this id, from any process (:class:`WorkflowDoesNotExist`
    once it expired, ``TASK_RESULT_TTL`` after it finished)."""
    keys.validate_name(workflow_id, "workflow_id", 100)
    workflow = Workflow(workflow_id)
    workflow.summary()
    return workflow


def workflows(limit: int = 100) -> tuple[list[Summary], list[Summary]]:
    """The running workflows (the oldest ``limit``), and the finished ones still kept
    (the latest ``limit``), at a glance: a few fields of each are read, not its steps."""
    store = TaskStore()
    live, done = store.workflow_ids(limit)
    found = [s for s in store.workflow_summaries([*live, *done]) if s]  # (some may expire)
    return [s for s in found if not s.finished], [s for s in found if s.finished]
