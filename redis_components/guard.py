"""What ``redis_lock`` and ``redis_semaphore`` share: a context manager (sync and async)
and a decorator that fills name templates from the call and answers busy views.

A guard takes something (locks, a permit) before the block or call and gives it back
after. When it cannot take it in time, the context manager raises, and the decorator
calls ``on_busy(busy)`` or, on a Django view, answers with the guard's busy status
(409 for locks, 429 for semaphores) and ``Retry-After``. On a view, a Redis that cannot
be reached to take it is a 503 with ``Retry-After``, not an exception.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import redis
from django.utils.translation import gettext_lazy
from redis.exceptions import RedisClusterException

from .exceptions import InvalidInput, RedisComponentsError
from .keys import validate_name

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

logger = logging.getLogger(__name__)

# Redis could not be reached: a view answers 503 and asks to come back this much later.
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, RedisClusterException)
UNAVAILABLE_RETRY_AFTER = 5  # seconds
UNAVAILABLE_MESSAGE = gettext_lazy("Redis is unavailable; try again shortly.")

# What each guard (by id) has entered and not yet exited, per thread and per asyncio
# task: one guard object shared by threads or tasks (a module-level
# ``redis_lock("report")`` used in ``with``) gives each exit back its own lock or permit.
# An exit in another context than its entry (``asyncio.wait_for(guard.__aenter__())``
# on Python < 3.12, a generator closed by another thread) falls back to the guard's
# own list: the last one entered.
_entered: ContextVar[dict[int, tuple[Any, ...]] | None] = ContextVar(
    "rc_guard_entered", default=None
)


@dataclass(frozen=True)
class Busy:
    """What ``on_busy`` receives when a lock or permit could not be taken in time."""

    names: tuple[str, ...]
    retry_after: float  # seconds until the current holder's lease ends (0 if unknown)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    request: HttpRequest | None = None
    held: str | None = None  # which of the names someone else holds, when known

    @property
    def name(self) -> str:
        """The name that was busy: of several locks, the one held by someone else."""
        return self.held if self.held is not None else self.names[0]


class Guard(ABC, Generic[T]):
    """Take ``T`` around a block (``with``, ``async with``) or a call (as a decorator)."""

    kind = "lock"  # the JSON key that names what was busy
    busy_status = 409
    busy_message = gettext_lazy(
        "This is being changed by another request right now; try again shortly."
    )
    # The error for a name template the call cannot fill: (message, name) -> exception.
    error: Callable[[str, str], RedisComponentsError]

    def __init__(self, names: Sequence[str], on_busy: Callable[[Busy], Any] | None) -> None:
        if not names:
            raise InvalidInput("names", "give at least one name")
        for name in names:
            validate_name(name, "name")
        self.names = tuple(names)
        self.on_busy = on_busy
        self._held: list[T] = []  # everything entered and not exited, in every context

    @abstractmethod
    def take(self, names: Sequence[str]) -> T | Busy: ...

    @abstractmethod
    async def atake(self, names: Sequence[str]) -> T | Busy: ...

    @abstractmethod
    def give_back(self, taken: T, ok: bool) -> None:
        """Release; ``ok`` is False when an exception is already on its way."""

    @abstractmethod
    async def agive_back(self, taken: T, ok: bool) -> None: ...

    @abstractmethod
    def not_taken(self, busy: Busy) -> RedisComponentsError:
        """The exception a context manager raises when busy."""

    # -- context manager -----------------------------------------------------------

    def __enter__(self) -> T:
        taken = self.take(self.names)
        if isinstance(taken, Busy):
            raise self.not_taken(taken)
        self._push(taken)
        return taken

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.give_back(self._pop(), exc_type is None)

    async def __aenter__(self) -> T:
        taken = await self.atake(self.names)
        if isinstance(taken, Busy):
            raise self.not_taken(taken)
        self._push(taken)
        return taken

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        await self.agive_back(self._pop(), exc_type is None)

    def _push(self, taken: T) -> None:
        self._held.append(taken)
        entered = _entered.get() or {}
        _entered.set({**entered, id(self): (*entered.get(id(self), ()), taken)})

    def _pop(self) -> T:
        entered = dict(_entered.get() or {})
        if id(self) not in entered:  # entered in another context
            return self._held.pop()
        *rest, taken = entered.pop(id(self))
        if rest:
            entered[id(self)] = tuple(rest)
        _entered.set(entered)
        self._held.remove(taken)
        return taken  # type: ignore[no-any-return]

    # -- decorator -----------------------------------------------------------------

    def __call__(self, func: F) -> F:
        signature = inspect.signature(func)

        def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Busy:
            """The call, as on_busy would see it (names filled in, retry_after unknown)."""
            request = _find_request(args)
            try:
                names = tuple(fill(t, signature, args, kwargs, request) for t in self.names)
            except KeyError as missing:
                raise self.error(
                    f"A name template in {self.names!r} needs {missing}, "
                    "which the call does not provide",
                    self.names[0],
                ) from None
            return Busy(names, 0.0, args, kwargs, request)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    call = prepare(args, kwargs)
                except InvalidInput as error:
                    return self._refused(args, error)
                try:
                    taken = await self.atake(call.names)
                except UNAVAILABLE as error:
                    return self._unavailable(call, error)
                if isinstance(taken, Busy):
                    result = self._when_busy(call, taken)
                    return await result if inspect.isawaitable(result) else result
                ok = False
                try:
                    value = await func(*args, **kwargs)
                    ok = True
                    return value
                finally:
                    await self.agive_back(taken, ok)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                call = prepare(args, kwargs)
            except InvalidInput as error:
                return self._refused(args, error)
            try:
                taken = self.take(call.names)
            except UNAVAILABLE as error:
                return self._unavailable(call, error)
            if isinstance(taken, Busy):
                return self._when_busy(call, taken)
            ok = False
            try:
                value = func(*args, **kwargs)
                ok = True
                return value
            finally:
                self.give_back(taken, ok)

        return wrapper  # type: ignore[return-value]

    def _when_busy(self, call: Busy, busy: Busy) -> Any:
        """What a call that found its names busy returns (see ``on_busy``)."""
        busy = Busy(call.names, busy.retry_after, call.args, call.kwargs, call.request, busy.held)
        if self.on_busy is not None:
            return self.on_busy(busy)
        if busy.request is not None:
            return self.busy_response(busy)
        raise self.not_taken(busy)

    def _unavailable(self, call: Busy, error: Exception) -> HttpResponse:
        """A view that could not reach Redis to take its lock or permit."""
        if call.request is None:
            raise error
        logger.warning("%s %r: Redis is unavailable: %s", self.kind, call.names, error)
        body = {"error": str(UNAVAILABLE_MESSAGE)}
        response = _respond(call.request, 503, body)
        response["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER)
        return response

    @staticmethod
    def _refused(args: tuple[Any, ...], error: InvalidInput) -> HttpResponse:
        """A view whose arguments make a bad name (too long, a control character)."""
        request = _find_request(args)
        if request is None:
            raise error
        return _respond(request, 400, {"error": str(error), "field": error.field})

    @classmethod
    def busy_response(cls, busy: Busy) -> HttpResponse:
        """The busy status with ``Retry-After``: JSON if the client prefers it, else text."""
        assert busy.request is not None
        body = {"error": str(cls.busy_message), cls.kind: busy.name}
        response = _respond(busy.request, cls.busy_status, body)
        response["Retry-After"] = str(max(1, math.ceil(busy.retry_after)))
        return response


def _respond(request: HttpRequest, status: int, body: dict[str, str]) -> HttpResponse:
    """``body`` as JSON if the client prefers it, else its ``error`` as a short text."""
    from django.http import HttpResponse, JsonResponse

    if request.get_preferred_type(["application/json", "text/html"]) == "application/json":
        return JsonResponse(body, status=status)
    return HttpResponse(body["error"], status=status, content_type="text/plain; charset=utf-8")


def _find_request(args: tuple[Any, ...]) -> HttpRequest | None:
    from django.http import HttpRequest

    # A function view gets the request first; a method (class-based view) second.
    for arg in args[:2]:
        if isinstance(arg, HttpRequest):
            return arg
    return None


def fill(
    template: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    request: HttpRequest | None,
) -> str:
    """Fill ``{field}``s in a name template from the call's bound arguments.

    On a view, ``{user}`` is the request's user id ("anonymous" when logged out),
    unless the view has an argument of that name. A missing field raises ``KeyError``.
    """
    fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    if not fields:
        return template
    bound = signature.bind_partial(*args, **kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    if request is not None and "user" not in values:
        user = getattr(request, "user", None)
        values["user"] = user.pk if user is not None and user.is_authenticated else "anonymous"
    try:
        filled = template.format_map(values)
    except (AttributeError, IndexError) as error:
        raise KeyError(str(error)) from None
    return validate_name(filled, "name")
