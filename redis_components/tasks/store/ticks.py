"""The ticks facet of the task store: the schedules' next and last ticks, and claiming
due ticks (a tick's task enqueued once)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from ... import keys
from . import replies
from .calls import claim_call, tick_enqueue_call
from .layout import registry, schedule_last_key, schedule_next_key, task_home
from .records import TickClaim
from .replies import fields_of
from .router import Router, raw

logger = logging.getLogger("redis_components.tasks")


class Ticks(Router):
    """The schedules' ticks: read, started and claimed."""

    def schedule_ticks(self) -> tuple[dict[str, int], int]:
        """Each schedule's next tick (epoch ms; those that are numbers) and the server's
        time (ms)."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        pipe.time()
        stored, (seconds, micros) = pipe.execute()
        return replies.ticks(stored), replies.server_ms(seconds, micros)

    def start_schedule(self, name: str, first_tick: int) -> None:
        """Record a new schedule's first tick, unless a scheduler already did."""
        self.client.hsetnx(schedule_next_key(), name, first_tick)

    def schedule_records(self) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
        """Each schedule's next tick (epoch ms), and its last run (its tick and the task it
        enqueued); what cannot be read is left out."""
        pipe = self.client.pipeline(transaction=False)
        raw(pipe, "HGETALL", schedule_next_key())
        raw(pipe, "HGETALL", schedule_last_key())
        next_ticks, last_runs = pipe.execute()
        lasts = {}
        for name, value in fields_of(last_runs).items():
            tick, _, task_id = value.decode("utf-8", "replace").partition(" ")
            with contextlib.suppress(ValueError):
                lasts[name] = (int(tick), keys.validate_name(task_id, "task_id", 100))
        return replies.ticks(next_ticks), lasts

    def claim_ticks(self, claims: Sequence[TickClaim]) -> list[bool]:
        """Claim due ticks in one script; for each, whether this call claimed it (and
        enqueued its task if ``run``). A task whose queue has a home of its own is enqueued
        there first (once: its id is the tick's), unless its tick was claimed meanwhile."""
        elsewhere = [c for c in claims if c.run and task_home(c.message.id) != registry()]
        if elsewhere:
            nexts = self.client.hmget(schedule_next_key(), [c.schedule for c in elsewhere])
            for claim, following in zip(elsewhere, nexts, strict=True):
                if following is None or int(following) != claim.tick:
                    continue  # claimed or skipped by another scheduler meanwhile
                _, problem = self._run_durable(
                    tick_enqueue_call(claim), f"Task {claim.message.id} was enqueued"
                )
                if problem:
                    logger.warning("%s", problem)
        claimed, problem = self._run_durable(
            claim_call(claims=claims), "Schedules' ticks were enqueued"
        )
        if problem:
            logger.warning("%s", problem)
        return [bool(done) for done in claimed]
