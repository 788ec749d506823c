"""The app keeps its data in Redis; this model only gives the task queues' admin pages an
entry in Django's admin and the permissions that guard them. It has no table."""

from __future__ import annotations

from django.db import models


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
