"""File distribution: readers reading log files through Redis, against reading them from disk.

    .venv/bin/python benchmarks/files.py [--megabytes 200] [--files 20] [--readers 3] [--repeat 3]

Access-log lines (about 150 bytes each) are generated into a temporary directory, which
is removed afterwards. Every reader calls a no-op handler for each line, as text (UTF-8).

- **local disk**: N processes at once, each reading every file with ``open()`` (or
  ``gzip.open()``) and iterating its lines, as each reader would with the files on its
  own disk (they are in the page cache: both sides read from memory).
- **through Redis**: N reader processes (``receive_files``) and the sender
  (``send_files``, in this process), with the default block size (128 KiB). A reader's
  rate runs from its first byte to its last file, so it includes any time spent
  waiting for the sender. The sender's fill rate is the bytes it stored over the time
  from its start until it had announced the last file; a reader's drain rate, the same
  bytes over its own time.

Scenarios, each run ``--repeat`` times (the table shows medians):

1. plain files, default limit (1 GiB: everything fits, the sender never waits), the
   readers reading while the sender sends: the whole pipeline;
2. the same, but the readers start once every file is in Redis: what readers alone do;
3. plain files, a limit of a tenth of the data (or two files, if more): the sender
   waits for the slowest reader;
4. gzipped files, default limit, readers and sender together.
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, setup_django, start_redis, table

FORK = multiprocessing.get_context("fork")
METHODS = ["GET"] * 8 + ["POST"] * 2
PATHS = ["/", "/items/{n}", "/items/{n}/buy", "/users/{n}", "/search?q=item+{n}", "/static/app.js"]
AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 Safari/605.1.15",
    "curl/8.5.0",
]


def handler(line: str) -> None:
    """The no-op line handler both sides call."""


def make_logs(folder: Path, megabytes: int, files: int, compress: bool) -> tuple[list[Path], int]:
    """Write ``files`` access logs of ``megabytes`` in all; return them and their raw size."""
    rng = random.Random(42)
    per_file = megabytes * 10**6 // files
    paths, raw = [], 0
    for index in range(files):
        lines, size = [], 0
        while size < per_file:
            n = rng.randrange(100_000)
            line = (
                f"2024-05-{1 + index * 28 // files:02d}T{rng.randrange(24):02d}:"
                f"{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z "
                f"203.0.{rng.randrange(256)}.{rng.randrange(256)} {rng.choice(METHODS)} "
                f"{rng.choice(PATHS).format(n=n)} HTTP/1.1 {rng.choice((200, 200, 200, 302, 404))} "
                f'{rng.randrange(200, 60_000)} {rng.random():.3f} "{rng.choice(AGENTS)}"\n'
            )
            lines.append(line)
            size += len(line)
        data = "".join(lines).encode()
        raw += len(data)
        path = folder / f"access-{index:03d}.log{'.gz' if compress else ''}"
        path.write_bytes(gzip.compress(data, compresslevel=6) if compress else data)
        paths.append(path)
    return paths, raw


def local_reader(paths: list[Path], start: Any, results: Any) -> None:
    start.wait()
    lines = 0
    began = time.perf_counter()
    for path in paths:
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as file:
            for count, line in enumerate(file, lines + 1):  # noqa: B007
                handler(line)
            lines = count
    results.put((lines, time.perf_counter() - began))


def redis_reader(reader: str, files: int, start: Any, results: Any) -> None:
    from redis_components.files import ReceiveProgress, receive_files

    first, last = [0.0], [0.0]

    def progress(report: ReceiveProgress) -> None:
        if not first[0] and report.bytes_read:
            first[0] = time.perf_counter()
        if report.files_done == files and not last[0]:
            last[0] = time.perf_counter()

    start.wait()
    report = receive_files(channel="bench", reader=reader, on_line=handler, progress=progress)
    results.put((report.lines, last[0] - first[0]))


def start_processes(target: Any, args_list: list[tuple[Any, ...]]) -> tuple[Any, Any, list[Any]]:
    start, results = FORK.Event(), FORK.Queue()
    processes = [
        FORK.Process(target=target, args=(*args, start, results), daemon=True) for args in args_list
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # every process has started before the clock does
    return start, results, processes


def collect(results: Any, processes: list[Any]) -> list[tuple[int, float]]:
    outcome = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return outcome


def run_local(paths: list[Path], readers: int) -> list[tuple[int, float]]:
    start, results, processes = start_processes(local_reader, [(paths,)] * readers)
    start.set()
    return collect(results, processes)


def run_redis(
    paths: list[Path], readers: int, limit: int | None, together: bool
) -> tuple[list[tuple[int, float]], float, int]:
    """Each reader's (lines, seconds), the sender's fill time, and the bytes it stored.

    ``together``: the readers read while the sender sends; otherwise they start once
    the last file is announced.
    """
    from redis_components.files import SendProgress, send_files

    start, results, processes = start_processes(
        redis_reader, [(str(n), len(paths)) for n in range(readers)]
    )
    filled = [0.0]

    def progress(report: SendProgress) -> None:
        if report.files_sent == report.files_total and not filled[0]:
            filled[0] = time.perf_counter()
            start.set()

    if together:
        start.set()
    began = time.perf_counter()
    report = send_files(
        paths, channel="bench", readers=readers, limit_bytes=limit, progress=progress
    )
    return collect(results, processes), filled[0] - began, report.bytes_sent


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (1 min), {five:.1f} (5 min)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=200, help="log data in all (MB)")
    parser.add_argument("--files", type=int, default=20, help="how many files")
    parser.add_argument("--readers", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()

    server = start_redis()
    setup_django(server.url)
    folder = Path(tempfile.mkdtemp(prefix="rc-bench-files-"))
    print(f"Machine: {machine(server.client())}")
    print(f"Load average before: {load()}", flush=True)
    rows: list[list[object]] = []
    missed: list[str] = []
    try:
        plain, plain_raw = make_logs(folder, options.megabytes, options.files, False)
        packed, packed_raw = make_logs(folder, options.megabytes, options.files, True)
        tenth = max(options.megabytes * 10**5, 2 * max(path.stat().st_size for path in plain))
        local = {
            kind: [run_local(paths, options.readers) for _ in range(options.repeat)]
            for kind, paths in (("plain", plain), ("gzip", packed))
        }
        for title, kind, paths, raw, limit, together in (
            ("plain, readers with the sender", "plain", plain, plain_raw, None, True),
            ("plain, readers after the sender", "plain", plain, plain_raw, None, False),
            (f"plain, limit {tenth / 1e6:.0f} MB", "plain", plain, plain_raw, tenth, True),
            ("gzip, readers with the sender", "gzip", packed, packed_raw, None, True),
        ):
            runs = [
                run_redis(paths, options.readers, limit, together) for _ in range(options.repeat)
            ]
            stored = runs[0][2]
            fill = statistics.median(run[1] for run in runs)
            lines = runs[0][0][0][0]
            slowest = 0.0
            for reader in range(options.readers):
                disk = statistics.median(run[reader][1] for run in local[kind])
                through = statistics.median(run[0][reader][1] for run in runs)
                slowest = max(slowest, through)
                rows.append([
                    title if reader == 0 else "",
                    reader,
                    f"{lines / disk:,.0f}",
                    f"{lines / through:,.0f}",
                    f"{raw / 1e6 / disk:,.0f}",
                    f"{raw / 1e6 / through:,.0f}",
                    f"{disk / through:.2f}",
                ])  # fmt: skip
                if disk / through < 0.5:
                    missed.append(f"{title}: reader {reader} gets {disk / through:.2f}")
            rows.append([
                "", "sender", "", "", "", "",
                f"fills {stored / 1e6 / fill:,.0f} MB/s, slowest reader drains "
                f"{stored / 1e6 / slowest:,.0f} MB/s (stored bytes)",
            ])  # fmt: skip
            if together and fill > slowest:
                missed.append(f"{title}: the sender fills slower than the slowest reader drains")
            print(f"{title}: done, load average {load()}", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        server.stop()
    headers = [
        "scenario", "reader", "local disk lines/s", "Redis lines/s", "local MB/s",
        "Redis MB/s", "Redis / local",
    ]  # fmt: skip
    print(f"\n{table(headers, rows)}\n")
    print(f"{options.megabytes} MB in {options.files} files, {lines:,} lines; MB/s of text.")
    print(f"Load average after: {load()}")
    print("Targets:", "met" if not missed else "missed: " + "; ".join(missed))


if __name__ == "__main__":
    main()
