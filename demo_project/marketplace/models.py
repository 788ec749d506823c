from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from redis_components import Mailbox, UnreadableMessage

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
        """Move what waits in the user's mailbox into notices; how many came.

        A message of another shape than the sold notice's (``{"text": ...}``), or one that
        is not even JSON, becomes a notice that shows what it holds: nothing is lost.
        """
        messages = Mailbox().fetch(user.pk)
        notices = [cls(user=user, text=notice_text(message)) for message in messages]
        try:
            cls.objects.bulk_create(notices)
        except Exception:
            # Put them back rather than lose them; the next visit tries again.
            for message in messages:
                # An unreadable one goes back as its text: the value type is not JSON.
                back = message.text if isinstance(message, UnreadableMessage) else message
                Mailbox().send(user.pk, back)
            raise
        return len(notices)


def notice_text(message: Any) -> str:
    """What a notice says for one mailbox message, whatever its shape."""
    if isinstance(message, UnreadableMessage):
        return f"(a message that could not be read: {message.text})"
    if isinstance(message, dict) and isinstance(message.get("text"), str):
        return str(message["text"])
    return f"(a message of an unexpected shape: {json.dumps(message, ensure_ascii=False)})"
