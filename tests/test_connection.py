from __future__ import annotations

import pytest
import redis
from django.test import override_settings
from redis.client import NEVER_DECODE

from conftest import single_server_only
from redis_components import scripts
from redis_components.connection import OneConnection, get_client, text
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
