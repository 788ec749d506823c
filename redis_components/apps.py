from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class RedisComponentsConfig(AppConfig):
    name = "redis_components"
    verbose_name = "Redis components"

    def ready(self) -> None:
        from .checks import check_settings

        checks.register(check_settings)
