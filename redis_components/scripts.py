"""Lua scripts: loaded once from ``lua/*.lua`` and run with EVALSHA.

Each script file starts with a header that states its contract::

    -- KEYS: 1) the lock key  2) ...
    -- ARGV: 1) the owner token  2) ...
    -- Returns: 1 when ..., 0 when ...

Scripts receive every key through ``KEYS`` (never built inside Lua), so they work
on Redis Cluster when their keys share a hash tag. A script is sent with EVALSHA;
if the server does not know it yet (``NOSCRIPT``: first use, a restart, a failover
or ``SCRIPT FLUSH``) it is loaded and the call repeated, which is safe because a
script that was not found did not run.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Callable, Sequence
from functools import cache, partial
from importlib import resources
from typing import Any

from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as LostConnection
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as LostReply

from .connection import MEANWHILE, Step, Steps, arun_steps, is_async, is_cluster, kept, run_steps

LUA_DIR = resources.files("redis_components") / "lua"
HEADER_FIELDS = ("-- KEYS:", "-- ARGV:", "-- Returns:")

Arg = str | int | float | bytes


class Script:
    """One Lua script, identified by its SHA1, runnable on sync and async clients."""

    def __init__(self, name: str, source: str) -> None:
        header = itertools.takewhile(lambda line: line.startswith("--"), source.splitlines())
        lines = list(header)
        for field in HEADER_FIELDS:
            if not any(line.startswith(field) for line in lines):
                raise ValueError(f"lua/{name}.lua: the header has no {field!r} line")
        self.name = name
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"<Script {self.name} {self.sha[:8]}>"

    def __call__(
        self,
        client: Any,
        keys: Sequence[str],
        args: Sequence[Arg] = (),
        *,
        raw: bool = False,
        meanwhile: Callable[[], None] | None = None,
    ) -> Any:
        """Run the script on a (sync) redis-py client.

        ``raw``: return the reply's strings as bytes even on a decoding client (for
        replies that may hold bytes that are not UTF-8). ``meanwhile``: for a
        :class:`~redis_components.connection.OneConnection` only, called while the
        server runs the script (once the first try is sent).
        """
        options: dict[str, Any] = {NEVER_DECODE: True} if raw else {}
        if meanwhile is not None:
            options[MEANWHILE] = meanwhile
            return self._run(client, keys, args, options)
        one = kept(client)
        if one is None:
            return self._run(client, keys, args, options)
        try:
            return self._run(one, keys, args, options)
        except (LostConnection, LostReply):
            if not one.retries():
                raise
        # The kept connection broke (and was closed): the client's own path repeats the
        # call on another, as the connection's retry policy would have.
        return self._run(client, keys, args, options)

    def _run(
        self, client: Any, keys: Sequence[str], args: Sequence[Arg], options: dict[str, Any]
    ) -> Any:
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args, **options)
        except NoScriptError:
            options.pop(MEANWHILE, None)
            client.script_load(self.source)
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args, **options)

    async def run_async(self, client: Any, keys: Sequence[str], args: Sequence[Arg] = ()) -> Any:
        """Run the script on a ``redis.asyncio`` client."""
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)


Call = tuple[Script, Sequence[str], Sequence[Arg]]


def run_many(client: Any, calls: Sequence[Call]) -> list[Any]:
    """Run several scripts in one pipeline round trip (not a transaction).

    The results come back in order; an error raised by a script is returned in its
    place, as redis-py does with ``raise_on_error=False``. Calls refused with
    NOSCRIPT did not run, so they alone are repeated after loading their scripts.

    On Redis Cluster (whose pipelines refuse EVALSHA) the calls are grouped by the node
    that serves their keys, one pipeline per node: a round trip per node involved.
    """
    if not calls:
        return []
    if not isinstance(client, RedisCluster):
        return _pipelined(client, calls)
    cluster: Any = client
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i, (_, keys, _) in enumerate(calls):
        node = cluster.get_node_from_key(keys[0])
        groups.setdefault(node.name, (cluster.get_redis_connection(node), []))[1].append(i)
    results: list[Any] = [None] * len(calls)
    for node_client, indexes in groups.values():
        for i, result in zip(
            indexes, _pipelined(node_client, [calls[i] for i in indexes]), strict=True
        ):
            results[i] = result
    return results


def run_and_wait(client: Any, call: Call, replicas: int, timeout: float) -> tuple[Any, int]:
    """Run one script, then ``WAIT`` for ``replicas`` replicas to have its writes
    (:func:`run_many_and_wait` of one call, whose error is raised). Returns the
    script's result and how many replicas acknowledged it within ``timeout`` seconds."""
    [result], acknowledged = run_many_and_wait(client, [call], replicas, timeout)
    if isinstance(result, Exception):
        raise result
    return result, acknowledged


