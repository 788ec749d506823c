"""The demo site's pages: the market, inventories, notices, chats and the home page."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.text import Truncator
from django.views.decorators.http import require_POST

from redis_components import (
    Busy,
    GroupChat,
    Guild,
    LockScope,
    RecentContacts,
    get_client,
    redis_lock,
)
from redis_components.exceptions import ChatLimitReached, InvalidInput, LockNotAcquired

from .market import PURCHASE_LOCKS, Market, Purchase, item_name_problem
from .tasks import after_sale, sales, waiting_emails

MARKET = Market("main")
MAX_PRICE = 1_000_000
SORTS = {
    "price": lambda row: (row[2], row[0]),
    "-price": lambda row: (-row[2], row[0]),
    "item": lambda row: (row[0].casefold(), row[2]),
    "seller": lambda row: (row[3].casefold(), row[2]),
}

# (name, book section, what it does, the demo's pages that show it, or where to see it,
# what to click there)
COMPONENTS = [
    ("Autocomplete", "6.1", "A user's recent contacts, and a large guild searched by prefix.",
     [("Contacts", "contacts"), ("Guild", "guild")], "",
     "Type a few letters of a name: suggestions follow each key."),
    ("Distributed locks", "6.2", "Fine-grained locks with fencing tokens and renewing leases.",
     [("Market", "market")], "", "Buy an item: the listing's lock and yours, taken together."),
    ("Counting semaphores", "6.3", "Fair and basic semaphores that never exceed their limit.",
     [("Checkouts", "checkouts")], "",
     "Start 20 checkouts at once: at most 3 hold a slot, live; the rest wait their turn."),
    ("Task queues", "6.4", "Priorities, delayed tasks, workflows, at-least-once delivery, retries.",
     [("Notices", "notices")], "", "Buy an item, then follow its sale's workflow, step by step."),
    ("Task limits", "6.3, 6.4", "Rate and concurrency limits: at most 5 sold emails a second.",
     [("Market", "market"), ("Notices", "notices")], "",
     "Click Buy 10 at once: Notices lists the emails waiting their turn on the rate."),
    ("Pull messaging", "6.5", "Mailboxes and group chats with unread tracking.",
     [("Chats", "chats"), ("Notices", "notices")], "",
     "Open a chat in two tabs: a message shows in both within a second."),
    ("File distribution", "6.6", "Files streamed through a bounded buffer to many readers.",
     [("Catalogue", "catalogue")], "",
     "Click Publish my catalogue: 3 readers get the file block by block, live; then download it."),
]  # fmt: skip


def _redacted(url: str) -> str:
    """The Redis URL without its password."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        parts = parts._replace(netloc=netloc)
    return urlunsplit(parts)


def redis_status() -> dict[str, Any]:
    status: dict[str, Any] = {
        "url": _redacted(settings.REDIS_URL),
        "embedded": settings.REDIS_EMBEDDED,
    }
    try:
        info = get_client().info("server")
        memory = get_client().info("memory")
    except redis.RedisError as error:
        status["error"] = str(error)
    else:
        status["version"] = info.get("redis_version")
        status["mode"] = info.get("redis_mode")
        status["memory"] = memory.get("used_memory_human")
    return status


def home(request: HttpRequest) -> HttpResponse:
    return render(
        request, "marketplace/home.html", {"components": COMPONENTS, "redis": redis_status()}
    )


class DemoLoginView(LoginView):
    """Django's login, with the demo's users listed on the page."""

    template_name = "marketplace/login.html"
    next_page = "market"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        from .seed import DEMO_PASSWORD

        context = super().get_context_data(**kwargs)
        users = get_user_model()._default_manager.order_by("pk").values_list("username", flat=True)
        context.update(demo_users=list(users[:10]), demo_password=DEMO_PASSWORD)
        return context


def me(request: HttpRequest) -> int:
    """The logged-in user's id in the market: their Django user id.

    Nothing is written for a user the market has not seen (one not seeded): the market
    reads an id it does not know as someone with no funds and no items.
    """
    user_id: int = request.user.pk
    return user_id


# -- the market --------------------------------------------------------------------------


LISTINGS_PER_PAGE = 100
# "Buy 10 at once": ten sales queue ten sold emails at once, twice what the mail relay
# takes in a second, so the notices page shows the rest waiting on its rate.
BURST = 10


@login_required
def market(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:100]
    sort = request.GET.get("sort", "price")
    if sort not in SORTS:
        sort = "price"
    found = [row for row in MARKET.listings() if query.casefold() in row[0].casefold()]
    names = _usernames({seller for _, seller, _ in found})
    rows = [
        (item, seller, price, names.get(seller, f"user {seller}")) for item, seller, price in found
    ]
    rows.sort(key=SORTS[sort])
    page = Paginator(rows, LISTINGS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "rows": page.object_list,
        "page": page,
        "total": len(rows),
        "query": query,
        "sort": sort,
        "funds": MARKET.funds(me(request)),
        "me": request.user.pk,
        "burst": BURST,
    }
    return render(request, "marketplace/market.html", context)


