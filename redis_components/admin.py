"""Django's admin gets a "Task queues" entry (see ``redis_components.tasks.dashboard``)."""

from __future__ import annotations

from django.contrib import admin

from .models import TaskQueues
from .tasks.dashboard import TaskQueuesAdmin

admin.site.register(TaskQueues, TaskQueuesAdmin)
