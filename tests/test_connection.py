from __future__ import annotations

import gc
import multiprocessing
import socket
import threading
from collections.abc import Callable

import pytest
import redis
from django.test import override_settings
from redis.client import NEVER_DECODE

from conftest import single_server_only
from redis_components import scripts
from redis_components.connection import KEPT_CLIENTS, OneConnection, get_client, kept, text
from redis_components.embedded import EmbeddedRedis
from redis_components.exceptions import ConfigurationError


def test_client_is_the_cache_client_on_the_test_server(redis_server: EmbeddedRedis) -> None:
    client = get_client()
    client.set("probe", "1")
    assert redis_server.client().get("probe") == b"1"


def test_decode_responses_follows_the_cache(redis_mode: str) -> None:
    get_client().set("probe", "x")
    assert get_client().get("probe") == (b"x" if redis_mode == "bytes" else "x")


def test_unknown_alias_is_a_configuration_error() -> None:
    with (
        override_settings(REDIS_COMPONENTS={"CACHE_ALIAS": "missing"}),
        pytest.raises(ConfigurationError, match="missing"),
    ):
        get_client()


def test_non_django_redis_cache_is_a_configuration_error() -> None:
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=caches), pytest.raises(ConfigurationError, match="django-redis"):
        get_client()


def test_text_accepts_both_reply_types() -> None:
    assert text(b"caf\xc3\xa9") == "café"
    assert text("café") == "café"
    assert text(3) == "3"


