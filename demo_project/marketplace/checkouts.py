"""Checkouts under a counting semaphore: the demo's payment provider takes at most
``SLOTS`` at once.

A checkout holds one permit of the ``payment-provider`` semaphore (``RedisSemaphore``,
fair: the longest-waiting checkout gets the next free slot) while it "pays", which takes
``PAY_SECONDS``. The checkouts page starts a load of many at once (threads of the web
process, each a checkout) and polls the slots held now, so a visitor sees at most
``SLOTS`` held and the rest waiting their turn. One load runs at a time.

A load's progress is one hash (``demo:checkouts``): how many were started, are paying
(hold a permit), are done, and gave up waiting; the most permits seen held at once
(``peak``). A checkout that has paid stops counting as paying before it gives its slot
back, so paying never counts more than the slots; it counts as done once the slot is
free (in between, for one round trip, it counts as waiting). Starting a load and
recording a peak are each one script, so two loads cannot start together and a peak is
never lowered.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from redis_components import RedisSemaphore, get_client

SEMAPHORE = "payment-provider"
SLOTS = 3  # checkouts the payment provider takes at once
PAY_SECONDS = 1.0  # how long one checkout holds its slot
WAIT_SECONDS = 60.0  # how long a checkout waits for a slot before it gives up
LOAD = 20  # checkouts the page's button starts
MOST = 50  # the most checkouts one load may start
PROGRESS = "demo:checkouts"

# Start a load of ARGV[1] checkouts unless one is running: 1, or 0 when one is. The
# progress expires in ARGV[2] seconds, after every checkout has ended (a web process
# stopped mid-load leaves none running for ever).
START = """
local s = redis.call('HMGET', KEYS[1], 'started', 'done', 'gave_up')
local running = (tonumber(s[1]) or 0) - (tonumber(s[2]) or 0) - (tonumber(s[3]) or 0)
if running > 0 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'started', ARGV[1], 'done', 0, 'gave_up', 0, 'paying', 0, 'peak', 0)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
# Raise the peak to ARGV[1] if it is higher.
PEAK = """
if tonumber(ARGV[1]) > (tonumber(redis.call('HGET', KEYS[1], 'peak')) or 0) then
  redis.call('HSET', KEYS[1], 'peak', ARGV[1])
end
return 0
"""


def semaphore() -> RedisSemaphore:
    return RedisSemaphore(SEMAPHORE, limit=SLOTS, timeout=PAY_SECONDS * 10)


def start_load(count: int) -> bool:
    """Start ``count`` checkouts at once, each in a thread; False if a load is running."""
    ends = round(WAIT_SECONDS + 2 * PAY_SECONDS + 60)
    if not get_client().register_script(START)([PROGRESS], [count, ends]):
        return False
    for _ in range(count):
        threading.Thread(target=checkout, daemon=True, name="demo checkout").start()
    return True


def checkout() -> None:
    """One checkout: wait for a slot of the payment provider, pay, give the slot back."""
    client = get_client()
    permit = semaphore().acquire(blocking=True, blocking_timeout=WAIT_SECONDS)
    if permit is None:
        client.hincrby(PROGRESS, "gave_up", 1)
        return
    try:
        client.hincrby(PROGRESS, "paying", 1)
        client.register_script(PEAK)([PROGRESS], [semaphore().holders()])
        time.sleep(PAY_SECONDS)
    finally:
        # Not paying before the slot is free: the next holder counts itself paying at once.
        client.hincrby(PROGRESS, "paying", -1)
        permit.release()
        client.hincrby(PROGRESS, "done", 1)


def slots() -> dict[str, Any]:
    """The slots held now (the semaphore's count), and the load's progress: how many are
    paying, waiting, done or gave up (one snapshot). Two reads."""
    found = get_client().hgetall(PROGRESS)
    progress = {_text(name): int(value) for name, value in found.items()}
    started, done = progress.get("started", 0), progress.get("done", 0)
    gave_up, paying = progress.get("gave_up", 0), progress.get("paying", 0)
    return {
        "slots": SLOTS,
        "held": semaphore().holders(),
        "paying": paying,
        "waiting": started - done - gave_up - paying,
        "started": started,
        "done": done,
        "gave_up": gave_up,
        "peak": progress.get("peak", 0),
        "running": started - done - gave_up > 0,
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- views ------------------------------------------------------------------------------


@login_required
def checkouts(request: HttpRequest) -> HttpResponse:
    context = {
        "now": slots(),
        "slot_range": range(SLOTS),
        "load": LOAD,
        "pay_seconds": PAY_SECONDS,
        "semaphore": SEMAPHORE,
    }
    return render(request, "marketplace/checkouts.html", context)


@login_required
def checkout_slots(request: HttpRequest) -> JsonResponse:
    """The slots held now, as JSON: what the checkouts page polls."""
    return JsonResponse(slots())


@require_POST
@login_required
def checkout_load(request: HttpRequest) -> HttpResponse:
    """Start a load of ``count`` checkouts (default ``LOAD``): 202 JSON, or back to the
    page for a form; 400 JSON for a count that is not 1 to ``MOST``, 409 JSON while a
    load is running."""
    raw = request.POST.get("count", str(LOAD)).strip()
    count = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 3 else 0
    if not 1 <= count <= MOST:
        return JsonResponse({"error": f"count must be a whole number from 1 to {MOST}"}, status=400)
    if not start_load(count):
        return JsonResponse({"error": "a load is running; wait for it to end"}, status=409)
    if request.get_preferred_type(["text/html", "application/json"]) == "application/json":
        return JsonResponse({"started": count, "slots": SLOTS}, status=202)
    messages.success(request, f"{count} checkouts started: watch the slots.")
    return redirect("checkouts")