def run_many_and_wait(
    client: Any, calls: Sequence[Call], replicas: int, timeout: float
) -> tuple[list[Any], int]:
    """Run scripts whose keys are all on one node in one pipeline, then ``WAIT`` for
    ``replicas`` replicas to have their writes.

    The ``WAIT`` goes down the scripts' connection in the same round trip (it covers
    the writes of its own connection). Calls refused with NOSCRIPT did not run: they
    alone are repeated after loading their scripts, with a ``WAIT`` of their own.
    Returns the results in order (an error in its place) and how many replicas
    acknowledged all of them within ``timeout`` seconds (at most ``replicas``).
    """
    if isinstance(client, RedisCluster):
        cluster: Any = client
        client = cluster.get_redis_connection(cluster.get_node_from_key(calls[0][1][0]))
    results: list[Any] = [None] * len(calls)
    acknowledged = replicas
    todo = list(range(len(calls)))
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for i in todo:
            script, keys, args = calls[i]
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, max(1, round(timeout * 1000)))
        *replies, acknowledged_now = pipe.execute(raise_on_error=False)
        if not all(isinstance(reply, NoScriptError) for reply in replies):  # (else no writes)
            # (A WAIT refused, as by a master demoted meanwhile, counts as none: the
            # scripts' own errors say why.)
            ok = not isinstance(acknowledged_now, Exception)
            acknowledged = min(acknowledged, int(acknowledged_now) if ok else 0)
        for i, reply in zip(todo, replies, strict=True):
            results[i] = reply
        todo = [i for i in todo if isinstance(results[i], NoScriptError)]
        if not todo or attempt:
            break
        for script in {calls[i][0] for i in todo}:
            client.script_load(script.source)
    return results, acknowledged


async def arun_and_wait(client: Any, call: Call, replicas: int, timeout: float) -> tuple[Any, int]:
    """:func:`run_and_wait` on a ``redis.asyncio`` client (not a cluster client: its
    pipelines do not keep the WAIT on the script's connection)."""
    script, keys, args = call
    for _ in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, max(1, round(timeout * 1000)))
        result, acknowledged = await pipe.execute(raise_on_error=False)
        if not isinstance(result, NoScriptError):
            break
        await client.script_load(script.source)
    if isinstance(result, Exception):
        raise result
    return result, int(acknowledged)


def _pipelined(client: Any, calls: Sequence[Call]) -> list[Any]:
    return run_steps(_pipelined_steps(calls), client)


def _pipelined_steps(calls: Sequence[Call]) -> Steps[list[Any]]:
    def send(calls: Sequence[Call]) -> Step:
        def step(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for script, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            return pipe.execute(raise_on_error=False)

        return step

    results: list[Any] = yield send(calls)
    missing = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
    if missing:
        for script in {calls[i][0] for i in missing}:
            yield partial(_load, script)
        replies = yield send([calls[i] for i in missing])
        for i, result in zip(missing, replies, strict=True):
            results[i] = result
    return results


def _load(script: Script, client: Any) -> Any:
    return client.script_load(script.source)


async def arun_many(client: Any, calls: Sequence[Call]) -> list[Any]:
    """:func:`run_many` on a ``redis.asyncio`` client. On Redis Cluster the calls go
    concurrently, each on its own (a round trip each, at once)."""
    if not calls:
        return []
    if not is_cluster(client):
        return await arun_steps(_pipelined_steps(calls), client)
    runs = (script.run_async(client, keys, args) for script, keys, args in calls)
    results = await asyncio.gather(*runs, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, ResponseError):
            raise result  # (a lost connection, as run_many raises it)
    return results


def step(call: Call) -> Step:
    """The step that runs one script on either kind of client."""
    script, keys, args = call
    return lambda client: (
        script.run_async(client, keys, args) if is_async(client) else script(client, keys, args)
    )


def many(calls: Sequence[Call]) -> Step:
    """The step that runs several scripts as :func:`run_many` does, on either kind of
    client."""
    return lambda client: arun_many(client, calls) if is_async(client) else run_many(client, calls)


INCLUDE = "-- @include "


@cache
def load(name: str) -> Script:
    """The script in ``lua/<name>.lua`` (read once per process).

    A line ``-- @include <lib>`` is replaced by ``lua/lib/<lib>.lua``: functions that
    several scripts share (the server sees one script, as if written out). A library may
    include another; each is written out once, where it is first included.
    """
    return compose(name, (LUA_DIR / f"{name}.lua").read_text("utf-8"))


def compose(name: str, source: str) -> Script:
    """A script of ``source`` with its ``-- @include`` lines written out, as :func:`load`
    reads ``lua/<name>.lua``."""
    return Script(name, _expand(source, set()))


def _expand(source: str, included: set[str]) -> str:
    """``source`` with its includes written out (those not in ``included`` already)."""
    parts = []
    for line in source.splitlines(keepends=True):
        if not line.startswith(INCLUDE):
            parts.append(line)
            continue
        lib = line.removeprefix(INCLUDE).strip()
        if lib not in included:
            included.add(lib)
            parts.append(_expand((LUA_DIR / "lib" / f"{lib}.lua").read_text("utf-8"), included))
    return "".join(parts)


def available() -> list[str]:
    """The names of every script shipped in ``lua/``."""
    return sorted(
        entry.name.removesuffix(".lua")
        for entry in LUA_DIR.iterdir()
        if entry.name.endswith(".lua")
    )
