"""What the file commands share: sizes, logging, stop signals and the progress line."""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import OutputWrapper

from redis_components.files import ReceiveProgress, SendProgress

logger = logging.getLogger("redis_components.files")

UNITS = {
    "": 1, "b": 1,
    "k": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gib": 2**30, "gb": 10**9,
}  # fmt: skip
SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def size(value: str) -> int:
    """A size argument: bytes, or a number with a unit (KiB, MiB, GiB; KB, MB, GB; K, M, G)."""
    match = SIZE.fullmatch(value)
    unit = UNITS.get(match[2].lower()) if match else None
    if match is None or unit is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size such as 1GiB, 500MB or 131072")
    return int(float(match[1]) * unit)


def configure_logging(verbosity: int) -> None:
    """Log redis_components to stderr, unless the project (or a test runner) configured
    logging for it already. ``--verbosity`` 0 logs warnings, 1 adds info, 2 and 3 debug."""
    package = logging.getLogger("redis_components")
    if package.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s %(levelname)s [%(processName)s %(process)d] %(name)s: %(message)s"
        )
    )
    package.addHandler(handler)
    package.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))


@contextmanager
def stop_on_signals() -> Iterator[Callable[[], bool]]:
    """Yield a ``stop()`` that turns true after SIGINT or SIGTERM.

    The handlers only note the signal; the loops look at ``stop()`` between blocks and
    while waiting. Outside the main thread, signals cannot be handled: ``stop()`` stays
    false.
    """
    caught: list[int] = []

    def note(signum: int, frame: Any) -> None:
        caught.append(signum)

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = {number: signal.signal(number, note) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: bool(caught)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class ProgressLine:
    """One status line: redrawn in place on a terminal, logged every so often otherwise."""

    def __init__(
        self, stream: OutputWrapper, redraw_every: float = 0.1, log_every: float = 10
    ) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self.every = redraw_every if self.terminal else log_every
        self.last = time.monotonic()
        self.width = 0

    def show(self, line: str, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.every:
            return
        self.last = now
        if not self.terminal:
            logger.info(line)
            return
        self.stream.write("\r" + line.ljust(self.width), ending="\n" if final else "")
        self.stream.flush()
        self.width = len(line)


def megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"


def rate(count: int, seconds: float) -> str:
    return f"{count / 1e6 / seconds:,.1f} MB/s" if seconds > 0 else "- MB/s"


def sender_line(progress: SendProgress) -> str:
    done = progress.bytes_sent / progress.bytes_total if progress.bytes_total else 1.0
    bar = "#" * round(20 * done)
    line = (
        f"[{bar:.<20}] {100 * done:3.0f}%  {progress.files_sent}/{progress.files_total} files  "
        f"{megabytes(progress.bytes_sent)} of {megabytes(progress.bytes_total)}  "
        f"{rate(progress.bytes_sent, progress.elapsed)}  "
        f"in Redis {megabytes(progress.bytes_in_redis)}"
    )
    if progress.waiting:
        line += "  waiting for readers"
    if progress.stalled:
        line += f"  stalled: {', '.join(progress.stalled)}"
    if progress.dropped:
        line += f"  dropped: {', '.join(progress.dropped)}"
    return line


def receiver_line(progress: ReceiveProgress) -> str:
    line = (
        f"reader {progress.reader}: {progress.files_done} files  {megabytes(progress.bytes_read)}  "
        f"{progress.lines:,} lines  {rate(progress.bytes_read, progress.elapsed)}"
    )
    if progress.file is not None:
        line += f"  reading {progress.file[:40]}"
    return line
