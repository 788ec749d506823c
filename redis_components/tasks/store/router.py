"""The router of homes under every facet of the task store: which client serves a home,
pipelines over homes grouped by node, script runs, durable writes (``WAIT`` for
replicas), and reading a cluster's map again when a node's client meets a stale one."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import redis
from redis.client import NEVER_DECODE

from ... import scripts
from ...conf import conf
from ...connection import REDIS_DOWN, server_of
from ..messages import validate_queue
from . import layout


def raw(client: Any, *command: Any, **options: Any) -> Any:
    """Run a command whose reply holds payloads, which may not be UTF-8: never decoded.
    ``options`` go to redis-py's reply parser (``withscores=True`` for WITHSCORES)."""
    return client.execute_command(*command, **options, **{NEVER_DECODE: True})


# What a call through a node's client meets when the cluster's map of slots it was given
# is out of date: the node is gone, is being replaced, or serves other slots now.
_STALE_NODES = (*REDIS_DOWN, redis.exceptions.MovedError, redis.exceptions.ReadOnlyError)


_F = TypeVar("_F", bound=Callable[..., Any])


def _finding_nodes_again(method: _F) -> _F:
    """``method`` of a router that, when a node's client meets a stale map of the slots
    (a lost connection, ``CLUSTERDOWN``, ``MOVED``), has a Redis Cluster's client read it
    again before the error goes on, so that the next call after a failover reaches the
    promoted replica. A router given its clients (a worker's) leaves it to the worker,
    which does so outside its locks."""

    @functools.wraps(method)
    def finding(router: Router, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(router, *args, **kwargs)
        except _STALE_NODES as error:
            mine = router._client is None and router._at is None
            if mine and not getattr(error, "nodes_found_again", False):
                layout.find_nodes_again()
                error.nodes_found_again = True  # type: ignore[union-attr]
            raise

    return cast("_F", finding)


class Router:
    """The clients of the task system's homes, and how a facet runs commands over them:
    ``Router()`` uses the task system's client; a worker gives its own (``client``, and
    ``at`` for any other home). It holds no state of its own."""

    def __init__(self, client: Any = None, at: Callable[[str], Any] | None = None) -> None:
        self._client = client
        self._at = at

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each public method of a facet finds a cluster's nodes again on a stale map."""
        super().__init_subclass__(**kwargs)
        for name, method in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(method):
                setattr(cls, name, _finding_nodes_again(method))

    @property
    def client(self) -> Any:
        """The client for the registry's home: the given one, else ``at``'s, else the
        task system's (looked up each time: on a cluster its node may move)."""
        if self._client is not None:
            return self._client
        return layout.tasks_client() if self._at is None else self._at(layout.registry())

    def at(self, head: str) -> Any:
        """The client for the home ``head`` (:attr:`client` for the registry's, unless
        ``at`` was given)."""
        if self._at is not None:
            return self._at(head)
        return self.client if head == layout.registry() else layout.tasks_client(head)

    def node_of(self, head: str) -> str:
        """Where the home ``head`` is: its node's host and port, or its socket's path."""
        host, port, path = server_of(layout.tasks_client(head))
        return path or f"{host}:{port}"

    def current_id(self, task_id: str) -> str:
        """The id the task ``task_id`` has now: the one migration.py gave it in its
        queue's home, for an id of the shared home; else ``task_id`` itself."""
        if layout.shared_home() is None or layout.task_home(task_id) != layout.registry():
            return task_id
        moved = raw(self.client, "HGET", layout.result_key(task_id), "moved_to")
        return moved.decode("utf-8", "replace") if moved else task_id

    def _on(self, script_keys: Sequence[str]) -> Any:
        """The client for a script whose keys are ``script_keys`` (all of one home)."""
        return self.at(layout.head_of(script_keys[0])) if script_keys else self.client

    def _homes(self) -> list[str]:
        return layout.homes(self.known_queue_names)

    def _by_client(self, heads: Sequence[str]) -> list[tuple[Any, list[int]]]:
        """The clients of the homes ``heads``, each with the positions of its heads in
        ``heads`` (on a cluster, one client per node, whatever the homes there)."""
        clients: dict[str, Any] = {}
        by_client: dict[int, tuple[Any, list[int]]] = {}
        for i, head in enumerate(heads):
            if head not in clients:
                clients[head] = self.at(head)
            client = clients[head]
            by_client.setdefault(id(client), (client, []))[1].append(i)
        return list(by_client.values())

    def _each_home(self, commands: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Run ``commands`` (each: the head of its home, then the command), never decoded,
        in one pipeline per client of their homes: their replies, in order."""
        found: list[Any] = [None] * len(commands)
        for client, indexes in self._by_client([head for head, _ in commands]):
            pipe = client.pipeline(transaction=False)
            for i in indexes:
                raw(pipe, *commands[i][1])
            for i, reply in zip(indexes, pipe.execute(), strict=True):
                found[i] = reply
        return found

    def _run_each(self, calls: Sequence[scripts.Call]) -> list[Any]:
        """Run ``calls`` (each in one home) in one pipeline per client of their homes:
        their replies, in order. A script's error is raised once all have run."""
        found: list[Any] = [None] * len(calls)
        for client, indexes in self._by_client([layout.head_of(call[1][0]) for call in calls]):
            replies = scripts.run_many(client, [calls[i] for i in indexes])
            for i, reply in zip(indexes, replies, strict=True):
                found[i] = reply
        for reply in found:
            if isinstance(reply, Exception):
                raise reply
        return found

    def _run(
        self, call: scripts.Call, *, raw: bool = False, meanwhile: Callable[[], None] | None = None
    ) -> Any:
        script, script_keys, args = call
        return script(self._on(script_keys), script_keys, args, raw=raw, meanwhile=meanwhile)

    def _run_durable(
        self, call: scripts.Call, done: str, replicas: int | None = None
    ) -> tuple[Any, str]:
        """Run a script that creates or re-queues tasks, then (with ``QUEUE_WAIT_REPLICAS``,
        or ``replicas``) ``WAIT`` for that many replicas to have its writes: its reply, and
        what went wrong ("" when nothing did) in a sentence that starts with ``done``."""
        if replicas is None:
            replicas = conf.QUEUE_WAIT_REPLICAS or 0
        if not replicas:
            return self._run(call), ""
        timeout = conf.QUEUE_WAIT_TIMEOUT
        reply, acknowledged = scripts.run_and_wait(self._on(call[1]), call, replicas, timeout)
        if acknowledged >= replicas:
            return reply, ""
        return reply, (
            f"{done}, but {acknowledged} of {replicas} replicas acknowledged it within "
            f"{timeout:g} s"
        )

    @_finding_nodes_again
    def known_queue_names(self, extra: Iterable[str] = ()) -> set[str]:
        """Queues some worker has served, plus ``extra`` (names that are not text are skipped)."""
        names = set(extra)
        for name in raw(self.client, "SMEMBERS", layout.queues_key()):
            with contextlib.suppress(ValueError):  # UnicodeDecodeError too
                names.add(validate_queue(name.decode()))
        return names
