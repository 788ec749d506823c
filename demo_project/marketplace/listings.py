"""The inventory page ("My items"), and a seller's bulk listing on it: every item of the
inventory put up for sale at one price by a task (``tasks.list_in_bulk``), whose
progress the page shows live.

Starting it enqueues the task with metadata naming who started it (the admin's task page
shows it) and keeps its id in the seller's session; the page polls a JSON view that
reads the task's result once (status, progress and metadata: one round trip, from any
web process). One bulk listing per seller runs at a time.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from redis_components import RedisTaskResult, get_result
from redis_components.exceptions import TaskResultDoesNotExist

from .tasks import list_in_bulk
from .views import MARKET, MAX_PRICE, me

SESSION_KEY = "bulk_listing"


def state(request: HttpRequest) -> dict[str, Any] | None:
    """The seller's latest bulk listing as the page shows it, or ``None`` for none (or
    one whose result has expired)."""
    task_id = request.session.get(SESSION_KEY)
    if not isinstance(task_id, str):
        return None
    try:
        result = get_result(task_id)
    except TaskResultDoesNotExist:
        return None
    if not isinstance(result, RedisTaskResult):  # (every result of ours is: narrows the type)
        return None
    progress = result.progress
    return {
        "task_id": task_id,
        "status": str(result.status),
        "finished": result.is_finished,
        "done": progress.done if progress else 0,
        "total": progress.total if progress else None,
        "note": progress.note if progress else _waiting(result.status),
        "started_by": result.metadata.get("started_by", ""),
    }


def _waiting(status: object) -> str:
    """What a bulk listing that has said nothing yet is doing (its first report is saved
    half a second into its run: ``TASK_PROGRESS_INTERVAL``)."""
    return "waiting for a worker" if str(status) == "READY" else "starting"


@login_required
def inventory(request: HttpRequest) -> HttpResponse:
    user = me(request)
    mine = [(item, seller, price) for item, seller, price in MARKET.listings() if seller == user]
    context = {
        "items": MARKET.inventory(user),
        "listed": mine,
        "funds": MARKET.funds(user),
        "bulk": state(request),
    }
    return render(request, "marketplace/inventory.html", context)


@login_required
def bulk_progress(request: HttpRequest) -> JsonResponse:
    """The latest bulk listing, as JSON: what the inventory page polls (404 for none)."""
    found = state(request)
    if found is None:
        return JsonResponse({"error": "no bulk listing was started"}, status=404)
    return JsonResponse(found)


@require_POST
@login_required
def bulk_list(request: HttpRequest) -> HttpResponse:
    """Start listing every item of mine at ``price``: 202 JSON, or back to the page for a
    form; 400 for a bad price or an empty inventory, 409 while one is running."""
    raw = request.POST.get("price", "").strip()
    price = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 12 else 0
    problem = None
    if not 1 <= price <= MAX_PRICE:
        problem = (400, f"A price is a whole number from 1 to {MAX_PRICE:,}.")
    elif not MARKET.inventory(me(request)):
        problem = (400, "You have no items to list.")
    elif (running := state(request)) is not None and not running["finished"]:
        problem = (409, "Your bulk listing is still running; wait for it to end.")
    wants_json = request.get_preferred_type(["text/html", "application/json"])
    if problem is not None:
        status, text = problem
        if wants_json == "application/json":
            return JsonResponse({"error": text}, status=status)
        messages.error(request, text)
        return redirect("inventory")
    metadata = {"started_by": request.user.get_username(), "from": "inventory page"}
    result = list_in_bulk.using(metadata=metadata).enqueue(me(request), price)  # type: ignore[attr-defined]
    request.session[SESSION_KEY] = result.id
    if wants_json == "application/json":
        return JsonResponse({"task_id": result.id}, status=202)
    messages.success(request, f"Listing all your items at {price}: watch the progress below.")
    return redirect("inventory")
