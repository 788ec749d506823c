from __future__ import annotations

from django.apps import AppConfig


class MarketplaceConfig(AppConfig):
    name = "demo_project.marketplace"
    label = "marketplace"
    verbose_name = "Demo marketplace"
