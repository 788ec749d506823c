"""The benchmark's job functions for RQ (rq worker -w rq.worker.SimpleWorker bench)."""

from __future__ import annotations

from .work import late, mark, noop, record, started

__all__ = ["late", "mark", "noop", "record", "started"]
