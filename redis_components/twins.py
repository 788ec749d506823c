"""A method that talks to Redis and its asyncio twin, from one body.

The body is a generator of steps (:data:`~redis_components.connection.Step`: a function
of a client that sends it commands), which receives each step's reply. :func:`twins`
makes two methods of it: ``name`` runs the steps on :func:`~.connection.get_client`,
``aname`` awaits them on :func:`~.connection.get_async_client`. Input is checked, keys
are built and replies are read in that one body, so the two cannot drift apart::

    def _leave(self, name: str) -> Steps[bool]:
        \"\"\"Remove ``name``; False if it was not a member.\"\"\"
        return bool((yield lambda client: client.zrem(self.key, _member(name))))

    leave, aleave = twins(_leave)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from .connection import Steps, arun_steps, get_async_client, get_client, run_steps

S = TypeVar("S")
P = ParamSpec("P")
T = TypeVar("T")


def twins(
    steps: Callable[Concatenate[S, P], Steps[T]],
) -> tuple[Callable[Concatenate[S, P], T], Callable[Concatenate[S, P], Coroutine[Any, Any, T]]]:
    """The method ``steps`` stands for (its name without the leading ``_``) and its
    ``a``-prefixed asyncio twin, each with the docstring of ``steps``."""
    name = steps.__name__.lstrip("_")

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_steps(steps(self, *args, **kwargs), get_client())

    async def amethod(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await arun_steps(steps(self, *args, **kwargs), get_async_client())

    _named(method, steps, name)
    _named(amethod, steps, f"a{name}")
    amethod.__doc__ = f"The asyncio twin of :meth:`{name}`.\n\n{steps.__doc__ or ''}"
    return method, amethod


def threaded(function: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """The asyncio twin of a long-running loop that takes ``stop`` (a callable): the loop
    runs in a worker thread (its callbacks are called there), and cancelling the awaiting
    task stops it as ``stop()`` returning true does, and waits for it to return."""

    async def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        cancelled = threading.Event()
        stop: Callable[[], bool] = kwargs.get("stop") or cancelled.is_set  # type: ignore[assignment]
        kwargs["stop"] = lambda: cancelled.is_set() or stop()
        work = asyncio.ensure_future(asyncio.to_thread(function, *args, **kwargs))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancelled.set()
            with contextlib.suppress(Exception):
                await work
            raise

    _named(twin, function, f"a{function.__name__}")
    twin.__doc__ = f"The asyncio twin of :func:`{function.__name__}`.\n\n{function.__doc__}"
    return twin


def _named(function: Callable[..., Any], origin: Callable[..., Any], name: str) -> None:
    functools.update_wrapper(function, origin)
    function.__name__ = name
    function.__qualname__ = f"{origin.__qualname__.rpartition('.')[0]}.{name}".lstrip(".")
