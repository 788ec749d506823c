"""The Redis client every component uses: the raw client of a django-redis cache.

Which cache is named by ``REDIS_COMPONENTS["CACHE_ALIAS"]``. The client may return
``bytes`` or ``str`` depending on the cache's ``decode_responses`` option; every
component reads through :func:`text` so both work.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Generator
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.sentinel
from django.conf import settings
from django_redis.client import DefaultClient
from redis import ConnectionPool, Redis
from redis.client import NEVER_DECODE, Pipeline, PubSub
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, ResponseError
from redis.sentinel import SentinelConnectionPool

from .conf import conf
from .exceptions import ConfigurationError


def _hiredis_packer() -> Callable[..., Any] | None:
    """hiredis's ``pack_command`` (the hiredis extra), or ``None``."""
    try:
        from hiredis import pack_command
    except ImportError:
        return None
    return pack_command


_hiredis_pack = _hiredis_packer()

T = TypeVar("T")

# alias -> (the CACHES setting it was found in, its client). get_client() is on every
# hot path, and Django's thread-local cache handler costs about as much as a Redis
# command; a new CACHES setting (override_settings makes one) is a new dict, which the
# identity check notices. redis-py clients are thread-safe and reconnect after a fork.
_clients: dict[str, tuple[object, Redis]] = {}


def get_client() -> Redis:
    """Return the raw redis-py client of the configured django-redis cache."""
    alias = conf.CACHE_ALIAS
    caches = settings.CACHES
    known = _clients.get(alias)
    if known is not None and known[0] is caches:
        return known[1]
    if alias not in caches:
        raise ConfigurationError(
            f"REDIS_COMPONENTS['CACHE_ALIAS'] is {alias!r}, but CACHES has no such entry."
        )
    from django_redis import get_redis_connection

    try:
        client: Redis = get_redis_connection(alias, write=True)
    except NotImplementedError:
        raise ConfigurationError(
            f"CACHES[{alias!r}] is not a django-redis cache "
            "(BACKEND must be 'django_redis.cache.RedisCache')."
        ) from None
    _clients[alias] = (caches, client)
    return client


# Connection settings that carry over from the cache's (sync) pool to an asyncio pool.
_ASYNC_KWARGS = (
    "host", "port", "path", "db", "username", "password", "client_name",
    "socket_timeout", "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options",
    "decode_responses", "encoding", "encoding_errors", "health_check_interval",
    "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname",
)  # fmt: skip
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


def get_async_client() -> redis.asyncio.Redis:
    """A ``redis.asyncio`` client for the same server and options as :func:`get_client`.

    One client (and connection pool) per event loop, since asyncio connections belong
    to the loop that opened them; close it with :func:`aclose_async_client` before the
    loop ends (an ASGI server's shutdown, the end of ``asyncio.run``).
    """
    sync = get_client()
    loop = asyncio.get_running_loop()
    clients = _async_clients.setdefault(loop, {})
    if isinstance(sync, RedisCluster):
        node = sync.get_default_node()
        options = sync.nodes_manager.connection_kwargs
        cache_key = (conf.CACHE_ALIAS, f"cluster {node.name} {sorted(options.items())!r}")
    else:
        options = sync.connection_pool.connection_kwargs
        cache_key = (conf.CACHE_ALIAS, repr(sorted(options.items())))
    client = clients.get(cache_key)
    if client is None:
        kwargs = {k: v for k, v in options.items() if k in _ASYNC_KWARGS}
        if isinstance(sync, RedisCluster):
            kwargs.pop("host", None)
            kwargs.pop("port", None)
            client = redis.asyncio.RedisCluster(host=node.host, port=node.port, **kwargs)
        elif isinstance(sync.connection_pool, SentinelConnectionPool):
            # Behind Sentinel: ask the same sentinels for the same master.
            sentinel_pool: Any = sync.connection_pool
            sentinels = [
                (
                    s.connection_pool.connection_kwargs["host"],
                    s.connection_pool.connection_kwargs["port"],
                )
                for s in sentinel_pool.sentinel_manager.sentinels
            ]
            # Typed from redis-py 8.2 on, untyped before: Any holds on both.
            sentinel_class: Any = redis.asyncio.sentinel.Sentinel
            manager = sentinel_class(sentinels, **kwargs)
            client = manager.master_for(sentinel_pool.service_name, **kwargs)
        else:
            kind = sync.connection_pool.connection_class.__name__
            connection_class = getattr(redis.asyncio.connection, kind, redis.asyncio.Connection)
            pool = redis.asyncio.ConnectionPool(connection_class=connection_class, **kwargs)
            client = redis.asyncio.Redis(connection_pool=pool)
        clients[cache_key] = client
    return client


