from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules


class RedisComponentsConfig(AppConfig):
    name = "redis_components"
    verbose_name = "Redis components"
    default_auto_field = "django.db.models.BigAutoField"  # the admin's model has no table

    def ready(self) -> None:
        from .checks import check_settings

        checks.register(check_settings)
        # Import every installed app's tasks.py, so that web processes and workers know
        # the same task names (@redis_task registers a task when its module is imported).
        autodiscover_modules("tasks")
