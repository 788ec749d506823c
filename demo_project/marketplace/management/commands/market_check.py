"""`manage.py market_check`: the market's invariants, checked in one consistent snapshot."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from demo_project.marketplace.market import Market
from redis_components.management.base import RedisCommand


class Command(RedisCommand):
    help = (
        "Check the market's invariants: the total of all funds is what it was when the users "
        "were created, no funds are negative, and every item is in exactly one place (one "
        "inventory, or the market once). Lists each violation and exits non-zero if any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--market", default="main", help="which market (default: main)")

    def handle(self, *args: Any, market: str, **options: Any) -> None:
        problems = Market(market).check()
        for problem in problems:
            self.stderr.write(f"  {problem}")
        if problems:
            raise CommandError(f"The market {market!r} breaks {len(problems)} invariant(s).")
        self.stdout.write(self.style.SUCCESS(f"The market {market!r} is sound."))
