from __future__ import annotations

from django.db import models


class Document(models.Model):
    """A row written under a lock, guarded by the lock's fence token."""

    body = models.TextField(default="")
    fence = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.body} (fence {self.fence})"