async def aclose_async_client() -> None:
    """Close the asyncio clients that :func:`get_async_client` opened on the running loop."""
    for client in _async_clients.pop(asyncio.get_running_loop(), {}).values():
        if isinstance(client, redis.asyncio.RedisCluster):
            await client.aclose()
        else:
            await client.aclose(close_connection_pool=True)


class ClusterUnavailable(RedisClusterException, redis.exceptions.ConnectionError):
    """No Redis Cluster to use at the cache's ``LOCATION`` now: no node answers, or the
    nodes do not serve every slot yet (a cluster still starting), so a cluster client
    cannot be built. Raised by :func:`get_client` in place of redis-py's
    ``RedisClusterException`` (its cause), and a ``ConnectionError`` too: what waits for
    Redis to come back (``REDIS_DOWN``, ``rc_worker``) waits for the cluster to come up.
    """


class ClusterClient(DefaultClient):  # type: ignore[misc]
    """A django-redis client class whose raw client is a ``redis.cluster.RedisCluster``.

    ::

        CACHES = {"default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://10.0.0.1:7000/0",     # any node; the others are discovered
            "OPTIONS": {"CLIENT_CLASS": "redis_components.connection.ClusterClient"},
        }}

    ``OPTIONS["CONNECTION_POOL_KWARGS"]`` are passed to ``RedisCluster`` (for example
    ``decode_responses``). One cluster client per location and options is shared by all
    threads of a process (a cluster client is thread-safe).
    """

    _clusters: dict[tuple[str, str], RedisCluster] = {}

    def connect(self, index: int = 0) -> RedisCluster:
        url = self._server[index]
        options = self._params.get("OPTIONS", {}).get("CONNECTION_POOL_KWARGS", {})
        cache_key = (url, repr(sorted(options.items())))
        cluster = self._clusters.get(cache_key)
        if cluster is None:
            try:
                cluster = RedisCluster.from_url(url, **options)
            except RedisClusterException as error:  # (building it asks the nodes for the slots)
                raise ClusterUnavailable(str(error)) from error
            self._clusters[cache_key] = cluster
        return cluster

    def disconnect(self, index: int = 0, client: Any = None) -> None:
        """Leave the shared cluster client open; other caches and threads use it."""


def node_client(client: Any, key: str) -> Redis:
    """The client of the one node that serves ``key`` (``client`` itself unless a cluster).

    For a component whose keys all share one hash tag, this node client runs anything a
    single server can (pipelines of any command, TIME, Pub/Sub), which a cluster client
    does not in a pipeline.
    """
    if isinstance(client, RedisCluster):
        cluster: Any = client
        return cluster.get_redis_connection(cluster.get_node_from_key(key))  # type: ignore[no-any-return]
    return client  # type: ignore[no-any-return]


def private_client(client: Redis) -> Redis:
    """A client for the same server as ``client`` (not a cluster) with a pool of its own.

    Code that keeps a client to itself never reads a reply that someone else's command,
    interrupted between its send and its read, left on a shared pooled connection. A
    Sentinel pool's connections still ask the original pool where the master is.
    """
    pool = client.connection_pool
    own = ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    return Redis(connection_pool=own)


def server_of(client: Redis) -> tuple[Any, ...]:
    """Where ``client`` connects (its host and port, or its socket's path): equal for
    the clients of one server, and on a cluster for those of one node."""
    kwargs = client.connection_pool.connection_kwargs
    return (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"))


#: Errors that mean "Redis cannot be reached now": wait and try again. A Redis Cluster
#: answers ``CLUSTERDOWN`` while it elects a replica in the place of a dead master; its
#: client cannot be built before the cluster is up (:class:`ClusterUnavailable`), and
#: redis-py 8 fails its commands with ``RedisClusterUnreachableError`` once no node answers.
REDIS_DOWN = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    getattr(redis.exceptions, "RedisClusterUnreachableError", ClusterUnavailable),
)

