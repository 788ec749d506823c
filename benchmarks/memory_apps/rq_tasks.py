"""django-rq's no-op job (imported by its worker when it runs the first job)."""

from __future__ import annotations

from .work import noop

__all__ = ["noop"]
