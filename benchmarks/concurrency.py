"""Concurrency per worker process: I/O-bound tasks in flight at once, and their memory.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/concurrency.py             # everything, 3 rounds
    .venv/bin/python benchmarks/concurrency.py --quick     # a smoke run of about a minute
    .venv/bin/python benchmarks/concurrency.py --only dramatiq-10 ours-1 --rounds 2

Every worker runs against one private redis-server that this script starts (never the
machine's Redis), with the same redis-py and reply parser, its library's defaults but
for the concurrency asked, and is started the way its users start it. The tasks are in
benchmarks/concurrency_apps/: each waits, then records its process, its start and its
end (one RPUSH).

* sync: 200 tasks of ``time.sleep(0.1)``, with 10 in flight: Dramatiq ``-p 1 -t 10``,
  Huey ``-k thread -w 10``, Celery ``--pool threads -c 10``, and ours: ``rc_worker -c 1``
  (one process runs one task at a time today) and ``rc_worker -c 10`` (ten processes:
  what 10 in flight takes today). Once ``rc_worker --help`` lists ``--threads``, also
  ``rc_worker -c 1 --threads 10`` (and ``--threads 1`` for the memory table). Ideal:
  10 in flight x 10 tasks/s = 100 tasks/s.
* async: 500 ``async def`` tasks awaiting ``asyncio.sleep(0.1)``, with 50 in flight:
  arq (``max_jobs=50``), saq (``concurrency=50``), and ours: an ``async def``
  ``@redis_task`` on ``rc_worker -c 1``, which runs it through asgiref's
  ``async_to_sync``, one at a time; once ``rc_worker --help`` lists ``--async-tasks``,
  also ``rc_worker -c 1 --async-tasks 50``. Ideal: 500 tasks/s.
* memory: the peak RSS (VmHWM in /proc/<pid>/status) of each process that ran tasks,
  and of all the worker's processes summed (a supervisor, a parent, the children), read
  after the run; and the sum of their PSS (proportional set size, from
  /proc/<pid>/smaps_rollup: pages shared between forked processes counted once in all),
  the highest of samples taken every 0.25 s during the run. Dramatiq ``-t 1`` (and
  ours with ``--threads 1``, once it exists) run 50 tasks for this table only.

Rates run from the first task's start to the last task's end, as the tasks recorded
them (start-up not counted: the tasks are enqueued before the worker starts). Each
round runs every contender once, starting with the next one each round; the tables
give medians over the rounds, and the slowest and fastest round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository's root, for benchmarks.concurrency_apps (imported here and by the workers).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import in_turns, machine, reply_parser, start_redis, table

from benchmarks.concurrency_apps.work import DONE, QUEUE

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
APPS = "benchmarks.concurrency_apps"  # the tasks of every library
SLEEP = 0.1  # seconds each task waits
SYNC_IN_FLIGHT = 10
ASYNC_IN_FLIGHT = 50
SAMPLE_EVERY = 0.25  # seconds between PSS samples
# Our worker, serving the benchmark's queue (the contenders add their options).
RC_WORKER = [sys.executable, "-m", "django", "rc_worker", QUEUE]

# Enqueues n tasks that wait ``SLEEP`` seconds each.
Enqueue = Callable[[int], None]


def repeat(send: Callable[[], object]) -> Enqueue:
    def enqueue(n: int) -> None:
        for _ in range(n):
            send()

    return enqueue


def ours_sync() -> Enqueue:
    from benchmarks.concurrency_apps import tasks

    return repeat(lambda: tasks.sleep.enqueue(SLEEP))


def ours_async() -> Enqueue:
    from benchmarks.concurrency_apps import tasks

    return repeat(lambda: tasks.async_sleep.enqueue(SLEEP))


def dramatiq() -> Enqueue:
    from benchmarks.concurrency_apps import dramatiq_tasks

    return repeat(lambda: dramatiq_tasks.sleep.send(SLEEP))


def huey() -> Enqueue:
    from benchmarks.concurrency_apps import huey_tasks

    return repeat(lambda: huey_tasks.sleep(SLEEP))


def celery() -> Enqueue:
    from benchmarks.concurrency_apps import celery_tasks

    return repeat(lambda: celery_tasks.sleep.delay(SLEEP))


def arq() -> Enqueue:
    from arq import create_pool
    from arq.connections import RedisSettings

    async def enqueue(n: int) -> None:
        pool = await create_pool(RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"]))
        for _ in range(n):
            await pool.enqueue_job("async_sleep", SLEEP)
        await pool.aclose()

    return lambda n: asyncio.run(enqueue(n))


def saq() -> Enqueue:
    from benchmarks.concurrency_apps import saq_tasks

    async def enqueue(n: int) -> None:
        queue = saq_tasks.queue()  # a client on this event loop
        for _ in range(n):
            await queue.enqueue("async_sleep", seconds=SLEEP)
        await queue.disconnect()

    return lambda n: asyncio.run(enqueue(n))


@dataclass
class Contender:
    name: str
    label: str
    section: str  # "sync", "async", or "memory" (run for the memory table only)
    in_flight: int  # how many tasks it is configured to run at once
    command: list[str]
    setup: Callable[[], Enqueue] = field(repr=False)
    library: str = "django-redis-components"  # the distribution it needs
    env: dict[str, str] = field(default_factory=dict)


def contenders(threads: bool, async_tasks: bool) -> list[Contender]:
    """Every contender; ours with ``--threads`` / ``--async-tasks`` when rc_worker has them."""
    found = [
        Contender(
            "dramatiq-10",
            "Dramatiq, -p 1 -t 10",
            "sync",
            10,
            [str(BIN / "dramatiq"), f"{APPS}.dramatiq_tasks", "-p", "1", "-t", "10"],
            dramatiq,
            "dramatiq",
        ),
        Contender(
            "huey-10",
            "Huey, -k thread -w 10",
            "sync",
            10,
            [str(BIN / "huey_consumer"), f"{APPS}.huey_tasks.huey", "-k", "thread", "-w", "10"],
            huey,
            "huey",
        ),
        Contender(
            "celery-10",
            "Celery, --pool threads -c 10",
            "sync",
            10,
            [
                *(str(BIN / "celery"), "-A", f"{APPS}.celery_tasks", "worker"),
                *("--pool", "threads", "-c", "10", "-Q", QUEUE, "--loglevel", "WARNING"),
            ],
            celery,
            "celery",
        ),
        Contender("ours-1", "ours, rc_worker -c 1", "sync", 1, [*RC_WORKER, "-c", "1"], ours_sync),
        Contender(
            "ours-10", "ours, rc_worker -c 10", "sync", 10, [*RC_WORKER, "-c", "10"], ours_sync
        ),
    ]
    if threads:
        found += [
            Contender(
                "ours-threads-10",
                "ours, rc_worker -c 1 --threads 10",
                "sync",
                10,
                [*RC_WORKER, "-c", "1", "--threads", "10"],
                ours_sync,
            ),
            Contender(
                "ours-threads-1",
                "ours, rc_worker -c 1 --threads 1",
                "memory",
                1,
                [*RC_WORKER, "-c", "1", "--threads", "1"],
                ours_sync,
            ),
        ]
    found += [
        Contender(
            "dramatiq-1",
            "Dramatiq, -p 1 -t 1",
            "memory",
            1,
            [str(BIN / "dramatiq"), f"{APPS}.dramatiq_tasks", "-p", "1", "-t", "1"],
            dramatiq,
            "dramatiq",
        ),
        Contender(
            "arq-50",
            "arq, max_jobs=50",
            "async",
            50,
            [str(BIN / "arq"), f"{APPS}.arq_tasks.WorkerSettings"],
            arq,
            "arq",
            {"BENCH_CONCURRENCY": "50"},
        ),
        Contender(
            "saq-50",
            "saq, concurrency=50",
            "async",
            50,
            [str(BIN / "saq"), f"{APPS}.saq_tasks.settings"],
            saq,
            "saq",
            {"BENCH_CONCURRENCY": "50"},
        ),
        Contender(
            "ours-async-1",
            "ours, async def task, rc_worker -c 1",
            "async",
            1,
            [*RC_WORKER, "-c", "1"],
            ours_async,
        ),
    ]
    if async_tasks:
        found.append(
            Contender(
                "ours-async-50",
                "ours, async def task, rc_worker -c 1 --async-tasks 50",
                "async",
                50,
                [*RC_WORKER, "-c", "1", "--async-tasks", "50"],
                ours_async,
            )
        )
    return found


def rc_worker_options() -> str:
    """``rc_worker --help``, to see which options this checkout's worker has."""
    return subprocess.run(
        [*RC_WORKER[:-1], "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class Worker:
    """A contender's worker command in its own session (its processes: that session's)."""

    def __init__(self, contender: Contender, log: Path) -> None:
        self.output = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            contender.command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **contender.env},
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def pids(self) -> list[int]:
        """The processes of the worker's session (Linux)."""
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            if int(fields[3]) == self.process.pid:  # fields[3] is the session id
                found.append(int(stat.parent.name))
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
            os.killpg(self.process.pid, signal.SIGKILL)
        self.output.close()


def proc_kib(path: str, name: str) -> int:
    """A ``kB`` line of a /proc file (``VmHWM:`` of status, ``Pss:`` of smaps_rollup), 0 if
    the process has gone."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class Run:
    rate: float  # tasks per second, first start to last end
    task_processes: int  # processes that ran tasks
    peak_rss_task_process: float  # MiB: the largest VmHWM among them
    peak_rss_all: float  # MiB: VmHWM summed over every process of the worker
    peak_pss_all: float  # MiB: the highest sampled sum of PSS over every process
    processes: int  # every process of the worker


def run_once(contender: Contender, enqueue: Enqueue, count: int, r: redis.Redis, log: Path) -> Run:
    r.flushall()
    enqueue(count)
    worker = Worker(contender, log)
    try:
        deadline = time.monotonic() + count * SLEEP * 2 + 90
        peak_pss = 0
        while r.llen(DONE) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{contender.name}: the tasks did not finish; see {log}")
            if worker.process.poll() is not None:
                raise RuntimeError(f"{contender.name}: the worker exited; see {log}")
            pss = sum(proc_kib(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in worker.pids())
            peak_pss = max(peak_pss, pss)
            time.sleep(SAMPLE_EVERY)
        everyone = worker.pids()
        peaks = {pid: proc_kib(f"/proc/{pid}/status", "VmHWM:") for pid in everyone}
    finally:
        worker.stop()
    records = [line.split() for line in r.lrange(DONE, 0, -1)]
    starts = [float(started) for _, started, _ in records]
    ends = [float(ended) for _, _, ended in records]
    ran = {int(pid) for pid, _, _ in records}
    return Run(
        rate=len(records) / (max(ends) - min(starts)),
        task_processes=len(ran),
        peak_rss_task_process=max(peaks.get(pid, 0) for pid in ran) / 1024,
        peak_rss_all=sum(peaks.values()) / 1024,
        peak_pss_all=peak_pss / 1024,
        processes=len(everyone),
    )


def spread(values: list[float], digits: int = 0) -> str:
    return f"{min(values):,.{digits}f} - {max(values):,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds, each running every contender (default 3)"
    )
    parser.add_argument(
        "--sync-count", type=int, default=200, help="sync tasks per run (default 200)"
    )
    parser.add_argument(
        "--async-count", type=int, default=500, help="async tasks per run (default 500)"
    )
    parser.add_argument(
        "--memory-count",
        type=int,
        default=50,
        help="tasks per run of the memory-only contenders (default 50)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 1 round of 30 sync, 60 async and 10 memory-only tasks",
    )
    parser.add_argument(
        "--only", nargs="*", metavar="NAME", help="run only these contenders (see --list)"
    )
    parser.add_argument(
        "--list", action="store_true", help="list the contenders this checkout can run, and stop"
    )
    options = parser.parse_args()
    if options.quick:
        options.rounds, options.sync_count, options.async_count = 1, 30, 60
        options.memory_count = 10
    counts = {
        "sync": options.sync_count,
        "async": options.async_count,
        "memory": options.memory_count,
    }

    os.environ["DJANGO_SETTINGS_MODULE"] = f"{APPS}.settings"
    help_text = rc_worker_options()
    threads, async_tasks = "--threads" in help_text, "--async-tasks" in help_text
    everyone = contenders(threads, async_tasks)
    if options.list:
        for contender in everyone:
            print(f"{contender.name:16} {contender.label}")
        return
    unknown = set(options.only or ()) - {contender.name for contender in everyone}
    if unknown:
        parser.error(f"no such contender: {', '.join(sorted(unknown))} (see --list)")
    notes = []
    if not threads:
        notes.append("ours with --threads: not available (rc_worker --help has no --threads)")
    if not async_tasks:
        notes.append(
            "ours with --async-tasks: not available (rc_worker --help has no --async-tasks)"
        )
    chosen = []
    for contender in everyone:
        if options.only and contender.name not in options.only:
            continue
        if installed(contender.library) is None:
            notes.append(f"{contender.label}: skipped, {contender.library} is not installed")
            continue
        chosen.append(contender)
    for note in notes:
        print(note, flush=True)

    import django

    logs = Path(tempfile.mkdtemp(prefix="rc-concurrency-"))
    load_before = os.getloadavg()
    server = start_redis()
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        django.setup()
        r = server.client()
        info = machine(r)
        print(f"Machine: {info}", flush=True)
        enqueuers = {contender.name: contender.setup() for contender in chosen}
        runs: dict[str, list[Run]] = {contender.name: [] for contender in chosen}
        for round_, contender in in_turns(chosen, options.rounds):
            log = logs / f"{contender.name}.log"
            run = run_once(contender, enqueuers[contender.name], counts[contender.section], r, log)
            runs[contender.name].append(run)
            print(
                f"round {round_ + 1} {contender.name}: {run.rate:,.1f} tasks/s, "
                f"{run.task_processes} process(es) ran tasks, peak RSS "
                f"{run.peak_rss_task_process:.1f} MiB (all {run.processes} processes: "
                f"{run.peak_rss_all:.1f} MiB, PSS {run.peak_pss_all:.1f} MiB), "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        server.stop()

    def median(name: str, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in runs[name])

    print()
    print(f"Machine: {info}")
    print(f"Reply parser, for every contender: {reply_parser()}")
    print(f"Versions: {versions()}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"Rounds: {options.rounds}; task counts: {counts}; worker logs: {logs}")
    print("Rates: from the first task's start to the last task's end, as the tasks recorded them")
    for note in notes:
        print(note)
    for section, in_flight, headline in (
        ("sync", SYNC_IN_FLIGHT, "time.sleep(0.1)"),
        ("async", ASYNC_IN_FLIGHT, "await asyncio.sleep(0.1)"),
    ):
        ideal = in_flight / SLEEP
        rows = []
        for contender in chosen:
            if contender.section != section:
                continue
            rates = [run.rate for run in runs[contender.name]]
            rows.append(
                [
                    contender.label,
                    str(contender.in_flight),
                    f"{statistics.median(rates):,.1f}",
                    spread(rates, 1),
                    f"{statistics.median(rates) / ideal:.2f}",
                ]
            )
        if rows:
            print()
            print(
                f"{counts[section]} tasks of {headline}; ideal {ideal:.0f} tasks/s "
                f"({in_flight} in flight x {1 / SLEEP:.0f}/s)"
            )
            print()
            headers = ["worker", "in flight", "tasks/s", "slowest - fastest round", "of ideal"]
            print(table(headers, rows))
    rows = [
        [
            contender.label,
            str(contender.in_flight),
            f"{median(contender.name, 'rate'):,.1f}",
            f"{median(contender.name, 'task_processes'):.0f}",
            f"{median(contender.name, 'peak_rss_task_process'):.1f}",
            f"{median(contender.name, 'processes'):.0f}",
            f"{median(contender.name, 'peak_rss_all'):.1f}",
            f"{median(contender.name, 'peak_pss_all'):.1f}",
        ]
        for contender in chosen
    ]
    print()
    print("Memory (MiB, medians over the rounds)")
    print()
    headers = [
        "worker",
        "in flight",
        "tasks/s",
        "processes running tasks",
        "peak RSS of one such process",
        "all processes",
        "peak RSS, all summed",
        "PSS, all summed (peak)",
    ]
    print(table(headers, rows))


def versions() -> str:
    names = ("dramatiq", "huey", "celery", "kombu", "arq", "saq", "asgiref", "django")
    return ", ".join(f"{name} {installed(name) or 'not installed'}" for name in names)


if __name__ == "__main__":
    main()