#: An option of :meth:`OneConnection.execute_command`: what to do while the server works.
MEANWHILE = "meanwhile"


class OneConnection:
    """Commands sent down one connection of ``client``'s pool, kept by one thread.

    For a loop that sends one command at a time (a worker's fetch, one script call
    per task): it skips the client's layers (a pool checkout, retries, redis-py's
    instrumentation), about 20 µs per command. It has what
    :class:`~redis_components.scripts.Script` calls, ``execute_command`` and
    ``script_load`` (and ``pipeline``, its client's); replies are not passed through
    redis-py's response callbacks.
    The option :data:`MEANWHILE` of ``execute_command`` is a function called once the
    command is sent, before its reply is read: work done while the server runs it.
    A connection error closes the connection and propagates, never retried (a script
    may have run: the caller knows whether to repeat it); the next command takes a
    connection from the pool again. :meth:`close` gives the connection back.
    """

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._connection: Any = None
        self._retries = 0  # what the last connection's retry policy allows

    def check(self) -> None:
        """Let go of a connection that went stale while it was idle (the server closed
        it, or it holds data nobody asked for), as the pool checks one it lends: the
        next command connects again instead of failing."""
        connection = self._connection
        if connection is not None:
            try:
                stale = connection.can_read()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                stale = True
            if stale:
                self.close(broken=True)

    def retries(self) -> bool:
        """Whether the connection's own retry policy repeats a command that failed on a
        lost connection (redis-py's client does so on a new connection)."""
        return self._retries != 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.send(*args)
        meanwhile = options.get(MEANWHILE)
        if meanwhile is not None:
            try:
                meanwhile()
            except BaseException:
                self.close(broken=True)  # its reply is left unread
                raise
        return self.read(**options)

    def send(self, *args: Any) -> None:
        """Send a command; :meth:`read` reads its reply (the next command's comes after)."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self.client.connection_pool.get_connection()
            self._retries = connection.retry.get_retries()
        try:
            packed = _packed(args, connection.encoder)
            if packed is None:
                connection.send_command(*args)
            else:
                connection.send_packed_command([packed])
        except BaseException:
            self.close(broken=True)
            raise

    def read(self, **options: Any) -> Any:
        """The reply to the oldest command sent whose reply is unread."""
        connection = self._connection
        if connection is None:
            raise redis.exceptions.ConnectionError("the connection was closed with a reply unread")
        try:
            return connection.read_response(disable_decoding=bool(options.get(NEVER_DECODE)))
        except ResponseError:  # the server answered: the connection is sound
            raise
        except BaseException:
            # Broken, or a reply left unread by an interruption: it goes back closed, and
            # the next command takes one from the pool, which connects as the pool does
            # (behind Sentinel, it asks where the master is now).
            self.close(broken=True)
            raise

    def script_load(self, source: str) -> Any:
        return self.execute_command("SCRIPT", "LOAD", source)

    def pipeline(self, transaction: bool = True) -> Pipeline:
        """A pipeline of its client, on another connection of the pool (this one may
        have a reply unread: see :data:`MEANWHILE`)."""
        return self.client.pipeline(transaction=transaction)

    def close(self, *, broken: bool = False) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            if broken:
                connection.disconnect()
            self.client.connection_pool.release(connection)


def _packed(args: tuple[Any, ...], encoder: Any) -> bytes | None:
    """``args`` as the protocol's bytes, packed by hiredis, when they are all bytes, str
    and int (as a script call's are) and the command is one word: about 10 µs less
    than redis-py's packing of a 20-argument call, which encodes each one through its
    general encoder. ``None``: redis-py's own packing is used (no hiredis, other types)."""
    if _hiredis_pack is None or not isinstance(args[0], str) or " " in args[0]:
        return None
    encoding, errors = encoder.encoding, encoder.encoding_errors
    out = []
    for arg in args:
        kind = type(arg)
        if kind is bytes:
            out.append(arg)
        elif kind is str:
            out.append(arg.encode(encoding, errors))
        elif kind is int:
            out.append(b"%d" % arg)
        else:
            return None
    packed: bytes = _hiredis_pack(tuple(out))
    return packed


class _Kept:
    """A thread's kept connections (see :func:`kept`), one per client, for the last
    :data:`KEPT_CLIENTS` clients it used: the thread's local data holds them, so they
    are given back when the thread ends and the data is dropped."""

    def __init__(self) -> None:
        self.ones: dict[int, OneConnection] = {}  # by id(client): each holds its client
        self.pid = os.getpid()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # also while the interpreter stops
            for client_id in list(self.ones):
                self.drop(client_id)

    def drop(self, client_id: int) -> None:
        one = self.ones.pop(client_id)
        if self.pid == os.getpid():
            one.close()
            with _keeping:
                _kept_per_pool[one.client.connection_pool] -= 1


class _ThreadKept(threading.local):
    def __init__(self) -> None:
        self.kept = _Kept()


_thread = _ThreadKept()
_keeping = threading.Lock()
# How many threads of this process keep a connection of each pool.
_kept_per_pool: weakref.WeakKeyDictionary[ConnectionPool, int] = weakref.WeakKeyDictionary()
_kept_pid = 0
KEPT_SHARE = 10  # threads keep at most 1 / KEPT_SHARE of a pool's max_connections
KEPT_CLIENTS = 3  # a thread keeps a connection for at most this many clients


def kept(client: Any) -> OneConnection | None:
    """One connection of ``client``'s pool that this thread keeps for single commands,
    or ``None`` when the client cannot lend one so (a cluster, a pipeline, a
    single-connection client, client-side caching, a pool whose share of kept
    connections is taken).

    A command on a pooled client checks a connection out and back in (a lock, a
    ``select`` to find a stale reply, redis-py's instrumentation: about 30 µs, as much
    as the round trip itself); a kept connection skips all of it. It goes back to the
    pool when the thread ends, or when the thread has used :data:`KEPT_CLIENTS` other
    clients since; a forked child forgets its parent's. Threads keep at most a tenth
    of a pool's ``max_connections`` (redis-py's default is 100): the rest is lent per
    call as before. A thread that keeps one still borrows another for its other
    commands, so a pool that more threads than nine tenths of ``max_connections`` use
    at once may refuse one ("Too many connections") a little sooner than before: raise
    ``max_connections`` then.
    """
    global _kept_pid
    holder = _thread.kept
    pid = os.getpid()
    if holder.pid != pid:  # a forked child's copy of its parent's thread data
        holder.ones.clear()
        holder.pid = pid
    one = holder.ones.get(id(client))
    if one is not None:
        one.check()
        return one
    if not _can_keep(client):
        return None
    pool = client.connection_pool
    with _keeping:
        if _kept_pid != pid:  # a forked child: its parent's threads keep nothing here
            _kept_per_pool.clear()
            _kept_pid = pid
        if _kept_per_pool.get(pool, 0) >= pool.max_connections // KEPT_SHARE:
            return None
        _kept_per_pool[pool] = _kept_per_pool.get(pool, 0) + 1
    if len(holder.ones) >= KEPT_CLIENTS:
        holder.drop(next(iter(holder.ones)))  # the one kept longest
    one = holder.ones[id(client)] = OneConnection(client)
    return one


def _can_keep(client: Any) -> bool:
    if not isinstance(client, Redis) or isinstance(client, Pipeline):
        return False
    pool = client.connection_pool
    return (
        client.connection is None
        and type(pool) in (ConnectionPool, SentinelConnectionPool)
        and getattr(pool, "cache", None) is None
    )


def pubsub(client: Any) -> PubSub:
    """A Pub/Sub object for ``client``.

    On Redis Cluster, PUBLISH reaches every node, so a plain Pub/Sub connection to one
    node (the client's default) hears every channel, whatever slot its name hashes to.
    """
    if isinstance(client, RedisCluster):
        cluster: Any = client
        client = cluster.get_redis_connection(cluster.get_default_node())
    return client.pubsub()  # type: ignore[no-any-return]


def subscribe(pubsub: PubSub, channels: Collection[str], deadline: float) -> bool:
    """Subscribe ``pubsub`` to ``channels`` and wait until the server confirms each one,
    or until ``deadline`` (``time.monotonic()``); whether all were confirmed.

    A message published before the confirmation may not be heard: callers that must
    not miss one subscribe first, then read the state they wait for.
    """
    return run_steps(subscribing(pubsub, channels, deadline), None)


def subscribing(pubsub: Any, channels: Collection[str], deadline: float) -> Steps[bool]:
    """:func:`subscribe` as steps, for a Pub/Sub object of either kind of client."""
    if not channels:
        return True
    yield lambda _: pubsub.subscribe(*channels)
    confirmed = 0
    while confirmed < len(channels):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        message = yield listen(pubsub, left)
        if message is not None and message["type"] == "subscribe":
            confirmed += 1
    return True


def listen(pubsub: Any, timeout: float) -> Step:
    """The step that waits up to ``timeout`` seconds for a message on ``pubsub``."""
    return lambda _: pubsub.get_message(timeout=timeout)


def watching(
    deadline: float,
    channels: Collection[str],
    look: Callable[[Callable[[Collection[str]], Steps[bool]]], Steps[T]],
    enough: Callable[[T], bool],
) -> Steps[T]:
    """Steps that ``look`` until ``enough`` of what it returns, or until ``deadline``
    (the last look), waking whenever something is published on ``channels``.

    Every channel is subscribed (and confirmed) before the look that follows, so what
    is published in between wakes the loop. ``look(also)`` may listen to more channels
    with ``yield from also(channels)`` before it reads what they announce.
    """
    subscriber = yield pubsub
    try:
        subscribed = set(channels)

        def also(more: Collection[str]) -> Steps[bool]:
            new = set(more) - subscribed
            subscribed.update(new)
            return subscribing(subscriber, new, deadline)

        yield from subscribing(subscriber, subscribed, deadline)
        while True:
            seen = yield from look(also)
            remaining = deadline - time.monotonic()
            if enough(seen) or remaining <= 0:
                return seen
            yield listen(subscriber, remaining)
    finally:
        yield close_pubsub(subscriber)


def close_pubsub(pubsub: Any) -> Step:
    """The step that closes a Pub/Sub object of either kind of client."""
    return lambda _: pubsub.aclose() if hasattr(pubsub, "aclose") else pubsub.reset()


# A step is a function of a client that sends it commands: it returns the reply on a
# redis-py client, an awaitable of it on a ``redis.asyncio`` one. A generator of steps
# (receiving each reply) is then one body that runs on either (see ``twins``).
Step = Callable[[Any], Any]
Steps = Generator[Step, Any, T]


def pipelined(commands: Callable[[Any], object], transaction: bool = True) -> Step:
    """The step that sends what ``commands`` queues on a pipeline (MULTI/EXEC unless
    ``transaction`` is false) and returns its replies. A pipeline's methods are called
    one by one, never chained: an asyncio cluster's pipeline returns no pipeline."""

    def step(client: Any) -> Any:
        pipe = client.pipeline(transaction=transaction)
        commands(pipe)
        return pipe.execute()

    return step


def run_steps(steps: Steps[T], client: Any) -> T:
    """Run ``steps`` on a redis-py ``client``; what the generator returns.

    An exception a step raises is thrown into the generator (its ``finally`` may
    still take steps, such as closing a Pub/Sub)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = step(client), None
        except BaseException as exc:
            error = exc


async def arun_steps(steps: Steps[T], client: Any) -> T:
    """:func:`run_steps` on a ``redis.asyncio`` client: each step's reply awaited."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = step(client), None
            if inspect.isawaitable(reply):
                reply = await reply
        except BaseException as exc:
            error = exc


def rediscover(client: Any) -> None:
    """After a connection error, have a Redis Cluster client ask the nodes again which
    node serves which slots (a failover promotes a replica): a node's client found by
    :func:`node_client` goes on naming a dead master until then. Nothing for a single
    server, or while no node answers (the next error asks again)."""
    if isinstance(client, RedisCluster):
        # (No node answers, or the slots are not all served yet: RedisClusterException.)
        with contextlib.suppress(redis.exceptions.RedisError, RedisClusterException):
            client.nodes_manager.initialize()


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (sync or asyncio)."""
    return isinstance(client, (RedisCluster, redis.asyncio.RedisCluster))


def is_async(client: Any) -> bool:
    """Whether ``client`` is a ``redis.asyncio`` client (single server or cluster)."""
    return isinstance(client, (redis.asyncio.Redis, redis.asyncio.RedisCluster))


def text(value: Any) -> str:
    """A Redis reply as ``str``, whether the client decodes responses or not."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)
