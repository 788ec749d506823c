"""The app keeps its data in Redis; this model only gives the task queues' admin pages an
entry in Django's admin and the permissions that guard them. It has no table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import models
from django.utils.translation import gettext

if TYPE_CHECKING:  # importing auth's models needs django.contrib.auth installed
    from django.contrib.auth.models import AbstractUser, AnonymousUser

VIEW_TASK_QUEUES = "redis_components.view_task_queues"
MANAGE_TASK_QUEUES = "redis_components.manage_task_queues"


class TaskQueues(models.Model):
    """The "Task queues" entry of the admin (see ``redis_components.admin``)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_task_queues", "Can see the task queues, their tasks and workers"),
            ("manage_task_queues", "Can requeue, delete, cancel and purge tasks"),
        ]
        verbose_name = verbose_name_plural = "task queues"

    def __str__(self) -> str:
        return "task queues"


def can_view_task_queues(user: AbstractUser | AnonymousUser) -> bool:
    """Whether ``user`` may see the task queues: staff (as Django's admin requires) with
    ``view_task_queues`` or ``manage_task_queues``. The one rule of the admin pages and
    of ``rc/queues/?format=json``."""
    return user.is_staff and (user.has_perm(VIEW_TASK_QUEUES) or can_manage_task_queues(user))


def refusal(manage: bool = False) -> str:
    """What a user refused the task queues' pages (``manage``: their actions) is told:
    the permission that would let them in."""
    if manage:
        return gettext(
            "You may see the task queues but not act on them: that takes the permission %(perm)s."
        ) % {"perm": MANAGE_TASK_QUEUES}
    return gettext(
        "You may not see the task queues: that takes staff status and the permission "
        "%(view)s (or %(manage)s)."
    ) % {"view": VIEW_TASK_QUEUES, "manage": MANAGE_TASK_QUEUES}


def can_manage_task_queues(user: AbstractUser | AnonymousUser) -> bool:
    """Whether ``user`` may act on the task queues (requeue, delete, cancel, terminate,
    purge): staff with ``manage_task_queues``."""
    return user.is_staff and user.has_perm(MANAGE_TASK_QUEUES)
