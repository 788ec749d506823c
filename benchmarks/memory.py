"""Worker memory against peers that load Django (issue 62, item 4).

    .venv/bin/python benchmarks/memory.py                  # every contender, 3 rounds
    .venv/bin/python benchmarks/memory.py --rounds 1 --only ours-1 celery-solo

Every worker loads the same Django project (benchmarks/memory_apps/settings.py:
queue_apps' ``startproject`` settings plus django-rq, and Celery configured from them as
Celery's Django guide does) and runs against one private redis-server that this script
starts (never the machine's Redis). Each is started the way its users start it:

* ours: ``python -m django rc_worker -c 1 memory`` (a supervisor and one worker
  process: both count), and ``rc_worker --no-supervisor memory`` (the worker in the
  command's own process).
* Celery: ``celery -A benchmarks.memory_apps.celery_app worker -P solo -c 1`` with
  DJANGO_SETTINGS_MODULE set (one process).
* django-rq: ``python -m django rqworker default``, RQ's forking Worker (a parent and,
  for each job, a transient work-horse fork), and the same with
  ``--worker-class rq.worker.SimpleWorker`` (one process).

Per round and contender, with a fresh worker each time: 500 no-op tasks are enqueued (each
one INCRs a counter, so that the script knows they are done), the worker is started, the
script waits until all 500 are done, then 2 s idle, then samples the worker's whole
process tree (every process of its session, forked children included) 7 times over 3 s:
RSS (VmRSS) and PSS (smaps_rollup; pages shared between forked processes counted once in
all) summed over the processes, the process count, and VmHWM (peak RSS) summed. While the
tasks run, the same sums are sampled every 0.05 s: the peak seen there includes
django-rq's work-horse, which is gone at idle. Tables give the medians of the rounds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import in_turns, machine, reply_parser, start_redis, table
from concurrency import BIN, Contender, Worker, proc_kib

from benchmarks.memory_apps.work import DONE

SETTINGS = "benchmarks.memory_apps.settings"
COUNT = 500
IDLE = 2.0  # seconds idle before the idle samples
IDLE_SAMPLES = 7  # over IDLE_SPAN seconds
IDLE_SPAN = 3.0
RUN_SAMPLE_EVERY = 0.05
DJANGO = [sys.executable, "-m", "django"]


def ours() -> Callable[[int], None]:
    from benchmarks.memory_apps import tasks

    def enqueue(n: int) -> None:
        for _ in range(n):
            tasks.noop.enqueue()

    return enqueue


def celery() -> Callable[[int], None]:
    from benchmarks.memory_apps import celery_app, celery_tasks

    celery_app.app.loader.import_default_modules()

    def enqueue(n: int) -> None:
        for _ in range(n):
            celery_tasks.noop.delay()

    return enqueue


def rq() -> Callable[[int], None]:
    import django_rq

    from benchmarks.memory_apps import rq_tasks

    def enqueue(n: int) -> None:
        queue = django_rq.get_queue("default")
        for _ in range(n):
            queue.enqueue(rq_tasks.noop)

    return enqueue


def contenders() -> list[Contender]:
    env = {"DJANGO_SETTINGS_MODULE": SETTINGS}
    return [
        Contender(
            "ours-1",
            "ours, rc_worker -c 1",
            "memory",
            1,
            [*DJANGO, "rc_worker", "-c", "1", "memory"],
            ours,
            env=env,
        ),
        Contender(
            "ours-alone",
            "ours, rc_worker --no-supervisor",
            "memory",
            1,
            [*DJANGO, "rc_worker", "--no-supervisor", "memory"],
            ours,
            env=env,
        ),
        Contender(
            "celery-solo",
            "Celery, worker -P solo -c 1",
            "memory",
            1,
            [
                *(str(BIN / "celery"), "-A", "benchmarks.memory_apps.celery_app", "worker"),
                *("-P", "solo", "-c", "1", "--loglevel", "WARNING"),
            ],
            celery,
            "celery",
            env,
        ),
        Contender(
            "rq-fork",
            "django-rq, rqworker default (forking Worker)",
            "memory",
            1,
            [*DJANGO, "rqworker", "default"],
            rq,
            "django-rq",
            env,
        ),
        Contender(
            "rq-simple",
            "django-rq, rqworker --worker-class rq.worker.SimpleWorker default",
            "memory",
            1,
            [*DJANGO, "rqworker", "--worker-class", "rq.worker.SimpleWorker", "default"],
            rq,
            "django-rq",
            env,
        ),
    ]


@dataclass
class Sample:
    processes: int
    rss: float  # MiB, VmRSS summed
    pss: float  # MiB, Pss summed
    hwm: float  # MiB, VmHWM summed


def sample(worker: Worker) -> Sample:
    pids = worker.pids()
    kib = [
        (
            proc_kib(f"/proc/{pid}/status", "VmRSS:"),
            proc_kib(f"/proc/{pid}/smaps_rollup", "Pss:"),
            proc_kib(f"/proc/{pid}/status", "VmHWM:"),
        )
        for pid in pids
    ]
    alive = [k for k in kib if k[0]]
    return Sample(
        processes=len(alive),
        rss=sum(k[0] for k in alive) / 1024,
        pss=sum(k[1] for k in alive) / 1024,
        hwm=sum(k[2] for k in alive) / 1024,
    )


@dataclass
class Run:
    processes: int
    rss: float
    pss: float
    hwm: float
    run_processes: int  # the most processes seen while the tasks ran
    run_rss: float  # the highest summed RSS sampled while they ran
    run_pss: float
    seconds: float  # worker start to the last task done


def run_once(contender: Contender, r: redis.Redis, log: Path) -> Run:
    r.flushall()
    contender.setup()(COUNT)
    started = time.monotonic()
    worker = Worker(contender, log)
    try:
        peak = Sample(0, 0.0, 0.0, 0.0)
        while int(r.get(DONE) or 0) < COUNT:
            if time.monotonic() - started > 180:
                raise TimeoutError(f"{contender.name}: the tasks did not finish; see {log}")
            if worker.process.poll() is not None:
                raise RuntimeError(f"{contender.name}: the worker exited; see {log}")
            now = sample(worker)
            peak = Sample(
                max(peak.processes, now.processes),
                max(peak.rss, now.rss),
                max(peak.pss, now.pss),
                0.0,
            )
            time.sleep(RUN_SAMPLE_EVERY)
        seconds = time.monotonic() - started
        time.sleep(IDLE)
        idle = []
        for _ in range(IDLE_SAMPLES):
            idle.append(sample(worker))
            time.sleep(IDLE_SPAN / (IDLE_SAMPLES - 1))
    finally:
        worker.stop()
    return Run(
        processes=max(s.processes for s in idle),
        rss=statistics.median(s.rss for s in idle),
        pss=statistics.median(s.pss for s in idle),
        hwm=max(s.hwm for s in idle),
        run_processes=max(peak.processes, *(s.processes for s in idle)),
        run_rss=max(peak.rss, *(s.rss for s in idle)),
        run_pss=max(peak.pss, *(s.pss for s in idle)),
        seconds=seconds,
    )


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def versions() -> str:
    names = ("django-redis-components", "django", "celery", "kombu", "django-rq", "rq")
    found = ", ".join(f"{name} {version(name)}" for name in names)
    return f"{found}, Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    everyone = contenders()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=[c.name for c in everyone])
    options = parser.parse_args()
    chosen = [c for c in everyone if not options.only or c.name in options.only]

    server = start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django

    django.setup()
    r = redis.Redis.from_url(server.url)
    log = Path(tempfile.gettempdir()) / "rc-bench-memory.log"
    log.write_bytes(b"")
    print(machine(r))
    print(f"{versions()}; reply parser: {reply_parser()}; worker output: {log}")
    runs: dict[str, list[Run]] = {c.name: [] for c in chosen}
    try:
        for round_, contender in in_turns(chosen, options.rounds):
            run = run_once(contender, r, log)
            runs[contender.name].append(run)
            print(
                f"round {round_ + 1} {contender.name}: idle {run.processes} processes, "
                f"RSS {run.rss:.1f} MiB, PSS {run.pss:.1f} MiB, VmHWM {run.hwm:.1f} MiB; "
                f"running: {run.run_processes} processes, RSS {run.run_rss:.1f}, "
                f"PSS {run.run_pss:.1f}; {run.seconds:.1f} s",
                flush=True,
            )
    finally:
        server.stop()

    def median(name: str, attribute: str) -> float:
        return statistics.median(getattr(run, attribute) for run in runs[name])

    rows = [
        [
            c.label,
            f"{median(c.name, 'processes'):.0f}",
            f"**{median(c.name, 'rss'):.1f}**",
            f"**{median(c.name, 'pss'):.1f}**",
            f"{median(c.name, 'hwm'):.1f}",
            f"{median(c.name, 'run_processes'):.0f}",
            f"{median(c.name, 'run_rss'):.1f}",
            f"{median(c.name, 'run_pss'):.1f}",
            f"{median(c.name, 'seconds'):.1f}",
        ]
        for c in chosen
    ]
    headers = [
        "worker",
        "processes (idle)",
        "RSS summed, idle (MiB)",
        "PSS summed, idle (MiB)",
        "VmHWM summed, idle tree (MiB)",
        "processes (most while running)",
        "RSS summed, peak while running (MiB)",
        "PSS summed, peak while running (MiB)",
        "start to 500 done (s)",
    ]
    print(f"\nmedians of {options.rounds} rounds, {COUNT} no-op tasks each")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
