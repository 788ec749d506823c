"""Tasks of the demo marketplace, run by ``manage.py rc_worker`` (``make demo`` starts one)."""

from __future__ import annotations

import logging

from redis_components import task

logger = logging.getLogger(__name__)


@task(queue="email", max_retries=3)
def send_sold_email(seller_id: int, item_id: str, price: int, buyer_id: int) -> None:
    """Tell a seller that an item sold (the book's send_sold_email_via_queue, 6.4.1).

    The demo has no mail server: it logs the notice. Like every task it may run twice
    after a worker crash, so a real one would send at most one mail per sale id.
    """
    logger.info(
        "Sold notice: seller %s sold %s for %s to buyer %s", seller_id, item_id, price, buyer_id
    )
