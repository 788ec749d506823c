"""The demo's task, run by the worker that `make demo` starts.

On Django 6 it is declared with Django's own ``@redis_task`` (``django.tasks``) and runs on our
queue through ``RedisTaskBackend`` (``TASKS`` in the settings, 3 retries); on Django 5.2
it is declared with ``redis_components.redis_task``. Either way ``.enqueue()`` returns a result
whose status the buyer's notices page shows, read back with ``get_result``.
"""

from __future__ import annotations

import time
from typing import Any

import django
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.http import HttpRequest

from redis_components import Mailbox, get_result, redis_task
from redis_components.exceptions import TaskResultDoesNotExist

SENT_KEPT = 10  # the buyer's latest notices whose status the notices page shows


def send_sold_email(seller_id: int, item_id: str, price: int, buyer_id: int) -> None:
    """Tell a seller their item sold: an email, and a notice on the site.

    The book's example task (``send_sold_email_via_queue``). Sending twice after a worker
    crash would send two emails: harmless here, and the price of never losing one.
    """
    users = get_user_model()._default_manager.in_bulk([seller_id, buyer_id])
    seller, buyer = users[seller_id], users[buyer_id]
    text = f"Your {item_id} sold to {buyer.get_username()} for {price}."
    send_mail(
        subject=f"{item_id} sold",
        message=text,
        from_email=None,
        recipient_list=[seller.email or f"{seller.get_username()}@example.com"],
    )
    Mailbox().send(
        seller,
        {"text": text, "item": item_id, "price": price, "buyer": buyer_id, "time": time.time()},
    )


if django.VERSION >= (6, 0):
    from django.tasks import task as django_task

    send_sold_email = django_task(queue_name="email")(send_sold_email)  # type: ignore[assignment]
else:
    send_sold_email = redis_task(queue="email", max_retries=3)(send_sold_email)  # type: ignore[assignment]


def notify_seller(request: HttpRequest, seller_id: int, item: str, price: int, seller: str) -> None:
    """Enqueue the seller's notice, and remember it in the buyer's session."""
    result = send_sold_email.enqueue(seller_id, item, price, request.user.pk)  # type: ignore[attr-defined]
    sent = [{"id": result.id, "item": item, "seller": seller}]
    request.session["sold_notices"] = (sent + request.session.get("sold_notices", []))[:SENT_KEPT]


def sent_notices(request: HttpRequest) -> list[dict[str, Any]]:
    """The buyer's latest notices to sellers, with their task's status now."""
    shown = []
    for sent in request.session.get("sold_notices", []):
        try:
            result = get_result(sent["id"])
        except TaskResultDoesNotExist:
            status, attempts = "expired", 0
        else:
            status, attempts = result.status.value, len(result.worker_ids)
        shown.append({**sent, "status": status, "attempts": attempts})
    return shown
