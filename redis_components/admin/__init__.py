"""The app's pages in Django's admin: a "Task queues" entry (see :mod:`.queues`).

HTTP for the task system lives here, never in ``redis_components.tasks``.
"""

from __future__ import annotations

from django.contrib import admin

from ..models import TaskQueues
from .queues import TaskQueuesAdmin

admin.site.register(TaskQueues, TaskQueuesAdmin)
