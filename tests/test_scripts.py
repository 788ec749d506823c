from __future__ import annotations

import re

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


def test_scripts_run_and_wait_after_loading_those_the_server_lost(r: redis.Redis) -> None:
    """A pipeline of scripts then ``WAIT``: those refused with NOSCRIPT are loaded and
    run again, each once; a script's error comes back in its place; a server with no
    replica acknowledges none."""
    client = get_client()
    count = scripts.Script(
        "count",
        "-- KEYS: 1) a counter\n-- ARGV: none\n-- Returns: its count\n"
        "return redis.call('INCR', KEYS[1])",
    )
    failing = scripts.Script(
        "failing",
        "-- KEYS: 1) a key\n-- ARGV: none\n-- Returns: an error\nreturn redis.call('NOPE')",
    )
    r.script_flush()
    r.script_load(ECHO.source)  # one script known, the others not
    calls = [(ECHO, ["{k}a"], [1]), (count, ["{k}n"], []), (failing, ["{k}b"], [])]
    results, acknowledged = scripts.run_many_and_wait(client, calls, 1, 0.01)
    assert results[:2] == [b"1", 1]
    assert not isinstance(results[2], redis.exceptions.NoScriptError)
    assert re.search(r"Unknown (Redis )?command", str(results[2]))
    assert acknowledged == 0
    assert int(r.get("{k}n")) == 1  # run once
    r.script_flush()
    assert scripts.run_and_wait(client, (count, ["{k}n"], []), 1, 0.01) == (2, 0)
    with pytest.raises(redis.ResponseError, match=r"Unknown (Redis )?command"):
        scripts.run_and_wait(client, (failing, ["{k}b"], []), 1, 0.01)
