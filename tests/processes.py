"""Real processes for concurrency tests.

Children are forked, so they inherit the test's Django settings (CACHES pointing at
the session's server); redis-py notices the new pid and opens fresh connections.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FORK = multiprocessing.get_context("fork")


def run_processes(
    target: Callable[..., object], args_list: Sequence[tuple[Any, ...]], timeout: float = 60
) -> None:
    """Run ``target(*args)`` in one process per args tuple; fail unless all exit with 0."""
    processes = [FORK.Process(target=target, args=args) for args in args_list]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    stuck = [process for process in processes if process.is_alive()]
    for process in stuck:
        process.kill()
        process.join()
    assert not stuck, f"{len(stuck)} of {len(processes)} processes did not finish in {timeout} s"
    codes = [process.exitcode for process in processes]
    assert codes == [0] * len(processes), f"exit codes: {codes}"


ROOT = Path(__file__).resolve().parent.parent


class LoggedProcess:
    """A command run from the project's root in its own process group, output in a file."""

    def __init__(self, log: Path, command: list[str], env: dict[str, str]) -> None:
        self.log = log
        with open(self.log, "wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, *command],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)


class WorkerProcess(LoggedProcess):
    """``python -m django rc_worker ...`` with the test settings and ``settings``
    (``REDIS_COMPONENTS``), and ``environment`` added to the process's."""

    def __init__(
        self,
        tmp_path: Path,
        args: list[str],
        settings: dict[str, object],
        environment: dict[str, str] | None = None,
    ) -> None:
        env = {**os.environ, **(environment or {})}
        env["RC_TEST_REDIS_COMPONENTS"] = json.dumps(settings)
        log = tmp_path / f"worker-{time.monotonic_ns()}.log"
        super().__init__(log, ["-m", "django", "rc_worker", *args], env)

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every worker process at once."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise AssertionError(f"rc_worker did not exit; its output:\n{self.output()}") from None


def wait_until(
    condition: Callable[[], object], what: Callable[[], str] | None = None, timeout: float = 30
) -> None:
    """Wait for ``condition``; ``timeout`` is a liveness bound, far above the expected time.

    ``what()`` says what was going on, in the failure's message.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out; {what() if what else 'no more detail'}"
        time.sleep(0.005)


@contextmanager
def running_worker(queues: list[str], **options: Any) -> Iterator[Any]:
    """A worker (``redis_components.tasks.worker.Worker``) looping in a thread of this
    process until the block ends."""
    from redis_components.tasks.worker import Worker

    worker = Worker(queues, **options)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(10)
        assert not thread.is_alive()
