"""Spans of locks and semaphores: an INTERNAL span ``lock`` (``semaphore``) from the
start of an acquisition to the release, or to the acquisition's end when it fails. What
an acquisition learns anyway (the fence, the permit, how long the holder's lease has
left) becomes its attributes: tracing adds no round trip. The ``redis_lock`` and
``redis_semaphore`` scopes (and ``with RedisLock(...)``) make the span current while
they hold it, so the protected code's spans are its children; a handle taken with
``acquire()`` may be released in another thread or task, so its span is never made
current.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

from . import SYSTEM, _tracer, logger, mode, recording

if TYPE_CHECKING:
    import weakref
    from collections.abc import Callable, Iterator
    from typing import Protocol, TypeVar

    Acquire = TypeVar("Acquire", bound=Callable[..., Any])
    Taken = TypeVar("Taken", bound="Holder")

    class Holder(Protocol):
        """A lock handle or a semaphore permit, as its span sees it."""

        released: bool

        @property
        def lost(self) -> bool: ...


class Hold:
    """The span of one lock or permit: ``kind`` is ``"lock"`` or ``"semaphore"``,
    ``owner`` the :class:`~.locks.RedisLock` or :class:`~.semaphores.RedisSemaphore`."""

    def __init__(self, kind: str, owner: Any, start_time: int | None = None) -> None:
        import time

        from opentelemetry import trace

        self.kind = kind
        self.prefix = f"{SYSTEM}.{kind}."
        self.started = start_time or time.time_ns()
        self.granted = 0  # when it was granted (ns), once it is
        attributes: dict[str, Any] = {"name": owner.name, "lease_ms": round(owner.timeout * 1000)}
        if kind == "semaphore":
            attributes.update(limit=owner.limit, fair=owner.fair)
        self.span = _tracer().start_span(
            kind,  # (not its name: a span's name stays one of a few, its name is an attribute)
            kind=trace.SpanKind.INTERNAL,
            attributes={self.prefix + name: value for name, value in attributes.items()},
            start_time=self.started,
        )
        self.token: object = None  # the context's token while the span is current
        self.lost = False

    @contextlib.contextmanager
    def acquiring(self) -> Iterator[None]:
        """Current while the acquisition runs (Redis's own spans are its children); an
        acquisition that raises ends it, with the error."""
        from opentelemetry import context, trace

        token = context.attach(trace.set_span_in_context(self.span))
        try:
            yield
        except BaseException as error:
            _quietly("failed acquisition", functools.partial(self.failed, error))
            raise
        finally:
            context.detach(token)

    def failed(self, error: BaseException) -> None:
        from opentelemetry import trace

        self.span.record_exception(error)
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        self.span.end()

    def settled(self, taken: Any, retry_after: float) -> None:
        """The acquisition's outcome: ``taken`` held from now on, or refused (``None``:
        ``retry_after`` is what the holder's lease had left)."""
        import time

        from opentelemetry import trace

        self.granted = time.time_ns()
        span = self.span
        span.set_attribute(self.prefix + "wait_ms", (self.granted - self.started) / 1e6)
        if taken is None:
            span.set_attribute(self.prefix + "retry_after_ms", round(retry_after * 1000))
            why = "busy" if self.kind == "lock" else "full"
            span.set_status(trace.Status(trace.StatusCode.ERROR, why))
            span.end()
        elif taken in _holds():  # (a reentrant lock's nested acquisition: one hold)
            span.set_attribute(self.prefix + "reentrant", True)
            span.end()
        else:
            if self.kind == "lock":
                span.set_attribute(self.prefix + "fence", taken.fence)
            else:
                span.set_attribute(self.prefix + "permit", taken.token)
                if taken.semaphore.fair:
                    span.set_attribute(self.prefix + "counter", taken.counter)
            _holds()[taken] = self

    def lease_lost(self) -> None:
        """The ``lease lost`` event (how long it had been held), and the status ERROR."""
        import time

        from opentelemetry import trace

        self.lost = True
        held_ms = (time.time_ns() - self.granted) / 1e6
        self.span.add_event("lease lost", {self.prefix + "held_ms": held_ms})
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, "lease lost"))

    def enter(self) -> None:
        from opentelemetry import context, trace

        self.token = context.attach(trace.set_span_in_context(self.span))

    def leave(self) -> None:
        """Stop being current, where :func:`entered` made it so."""
        from opentelemetry import context, trace

        if self.token is not None and trace.get_current_span() is self.span:
            context.detach(self.token)  # type: ignore[arg-type]
            self.token = None


