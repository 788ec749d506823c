from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from redis_components.embedded import (
    EmbeddedRedis,
    EmbeddedRedisError,
    EmbeddedSentinelGroup,
    find_server_binary,
    shared_server,
)
from redis_components.exceptions import ConfigurationError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split()[2] != "Z"


def _wait_dead(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_binary_from_environment_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_server_binary()
    monkeypatch.setenv("REDIS_SERVER", real)
    assert find_server_binary() == real
    monkeypatch.setenv("REDIS_SERVER", "/nonexistent/redis-server")
    with pytest.raises(ConfigurationError, match="REDIS_SERVER"):
        find_server_binary()


def test_a_relative_binary_path_runs_from_the_servers_own_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = Path(find_server_binary())
    monkeypatch.chdir(real.parent)
    monkeypatch.setenv("REDIS_SERVER", f"./{real.name}")
    assert find_server_binary() == str(real)
    with EmbeddedRedis() as server, server.client() as client:
        assert client.ping()


def test_no_binary_anywhere_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(ConfigurationError, match=r"\[embedded\]"):
        find_server_binary()


def test_server_is_private_loopback_and_stops_cleanly() -> None:
    server = EmbeddedRedis().start()
    directory = server.directory
    assert directory is not None
    assert directory.is_dir()
    assert server.process is not None
    pid = server.process.pid
    client = server.client()
    try:
        assert server.port != 6379
        assert client.ping()
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        assert client.config_get("dir")["dir"] == str(directory.resolve())
        assert client.config_get("appendonly")["appendonly"] == "no"
        if server.unix_url:
            assert _ping(server.unix_url)
    finally:
        client.close()
        server.stop()
    assert _wait_dead(pid)
    assert not directory.exists()


def test_a_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    server = EmbeddedRedis(directory=tmp_path, config={"no-such-directive": "1"})
    with pytest.raises(EmbeddedRedisError, match="no-such-directive"):
        server.start()
    assert server.process is None


def test_persistent_server_keeps_data_across_restarts(tmp_path: Path) -> None:
    with EmbeddedRedis(directory=tmp_path, persistent=True) as server, server.client() as client:
        client.set("kept", "yes")
    with EmbeddedRedis(directory=tmp_path, persistent=True) as server, server.client() as client:
        assert client.get("kept") == b"yes"
    assert tmp_path.is_dir()  # a directory we were given is not removed


CHILD = textwrap.dedent(
    """
    import sys, time
    from redis_components.embedded import EmbeddedRedis, shared_server
    if sys.argv[1] == "private":
        server = EmbeddedRedis().start()
        print(server.process.pid, server.url, flush=True)
    else:
        url, started = shared_server(sys.argv[2])
        print(started, url, flush=True)
    time.sleep(60)
    """
)


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, text=True)


def _ping(url: str) -> bool:
    with redis.Redis.from_url(url) as client:
        return bool(client.ping())


def test_server_dies_with_the_process_that_started_it() -> None:
    with _child("private") as child:
        assert child.stdout is not None
        pid_text, url = child.stdout.readline().split()
        assert _ping(url)
        child.send_signal(signal.SIGKILL)
    assert _wait_dead(int(pid_text)), "redis-server outlived the process that started it"


def test_shared_server_is_started_once_per_data_directory(tmp_path: Path) -> None:
    with _child("shared", str(tmp_path)) as owner:
        assert owner.stdout is not None
        started, url = owner.stdout.readline().split()
        assert started == "True"
        try:
            assert shared_server(tmp_path) == (url, False)
            assert _ping(url)
        finally:
            owner.send_signal(signal.SIGTERM)


def test_a_sentinel_groups_replicas_have_their_copy_once_it_has_started() -> None:
    with (
        EmbeddedSentinelGroup(replicas=1, sentinels=1) as group,
        group.servers[0].client() as master,
    ):
        replication = master.info("replication")
        assert replication["connected_slaves"] == 1
        assert replication["slave0"]["state"] == "online"  # in sync, not still loading
        master.set("written", "now")
        assert master.wait(1, 5000) == 1  # (5 s: a bound for a loaded machine)


@pytest.mark.parametrize("args", [[], ["--cluster", "3"]], ids=["server", "cluster"])
def test_the_command_line_serves_until_ctrl_c_and_prints_the_settings(args: list[str]) -> None:
    command = [sys.executable, "-m", "redis_components.embedded", *args]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        shown = "".join(process.stdout.readline() for _ in range(10 if args else 9))
        found = re.search(r" at (redis://127\.0\.0\.1:\d+/0): in settings.py", shown)
        assert found is not None, shown
        url = found.group(1)
        assert f'"LOCATION": "{url}",' in shown
        assert ("ClusterClient" in shown) == bool(args)
        with redis.Redis.from_url(url) as client:
            assert client.info("cluster")["cluster_enabled"] == (1 if args else 0)
            run_id = client.info("server")["run_id"]
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    assert _run_id(url) != run_id  # stopped (its port may already serve another server)


def _run_id(url: str) -> str | None:
    try:
        with redis.Redis.from_url(url) as client:
            return str(client.info("server")["run_id"])
    except redis.ConnectionError:
        return None


def test_the_command_line_refuses_a_cluster_too_small() -> None:
    command = [sys.executable, "-m", "redis_components.embedded", "--cluster", "2"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "--cluster: a Redis Cluster needs at least 3 masters" in done.stderr