def _usernames(ids: set[int]) -> dict[int, str]:
    """The names of the users ``ids`` (one query, for those users only)."""
    users = get_user_model()._default_manager.filter(pk__in=ids).values_list("pk", "username")
    return dict(users)


def _member_names(ids: set[str]) -> dict[str, str]:
    """The names of chat members (pks, as the chats keep them); a deleted user's is
    ``user <pk>``."""
    found = _usernames({int(pk) for pk in ids if pk.isdigit()})
    return {pk: found.get(int(pk), f"user {pk}") if pk.isdigit() else f"user {pk}" for pk in ids}


def _busy(busy: Busy) -> HttpResponse:
    """A purchase that could not get its locks: a clear message, or 409 for an API client."""
    request = busy.request
    assert request is not None
    if request.get_preferred_type(["text/html", "application/json"]) == "application/json":
        return LockScope.busy_response(busy)
    item = busy.kwargs.get("item", "this item")
    messages.warning(request, f"Someone else is buying {item} right now. Try again in a moment.")
    return redirect("market")


def _named_item(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Refuse an item name that no item can have before its lock's name is made of it."""

    @functools.wraps(view)
    def checked(request: HttpRequest, item: str, seller: int) -> HttpResponse:
        problem = item_name_problem(item)
        if problem is not None:
            messages.error(request, problem)
            return redirect("market")
        return view(request, item=item, seller=seller)

    return checked


@require_POST
@login_required
@_named_item
@redis_lock(*PURCHASE_LOCKS, timeout=10, blocking_timeout=2, on_busy=_busy)
def buy(request: HttpRequest, item: str, seller: int) -> HttpResponse:
    """Buy under the fine-grained locks: the listing's, and the buyer's own.

    The lock names are the market's templates, filled from the URL's ``item`` and
    ``seller`` and the request's ``{user}``: a withdraw of this listing takes the same.
    """
    seen = request.POST.get("price", "").strip()
    try:
        price = int(seen)
    except ValueError:
        problem = f", {seen!r}, is not a whole number" if seen else " was missing"
        messages.error(request, f"The price you saw{problem}; have another look.")
        return redirect("market")
    purchase = MARKET.purchase_under_lock(me(request), item, seller, price)
    if not purchase.ok:
        _refused(request, item, purchase)
        return redirect("market")
    name = _usernames({seller}).get(seller, f"user {seller}")
    after_sale(request, seller, item, purchase.price, name)
    RecentContacts().add(request.user, name)
    messages.success(
        request,
        f"You bought {item} from {name} for {purchase.price}. Your balance is {purchase.balance}.",
    )
    return redirect("market")


@require_POST
@login_required
def buy_many(request: HttpRequest) -> HttpResponse:
    """Buy the ``BURST`` cheapest listings of others at once, each as the Buy button
    buys one (under its two locks, then its sale's workflow): ``BURST`` sold emails
    queue at once, more than the mail relay's rate, and the notices page shows them wait.
    """
    buyer = me(request)
    offered = [row for row in MARKET.listings() if row[1] != buyer]  # cheapest first
    names = _usernames({seller for _, seller, _ in offered})
    bought = []
    for item, seller, price in offered:
        if len(bought) == BURST:
            break
        purchase = MARKET.purchase_item(buyer, item, seller, "fine", price)
        if purchase.outcome == "cannot pay":
            break  # the rest cost as much or more
        if purchase.ok:  # else sold, withdrawn or repriced meanwhile, or being bought now
            name = names.get(seller, f"user {seller}")
            after_sale(request, seller, item, purchase.price, name)
            RecentContacts().add(request.user, name)
            bought.append(item)
    if not bought:
        messages.error(
            request,
            "Nothing was bought: no one else has an item for sale that you can afford. "
            "Log in as someone else and sell a few from My items.",
        )
        return redirect("market")
    messages.success(
        request,
        f"You bought {len(bought)} items at once ({', '.join(bought)}). Your balance is "
        f"{MARKET.funds(buyer)}. The sellers' emails queue behind the mail relay's rate "
        "limit: watch them wait below.",
    )
    return redirect("notices")


def _refused(request: HttpRequest, item: str, purchase: Purchase) -> None:
    if purchase.outcome == "gone":
        messages.error(
            request, f"{item} is not for sale: it was sold or withdrawn, or never listed."
        )
    elif purchase.outcome == "price changed":
        messages.error(request, f"The price of {item} is now {purchase.price}. Have another look.")
    elif purchase.outcome == "cannot pay":
        messages.error(
            request,
            f"You cannot afford {item}: it costs {purchase.price} and you have {purchase.balance}.",
        )
    else:
        messages.error(request, f"{item} is your own item.")


# -- my inventory ----------------------------------------------------------------------


@require_POST
@login_required
def sell(request: HttpRequest) -> HttpResponse:
    item = request.POST.get("item", "")
    problem = item_name_problem(item)
    if problem is not None:
        messages.error(request, problem)
        return redirect("inventory")
    raw_price = request.POST.get("price", "").strip()
    plain = raw_price.isascii() and raw_price.isdigit() and len(raw_price) <= 12
    price = int(raw_price) if plain else 0
    if not 1 <= price <= MAX_PRICE:
        messages.error(request, f"A price is a whole number from 1 to {MAX_PRICE:,}.")
        return redirect("inventory")
    if MARKET.list_item(item, me(request), price, "fine"):
        messages.success(request, f"{item} is for sale at {price}.")
    else:
        messages.error(request, f"You do not have {item!r} to sell.")
    return redirect("inventory")


@require_POST
@login_required
def withdraw(request: HttpRequest) -> HttpResponse:
    """Take one of my listings off the market, under the listing's lock (as a purchase)."""
    item = request.POST.get("item", "")
    problem = item_name_problem(item)
    if problem is not None:
        messages.error(request, problem)
    else:
        try:
            withdrawn = MARKET.withdraw(item, me(request))
        except LockNotAcquired:
            messages.warning(request, f"Someone is buying {item} right now; try again.")
        else:
            if withdrawn:
                messages.success(request, f"{item} is back in your items.")
            elif item in MARKET.inventory(me(request)):
                messages.error(request, f"{item} is in your items, not for sale.")
            elif not MARKET.exists(item):
                messages.error(request, f"There is no item called {item}.")
            elif MARKET.seller_of(item) not in (None, me(request)):
                messages.error(request, f"{item} is not your listing.")
            else:
                messages.error(request, f"{item} is not for sale any more: it was sold.")
    return redirect("inventory")


# -- contacts and the guild --------------------------------------------------------------


@login_required
def contacts(request: HttpRequest) -> HttpResponse:
    """Recent contacts, and "message someone": a chat with one contact, picked by autocomplete."""
    if request.method == "POST":
        to = request.POST.get("to", "").strip()
        text = request.POST.get("message", "").strip()
        recipient = get_user_model()._default_manager.filter(username=to).first()
        if recipient is None:
            messages.error(request, f"There is no user called {Truncator(to).chars(40)!r}.")
        elif recipient.pk == request.user.pk:
            messages.error(request, "Pick someone other than yourself.")
        else:
            try:
                chat_id = GroupChat().create(request.user, [recipient], text)
            except InvalidInput as error:
                messages.error(request, f"That message cannot be sent: {error.problem}.")
            except ChatLimitReached as error:
                messages.error(
                    request,
                    f"You started many chats in the last minute; try again in "
                    f"{error.retry_after} s.",
                )
            else:
                RecentContacts().add(request.user, to)
                return redirect("chat", chat_id=chat_id)
    return render(
        request, "marketplace/contacts.html", {"contacts": RecentContacts().all(request.user)}
    )


@login_required
def guild(request: HttpRequest) -> HttpResponse:
    """The big guild, searched by prefix as you type."""
    from .seed import GUILD

    members = Guild(GUILD)
    picked = request.GET.get("member", "").strip()
    context = {
        "guild": GUILD,
        "size": len(members),
        "picked": picked,
        "is_member": bool(picked) and picked in members,
    }
    return render(request, "marketplace/guild.html", context)


# -- notices and chats -------------------------------------------------------------------


@login_required
def notices(request: HttpRequest) -> HttpResponse:
    from .models import Notice

    Notice.collect(request.user)
    context = {
        "notices": Notice.objects.filter(user=request.user).order_by("-created")[:100],
        "sales": sales(request),
        "trades": MARKET.trades(me(request)),
        "waiting": waiting_emails(),
        "burst": BURST,
    }
    return render(request, "marketplace/notices.html", context)


@login_required
def waiting(request: HttpRequest) -> JsonResponse:
    """The sold emails waiting now (queued, or held back by the mail relay's limit), as
    JSON: what the notices page polls."""
    return JsonResponse(waiting_emails())


@login_required
def chats(request: HttpRequest, chat_id: int | None = None) -> HttpResponse:
    """The chat page: my chats, and the one open (its messages arrive through the JSON views)."""
    listed = GroupChat().chat_list(request.user)  # two round trips, however many chats
    mine = {chat.chat_id: chat for chat in listed}
    # Chats know their members by pk; the page shows names (one query for them all).
    names = _member_names({member for chat in listed for member in chat.members})
    me = str(request.user.pk)

    def others(members: list[str]) -> list[str]:
        return sorted(names[member] for member in members if member != me)

    members: list[str] = []
    if chat_id is not None:
        if str(chat_id) not in mine:
            messages.error(request, f"You are not in chat {chat_id}.")
            return redirect("chats")
        members = others(mine[str(chat_id)].members)
    rows = [(chat.chat_id, others(chat.members) or ["only you"], chat.unread) for chat in listed]
    context = {"chats": rows, "chat_id": chat_id, "members": members}
    return render(request, "marketplace/chats.html", context)
