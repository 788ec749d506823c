from __future__ import annotations

import pytest
import redis

from redis_components import scripts
from redis_components.connection import get_client


@pytest.mark.parametrize("name", scripts.available())
def test_every_script_has_its_header_and_compiles(name: str, r: redis.Redis) -> None:
    script = scripts.load(name)
    assert r.script_load(script.source) == script.sha


def test_a_script_without_header_is_refused() -> None:
    with pytest.raises(ValueError, match="KEYS"):
        scripts.Script("bad", "return 1")


ECHO = scripts.Script(
    "echo", "-- KEYS: 1) a key\n-- ARGV: 1) a value\n-- Returns: the value\nreturn ARGV[1]"
)


def test_noscript_falls_back_to_loading(r: redis.Redis) -> None:
    client = get_client()
    r.script_flush()
    assert ECHO(client, ["k"], ["hello"]) == b"hello"
    r.script_flush()
    assert scripts.run_many(client, [(ECHO, ["k"], [1]), (ECHO, ["k"], [2])]) == [b"1", b"2"]
    assert scripts.run_many(client, []) == []
