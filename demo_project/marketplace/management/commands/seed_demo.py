"""`manage.py seed_demo`: the demo's users, market, guild, contacts and a chat."""

from __future__ import annotations

import sys
from typing import Any

from demo_project.marketplace.seed import seed
from demo_project.marketplace.views import MARKET
from redis_components.management.base import RedisCommand


class Command(RedisCommand):
    help = (
        "Create the demo's users (and print their password), funds, items and listings, "
        "recent contacts and a chat. Safe to run again: it only adds what is missing."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        tty = sys.stdout.isatty()

        def progress(step: str, partial: bool) -> None:
            if tty:  # a count going up is rewritten in place
                self.stdout.write(f"\r\x1b[K  {step}", ending="" if partial else "\n")
                self.stdout.flush()
            elif not partial:
                self.stdout.write(f"  {step}")

        seed(MARKET, progress=progress)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
