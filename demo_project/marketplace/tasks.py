"""The demo's tasks, run by the worker that `make demo` starts.

A sale runs a workflow, a chain of two steps: ``record_sale`` counts it in both users'
trade stats, then ``send_sold_email`` tells the seller (the book's example task). On
Django 6.1 they are declared with Django's own ``@task`` (``django.tasks``) and run on our
queues through ``RedisTaskBackend`` (``TASKS`` in the settings, 3 retries); before it
with ``redis_components.redis_task``. Either way ``.si(...)`` makes each a step, and the
buyer's notices page shows the workflow's state, read back with ``get_workflow``.

A seller's bulk listing (``list_in_bulk``, the inventory page's "List everything") is a
long task that says how far it got: ``context.set_progress(...)`` after each item, which
the page reads with ``get_result`` (one round trip) and shows as a progress bar; its
metadata says who started it, and the admin's task page shows both. It may run 3 times
(``max_attempts``, Django's proposed name): an item listed by an attempt that failed is
no longer in the inventory, so the next attempt skips it.

The emails go through one mail relay, which takes at most 5 a second: the limit is the
task's (``limits=[rate_limit(...)]``), kept by the worker where it takes a task, so a
burst of sales queues its emails instead of failing or retrying them.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import django
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.http import HttpRequest

from redis_components import (
    Mailbox,
    RedisTaskContext,
    chain,
    get_workflow,
    rate_limit,
    redis_task,
)
from redis_components.exceptions import WorkflowDoesNotExist
from redis_components.tasks.status import WaitingTask, waiting_tasks

from .market import Market

BULK_PACE = 0.4  # seconds per item of a bulk listing, so a visitor sees its progress
SENT_KEPT = 10  # the buyer's latest sales whose workflow the notices page shows
MAIL_RELAY = [rate_limit(5, per=1.0, key="mail-relay")]
EMAIL_QUEUE = "email"
WAITING_SHOWN = 20  # emails listed of each kind of wait on the notices page


def record_sale(sale: str, seller_id: int, buyer_id: int, price: int) -> bool:
    """Count a sale in the seller's and the buyer's trade stats, once (see
    ``Market.record_sale``): a step that runs twice does not count it twice."""
    return Market("main").record_sale(sale, seller_id, buyer_id, price)


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


def list_in_bulk(context: RedisTaskContext, seller_id: int, price: int) -> dict[str, int]:
    """List every item in the seller's inventory at ``price``, saying how far it got
    after each (its progress: items done of the total, the item in hand)."""
    market = Market("main")
    items = sorted(market.inventory(seller_id))
    listed = 0
    for done, item in enumerate(items):
        context.set_progress(done, total=len(items), note=f"listing {item}")
        time.sleep(BULK_PACE)
        listed += market.list_item(item, seller_id, price, "fine")
    context.set_progress(len(items), total=len(items), note=f"{listed} listed")
    context.metadata["listed"] = listed
    return {"listed": listed, "of": len(items)}


if django.VERSION >= (6, 1):  # Django 6.1 passes the limits on to our backend's tasks
    from django.tasks import task as django_task

    record_sale = django_task(queue_name="market")(record_sale)  # type: ignore[assignment]
    send_sold_email = django_task(queue_name="email", limits=MAIL_RELAY)(send_sold_email)  # type: ignore[assignment]
    list_in_bulk = django_task(queue_name="market", takes_context=True, max_attempts=3)(  # type: ignore[assignment]
        list_in_bulk
    )
else:
    record_sale = redis_task(queue="market", max_retries=3)(record_sale)  # type: ignore[assignment]
    send_sold_email = redis_task(queue="email", max_retries=3, limits=MAIL_RELAY)(send_sold_email)  # type: ignore[assignment]
    list_in_bulk = redis_task(queue="market", takes_context=True, max_attempts=3)(list_in_bulk)  # type: ignore[assignment]


def after_sale(request: HttpRequest, seller_id: int, item: str, price: int, seller: str) -> None:
    """Start the sale's workflow (record it, then tell the seller), and remember it in the
    buyer's session."""
    buyer_id = request.user.pk
    workflow = chain(
        record_sale.si(uuid.uuid4().hex, seller_id, buyer_id, price),  # type: ignore[attr-defined]
        send_sold_email.si(seller_id, item, price, buyer_id),  # type: ignore[attr-defined]
    ).enqueue()
    sent = [{"id": workflow.id, "item": item, "seller": seller}]
    request.session["sales"] = (sent + request.session.get("sales", []))[:SENT_KEPT]


def sales(request: HttpRequest) -> list[dict[str, Any]]:
    """The buyer's latest sales, each with its workflow's status and steps now."""
    shown = []
    for sale in request.session.get("sales", []):
        try:
            workflow = get_workflow(sale["id"])
        except WorkflowDoesNotExist:
            shown.append({**sale, "status": "expired", "steps": []})
        else:
            # A Django @task's name is its module path: the function's name is enough here.
            steps = [(step.task_name.rpartition(".")[2], step.state) for step in workflow.steps()]
            shown.append({**sale, "status": workflow.status, "steps": steps})
    return shown


def waiting_emails() -> dict[str, Any]:
    """The sold emails that wait now, as the notices page shows them (and polls them):
    queued (ready for a worker), set aside on the mail relay's rate until their turn
    (``delayed``), or waiting for a concurrency permit (``on_limits``). Three reads."""
    now_ms = time.time() * 1000
    found: dict[str, Any] = {"rate": str(MAIL_RELAY[0]), "key": MAIL_RELAY[0].key, "emails": []}
    for state in ("ready", "delayed", "on_limits"):
        count, tasks = waiting_tasks(EMAIL_QUEUE, state, 0, WAITING_SHOWN)
        found[state] = count
        found["emails"] += [_email(state, task, now_ms) for task in tasks]
    return found


def _email(state: str, task: WaitingTask, now_ms: float) -> dict[str, Any]:
    """One waiting email: its task, the item it is about, what it waits for and how long."""
    try:
        arguments = json.loads(task.arguments)
    except ValueError:  # cut short (a long item name) or not JSON: show no item
        arguments = None
    # send_sold_email(seller_id, item_id, price, buyer_id)
    item = arguments[1] if isinstance(arguments, list) and len(arguments) == 4 else ""
    due_in = max(0.0, (task.due_ms - now_ms) / 1000) if task.due_ms is not None else None
    return {
        "task_id": task.task_id,
        "item": item if isinstance(item, str) else "",
        "state": state,
        "waits_for": task.waits_for or ("a worker" if state == "ready" else ""),
        "waits_on": task.waits_on,
        "due_in": None if due_in is None else round(due_in, 2),
    }