@single_server_only
def test_the_client_follows_a_change_of_caches(redis_server: EmbeddedRedis) -> None:
    client = get_client()
    assert get_client() is client
    other = {
        "default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    with override_settings(CACHES=other):
        moved = get_client()
        assert moved is not client
        assert moved.connection_pool.connection_kwargs["port"] == 1
    back = get_client()
    assert back.connection_pool.connection_kwargs["port"] == redis_server.port
    assert get_client() is back


@single_server_only
def test_one_connection_reports_a_lost_connection_once_then_connects_again(
    r: redis.Redis,
) -> None:
    """A worker's loop sends its fetch down one connection: an error is never retried
    behind its back (a script may have run), and the next command opens a new one."""
    held = OneConnection(get_client())
    first = held.execute_command("CLIENT", "ID")
    r.client_kill_filter(_id=first)
    with pytest.raises(redis.exceptions.ConnectionError):
        held.execute_command("PING")
    second = held.execute_command("CLIENT", "ID")
    assert second != first
    held.close()


@single_server_only
def test_one_connection_runs_scripts_the_server_forgot(r: redis.Redis) -> None:
    held = OneConnection(get_client())
    source = "-- KEYS: none\n-- ARGV: 1) any\n-- Returns: ARGV 1\nreturn ARGV[1]"
    script = scripts.Script("probe", source)
    assert script(held, [], ["é"], raw=True) == "é".encode()
    r.script_flush()
    assert script(held, [], ["é"], raw=True) == "é".encode()
    assert held.execute_command("ECHO", "x", **{NEVER_DECODE: True}) == b"x"
    held.close()


@single_server_only
def test_one_connection_does_the_work_meanwhile_once(r: redis.Redis) -> None:
    """A script's ``meanwhile`` runs once it is sent and before its reply is read, once,
    even when the server had forgotten the script and it is sent again."""
    held = OneConnection(get_client())
    source = "-- KEYS: none\n-- ARGV: 1) any\n-- Returns: ARGV 1\nreturn ARGV[1]"
    script = scripts.Script("probe", source)
    done: list[str] = []
    assert script(held, [], ["a"], raw=True, meanwhile=lambda: done.append("a")) == b"a"
    r.script_flush()
    assert script(held, [], ["b"], raw=True, meanwhile=lambda: done.append("b")) == b"b"
    assert done == ["a", "b"]
    held.close()


# A thread's kept connection (connection.kept): scripts skip the pool's checkout.

PROBE = scripts.Script("probe", "-- KEYS: none\n-- ARGV: none\n-- Returns: 1\nreturn 1")


def _client(redis_server: EmbeddedRedis, **options: object) -> redis.Redis:
    return redis.Redis(port=redis_server.port, **options)  # type: ignore[arg-type]


def _kept_id(client: redis.Redis) -> int:
    """The id of the connection this thread keeps for ``client``, once a script ran."""
    assert PROBE(client, []) == 1
    one = kept(client)
    assert one is not None
    return int(one.execute_command("CLIENT", "ID"))


def _kept_id_of_port(port: int) -> int:
    """:func:`_kept_id` of the first client made for ``port`` in this process."""
    return _kept_id(_CLIENTS.setdefault(port, redis.Redis(port=port)))


_CLIENTS: dict[int, redis.Redis] = {}


def _in_thread(work: Callable[[], object]) -> object:
    found: list[object] = []
    thread = threading.Thread(target=lambda: found.append(work()))
    thread.start()
    thread.join()
    return found[0]


@single_server_only
def test_a_thread_runs_its_scripts_on_one_kept_connection(
    redis_server: EmbeddedRedis, r: redis.Redis
) -> None:
    client = _client(redis_server, retry=None)
    mine = _kept_id(client)
    assert _kept_id(client) == mine
    assert client.client_id() != mine  # the pool does not lend it to others
    assert _in_thread(lambda: _kept_id(client)) != mine  # another thread keeps its own
    # Closed while idle (a server's idle timeout, a restart): the next call connects
    # again, as the pool does for a connection it lends, retries or not.
    r.client_kill_filter(_id=mine)
    assert _kept_id(client) != mine
    assert kept(client.pipeline()) is None
    assert kept(_client(redis_server, single_connection_client=True)) is None
    first = kept(client)
    for _ in range(KEPT_CLIENTS):  # a thread keeps one for its last few clients only
        assert PROBE(_client(redis_server), []) == 1
    assert kept(client) is not first  # it was given back to make room, and taken anew


def _lost_while_running(client: redis.Redis, r: redis.Redis) -> None:
    """Run a script on ``client``'s kept connection while the server is paused, and
    shut that connection down meanwhile: its reply is lost."""
    one = kept(client)
    assert one is not None
    one.check()  # connects
    connection = one._connection

    def drop() -> None:
        connection._sock.shutdown(socket.SHUT_RDWR)

    r.execute_command("CLIENT", "PAUSE", 500)
    threading.Timer(0.2, drop).start()
    PROBE(client, [])


@single_server_only
def test_a_kept_connection_lost_mid_call_is_retried_as_the_client_retries(
    redis_server: EmbeddedRedis, r: redis.Redis
) -> None:
    """A reply lost with the connection: repeated on another connection only where the
    client's retry policy says so (redis-py's ``Redis()`` does; a pool made from a URL,
    django-redis's, does not)."""
    retrying = _client(redis_server)
    assert PROBE(retrying, []) == 1
    _lost_while_running(retrying, r)  # returns: repeated once the pause ended
    once = _client(redis_server, retry=None)
    assert PROBE(once, []) == 1
    with pytest.raises(redis.exceptions.ConnectionError):
        _lost_while_running(once, r)
    assert PROBE(once, []) == 1


@single_server_only
def test_kept_connections_go_back_when_their_threads_end(redis_server: EmbeddedRedis) -> None:
    """An ended thread's connection is free again, and threads keep at most a tenth of a
    pool: the others' commands are lent one per call."""
    client = _client(redis_server, max_connections=20)
    for _ in range(20):  # twenty threads, one after the other: none leaks its connection
        _in_thread(lambda: PROBE(client, []))
    gc.collect()
    pool = client.connection_pool
    lent = [pool.get_connection() for _ in range(20)]  # "Too many connections" if leaked
    for connection in lent:
        pool.release(connection)
    # Eighteen threads at once on a pool of twenty: two keep one, all borrow per call.
    errors: list[BaseException] = []
    start = threading.Barrier(18)

    def busy() -> None:
        start.wait()
        try:
            for _ in range(200):
                PROBE(client, [])
                client.get("x")
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=busy) for _ in range(18)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@single_server_only
def test_a_forked_child_does_not_use_its_parents_kept_connection(
    redis_server: EmbeddedRedis,
) -> None:
    client = _CLIENTS[redis_server.port] = _client(redis_server)  # the child inherits it
    parent = _kept_id(client)
    child = multiprocessing.get_context("fork").Pool(1)
    try:
        assert child.apply(_kept_id_of_port, (redis_server.port,)) != parent
    finally:
        child.close()
        child.join()
    assert _kept_id(client) == parent  # the parent's is untouched


@single_server_only
def test_a_held_connection_packs_commands_as_redis_py_does(r: redis.Redis) -> None:
    """OneConnection packs a script call's bytes, str and int with hiredis (when it is
    there); other types and commands of two words take redis-py's own packing. Either
    way the bytes are redis-py's, and the server reads them."""
    from redis.connection import Connection

    from redis_components import connection as connection_module

    packer = Connection()._command_packer
    encoder = Connection().encoder
    call = ("EVALSHA", "a" * 40, 2, "k:{x}", "k:{x}:2", b"\xff\x00 raw", "caf\u00e9", "", 0, -7)
    packed = connection_module._packed(call, encoder)
    if connection_module._hiredis_pack is None:
        assert packed is None
        print("hiredis is not installed: redis-py packs every command")
    else:
        assert packed == b"".join(packer.pack(*call))
    for other in [("SET", "k", 1.5), ("SET", "k", True), ("SCRIPT LOAD", "return 1")]:
        assert connection_module._packed(other, encoder) is None
    one = OneConnection(r)
    try:
        assert one.execute_command("ECHO", "caf\u00e9") in (b"caf\xc3\xa9", "caf\u00e9")
        assert one.execute_command("ECHO", b"\xff\x00") == b"\xff\x00"
        assert int(one.execute_command("INCRBY", "{test}:packed", 42)) == 42
    finally:
        one.close()