@functools.cache
def _holds() -> weakref.WeakKeyDictionary[Any, Hold]:
    """The open span of each lock handle and permit held (while tracing is on)."""
    import weakref

    return weakref.WeakKeyDictionary()


def _quietly(what: str, action: Callable[[], object]) -> None:
    try:
        action()
    except Exception:  # (tracing's errors never stop a lock or a permit)
        logger.exception("The span of a %s is incomplete: tracing failed", what)


def _start(kind: str, owner: Any) -> Hold | None:
    try:
        return Hold(kind, owner)
    except Exception:
        logger.exception("No span for %s %r: tracing failed", kind, owner.name)
        return None


def acquisition(kind: str) -> Callable[[Acquire], Acquire]:
    """Trace a lock's or semaphore's acquire loop, sync or async: a method ``(blocking,
    blocking_timeout)`` that returns what it took (or ``None``) and the seconds the
    holder's lease has left. Off, it costs one check of a cached setting."""

    def decorate(acquire: Acquire) -> Acquire:
        import inspect

        if inspect.iscoroutinefunction(acquire):

            @functools.wraps(acquire)
            async def atraced(owner: Any, *args: Any) -> Any:
                hold = _start(kind, owner) if recording() else None
                if hold is None:
                    return await acquire(owner, *args)
                with hold.acquiring():
                    found = await acquire(owner, *args)
                _quietly(kind, functools.partial(hold.settled, *found))
                return found

            return atraced  # type: ignore[return-value]

        @functools.wraps(acquire)
        def traced(owner: Any, *args: Any) -> Any:
            hold = _start(kind, owner) if recording() else None
            if hold is None:
                return acquire(owner, *args)
            with hold.acquiring():
                found = acquire(owner, *args)
            _quietly(kind, functools.partial(hold.settled, *found))
            return found

        return traced  # type: ignore[return-value]

    return decorate


def at_once(take: Acquire) -> Acquire:
    """Trace a function that takes several locks in one round trip (a list of the locks
    in, their handles or ``None`` out): each lock's span starts where it did."""

    @functools.wraps(take)
    def traced(locks: Any) -> Any:
        if not recording():
            return take(locks)
        import time

        started = time.time_ns()
        taken = take(locks)
        if taken is not None:
            for lock, handle in zip(locks, taken, strict=True):
                _quietly("lock", functools.partial(_settle, lock, handle, started))
        return taken

    return traced  # type: ignore[return-value]


def _settle(lock: Any, handle: Any, started: int) -> None:
    Hold("lock", lock, started).settled(handle, 0.0)


def entered(taken: Taken) -> Taken:
    """Make the span of ``taken`` (a lock handle or permit a scope holds) current until
    its release; returns ``taken``. Not where the scope re-entered a reentrant lock held
    already (by a scope, or by ``acquire()``): its end does not release it."""
    hold = None if mode() is None else _holds().get(taken)
    if hold is not None and hold.token is None and getattr(taken, "depth", 1) <= 1:
        _quietly("scope", hold.enter)
    return taken


def releasing(taken: Holder) -> None:
    """Before a release's round trip: the span is current no more (even if the release
    fails, the scope that made it current has ended)."""
    hold = None if mode() is None else _holds().get(taken)
    if hold is not None:
        _quietly("release", hold.leave)


def stopped(taken: Holder) -> None:
    """``taken`` was found lost (an event on its span) or was released (its span ends)."""
    hold = None if mode() is None else _holds().get(taken)
    if hold is None:
        return
    if taken.lost and not hold.lost:
        _quietly("lost lease", hold.lease_lost)
    if taken.released:
        _holds().pop(taken, None)
        _quietly("release", hold.leave)
        _quietly("release", hold.span.end)
