from __future__ import annotations

import logging

from django.conf import settings
from django.db import models
from django.utils import timezone

from redis_components import Mailbox

logger = logging.getLogger(__name__)


class Notice(models.Model):
    """A notice for a user ("your ItemA sold to bob for 35"), pulled from their mailbox."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    text = models.TextField()
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return self.text

    @classmethod
    def collect(cls, user: models.Model) -> int:
        """Move what waits in the user's mailbox into notices; how many came."""
        messages = Mailbox().fetch(user.get_username())  # type: ignore[attr-defined]
        notices = [cls(user=user, text=str(message.get("text", message))) for message in messages]
        try:
            cls.objects.bulk_create(notices)
        except Exception:
            # Put them back rather than lose them; the next visit tries again.
            for message in messages:
                Mailbox().send(user.get_username(), message)  # type: ignore[attr-defined]
            raise
        return len(notices)
