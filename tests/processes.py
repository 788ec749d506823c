"""Real processes for concurrency tests.

Children are forked, so they inherit the test's Django settings (CACHES pointing at
the session's server); redis-py notices the new pid and opens fresh connections.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
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
