from __future__ import annotations

import pytest
from django.test import override_settings

from conftest import single_server_only
from redis_components.connection import get_client, text
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
