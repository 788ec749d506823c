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


def test_scripts_run_and_wait_after_loading_those_the_server_lost(r: redis.Redis) -> None:
    """A pipeline of scripts then ``WAIT``: those refused with NOSCRIPT are loaded and
    run again (each once), an error comes back in its place, and the acknowledgements
    of a server with no replica are 0."""
    client = get_client()
    failing = scripts.Script(
        "failing",
        "-- KEYS: 1) a key\n-- ARGV: none\n-- Returns: an error\nreturn redis.call('NOPE')",
    )
    r.script_flush()
    r.script_load(ECHO.source)  # one script known, the other not
    calls = [(ECHO, ["{k}a"], [1]), (failing, ["{k}b"], []), (ECHO, ["{k}c"], [3])]
    results, acknowledged = scripts.run_many_and_wait(client, calls, 1, 0.01)
    assert [results[0], results[2]] == [b"1", b"3"]
    assert isinstance(results[1], redis.ResponseError)
    assert acknowledged == 0
    r.script_flush()
    assert scripts.run_and_wait(client, (ECHO, ["{k}a"], ["x"]), 1, 0.01) == (b"x", 0)
    with pytest.raises(redis.ResponseError):
        scripts.run_and_wait(client, (failing, ["{k}b"], []), 1, 0.01)
