"""``manage.py demo`` (what ``make demo`` runs) leaves no process behind, however it stops.

Each test runs the real command with the demo's own settings: an embedded Redis in a
temporary data directory, the development server and a task worker.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLUSTER
from tests.processes import LoggedProcess, wait_until

pytestmark = [
    pytest.mark.skipif(
        CLUSTER, reason="the demo starts its own Redis; it is tested once, in the first pass"
    ),
    pytest.mark.skipif(
        not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc"
    ),
]


def server_port() -> int:
    """A free port below the kernel's ephemeral range: the demo's embedded Redis takes a
    free port from that range (as port 0 does), so the two can never be handed the same
    one between its probe and its use."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(10_000, low), 100):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port from 10000 to {low}")


class Demo(LoggedProcess):
    def __init__(self, tmp_path: Path) -> None:
        self.port = server_port()
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env.update(DJANGO_SETTINGS_MODULE="demo_project.settings", DEMO_DATA_DIR=str(tmp_path))
        self.tree: list[int] = []
        command = ["manage.py", "demo", "--port", str(self.port)]
        super().__init__(tmp_path / "demo.log", command, env)

    def serves(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=5) as page:
                return page.status == 200
        except OSError:
            return self.process.poll() is not None  # stop waiting: the output says why

    def started(self) -> list[int]:
        """Every process the demo started, theirs included: Redis, the development
        server, the worker supervisor and its worker process."""
        wait_until(self.serves, self.output, timeout=180)
        wait_until(lambda: len(descendants(self.process.pid)) >= 4, self.output)
        assert self.process.poll() is None, self.output()
        self.tree = descendants(self.process.pid)
        return self.tree


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = _fields(stat.read_text())
            pid, parent = fields[0], fields[3]
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(parent), []).append(int(pid))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _fields(stat: str) -> list[str]:
    """/proc/<pid>/stat's fields, the command name (which may hold spaces) as one."""
    pid, rest = stat.split(" (", 1)
    name, rest = rest.rsplit(") ", 1)
    return [pid, name, *rest.split()]


def alive(pid: int) -> bool:
    try:
        return _fields(Path(f"/proc/{pid}/stat").read_text())[2] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    running = Demo(tmp_path)
    yield running
    if running.process.poll() is None:
        os.killpg(running.process.pid, signal.SIGKILL)
        running.process.wait()
    for pid in filter(alive, running.tree):  # left behind by a failed test
        os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_the_server_the_worker_and_redis(demo: Demo) -> None:
    tree = demo.started()
    demo.signal(signal.SIGTERM)  # to the demo alone, not its group
    assert demo.process.wait(30) == 0, demo.output()
    assert "SIGTERM: stopping the server and the worker." in demo.output()
    assert "Stopped." in demo.output()
    wait_until(lambda: not any(map(alive, tree)), demo.output, timeout=15)


def test_a_killed_demo_leaves_no_process_behind(demo: Demo) -> None:
    tree = demo.started()
    demo.process.kill()
    demo.process.wait()
    wait_until(lambda: not any(map(alive, tree)), demo.output, timeout=30)
