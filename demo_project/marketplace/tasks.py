"""The demo's tasks, run by the worker that `make demo` starts."""

from __future__ import annotations

import time

from django.contrib.auth import get_user_model
from django.core.mail import send_mail

from redis_components import Mailbox, task


@task(queue="email", max_retries=3)
def send_sold_email(seller_id: int, item_id: str, price: int, buyer_id: int) -> None:
    """Tell a seller their item sold: an email, and a notice on the site.

    The book's example task (``send_sold_email_via_queue``), run by the worker that
    ``make demo`` starts. Sending twice after a worker crash would send two emails:
    harmless here, and the price of never losing one.
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
        seller.get_username(),
        {"text": text, "item": item_id, "price": price, "buyer": buyer_id, "time": time.time()},
    )
