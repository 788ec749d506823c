"""Workflows under faults: a fan-out 1 -> 1,000 -> 1, with duplicated deliveries and kill -9.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/workflows.py                  # everything, 1 round
    .venv/bin/python benchmarks/workflows.py --rounds 3 --only ours ours-independent

A first step, then 1,000 members of ``time.sleep(0.05)`` in parallel, then a reduce given
the list of their results, on 2 worker processes against one private redis-server this
script starts (never the machine's Redis), with the same redis-py and reply parser for
every library. The faults, the same for every contender: a tenth of the members (those
whose number ends in 3) are delivered twice (on its first run such a member sends a copy
of its own message, as a redelivery would), and one worker process is killed with
``kill -9`` each time 200 more members have ended (the process that ran the latest
member). Each library's steps are in benchmarks/workflow_apps/.

* ours: ``chain(start.si(), group(member.si(i) for i in range(1000)), reduce.s())`` on
  ``rc_worker -c 2``.
* ours-independent: the baseline, 1,002 independent tasks (the same start, the 1,000
  members as tasks of their own, and one more no-op) on ``rc_worker -c 2``, with the
  same faults. The target: the workflow takes at most 1.1x its time.
* celery: the same chain, which Celery makes a chord, on Redis as broker and result
  backend, ``celery worker -c 2 --pool prefork``, with its documented settings for
  workers that die (``task_acks_late``, ``task_reject_on_worker_lost``).
* dramatiq: ``group(members).add_completion_callback(reduce)`` with its GroupCallbacks
  middleware on its Redis rate-limiter backend, ``dramatiq -p 2 -t 1``. Dramatiq has no
  step before a group, and its callback gets no results.

Each run starts its worker, waits 6 s for it to be ready, then enqueues the workflow and
times from there to the reduce's start (the baseline: to the end of its last task, once
every member and every copy has run: the reduce too waits for the copies queued before
it). A run ends 2 s after the reduce ran and every member ended (a second call of the
reduce would show then), or after ``--timeout`` seconds. What the reduce did: **on
time** (once, after every member ended, given the 1,000 results in order), **early**
(before every member had ended), **twice** (or more), **never** (not within the
timeout). "Gap before
the reduce" is how long after the end of the last task run before it the reduce
started: a worker's next fetch, since our release is a write of the script that
acknowledges the last member, and costs no round trip of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import machine, start_redis, table

from benchmarks.workflow_apps import work

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
APPS = "benchmarks.workflow_apps"
READY_AFTER = 6.0  # seconds a worker gets to start before the workflow is enqueued
KILL_EVERY = 200  # members ended between two kill -9s
GRACE = 2.0  # seconds to wait for a second call of the reduce


def ours() -> None:
    from benchmarks.workflow_apps import tasks
    from redis_components import chain, group

    members = group(tasks.member.si(i) for i in range(work.MEMBERS))
    chain(tasks.start.si(), members, tasks.reduce.s()).enqueue()


def ours_independent() -> None:
    from benchmarks.workflow_apps import tasks

    tasks.start.enqueue()
    for i in range(work.MEMBERS):
        tasks.independent.enqueue(i)
    tasks.start.enqueue()


def celery() -> None:
    from celery import chain, group

    from benchmarks.workflow_apps import celery_tasks as tasks

    members = group(tasks.member.si(i) for i in range(work.MEMBERS))
    chain(tasks.start.si(), members, tasks.reduce.s()).apply_async()


def dramatiq() -> None:
    from dramatiq import group

    from benchmarks.workflow_apps import dramatiq_tasks as tasks

    members = group(tasks.member.message(i) for i in range(work.MEMBERS))
    members.add_completion_callback(tasks.reduce.message())
    members.run()


@dataclass
class Contender:
    name: str
    label: str
    command: list[str]
    enqueue: Callable[[], None]
    library: str = "django-redis-components"
    baseline: bool = False  # independent tasks: done when every member has ended


RC_WORKER = [sys.executable, "-m", "django", "rc_worker", work.QUEUE, "-c", "2"]
CONTENDERS = [
    Contender("ours", "ours: chain(start, group(1,000), reduce)", RC_WORKER, ours),
    Contender(
        "ours-independent",
        "ours: 1,002 independent tasks (baseline)",
        RC_WORKER,
        ours_independent,
        baseline=True,
    ),
    Contender(
        "celery",
        "Celery: chain(start, group(1,000), reduce), a chord",
        [
            *(str(BIN / "celery"), "-A", f"{APPS}.celery_tasks", "worker"),
            *("-c", "2", "--pool", "prefork", "-Q", work.QUEUE, "--loglevel", "WARNING"),
        ],
        celery,
        "celery",
    ),
    Contender(
        "dramatiq",
        "Dramatiq: group(1,000) + completion callback",
        [str(BIN / "dramatiq"), f"{APPS}.dramatiq_tasks", "-p", "2", "-t", "1"],
        dramatiq,
        "dramatiq",
    ),
]


class Worker:
    """A contender's worker command in its own session; started again if it exits."""

    def __init__(self, contender: Contender, log: Path) -> None:
        self.contender = contender
        self.output = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.restarts = 0
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.contender.command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def keep_running(self) -> None:
        if self.process.poll() is not None:
            self._stop_group()
            self.restarts += 1
            self.process = self._start()

    def _stop_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
        self._stop_group()
        self.process.wait()
        self.output.close()


@dataclass
class Run:
    seconds: float | None  # from the enqueue to the reduce's start (baseline: last task's end)
    calls: int  # calls of the reduce
    early: bool  # its first call came before every member had ended
    ordered: bool | None  # it was given the 1,000 results in order (None: given none)
    gap_ms: float | None  # its first call's start after the end of the task run before it
    member_runs: int
    kills: int
    restarts: int

    def verdict(self, baseline: bool) -> str:
        if baseline:
            return "-"
        if self.calls == 0:
            return "never"
        if self.calls > 1:
            return f"{self.calls} times" + (" (first early)" if self.early else "")
        if self.early:
            return "early"
        return "on time" if self.ordered is not False else "on time, results out of order"


def run_once(contender: Contender, r: redis.Redis, log: Path, timeout: float) -> Run:
    r.flushall()
    worker = Worker(contender, log)
    kills = 0
    try:
        time.sleep(READY_AFTER)
        started = time.time()
        contender.enqueue()
        deadline = time.monotonic() + timeout
        settled_at = None
        while time.monotonic() < deadline:
            worker.keep_running()
            ended = r.hlen(work.FIRST)
            if ended >= KILL_EVERY * (kills + 1) and ended < work.MEMBERS:
                pid = r.lindex(work.PIDS, -1)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                kills += 1
            if contender.baseline:  # every copy has run too
                copies = work.MEMBERS // 10
                finished = ended >= work.MEMBERS and r.llen(work.ENDS) >= work.MEMBERS + copies
            else:
                finished = ended >= work.MEMBERS and r.llen(work.REDUCED)
            if finished and settled_at is None:
                settled_at = time.monotonic()
            if settled_at is not None and time.monotonic() - settled_at >= GRACE:
                break
            time.sleep(0.02)
    finally:
        worker.stop()
    ends = sorted(float(v) for v in r.lrange(work.ENDS, 0, -1))
    calls = [json.loads(entry) for entry in r.lrange(work.REDUCED, 0, -1)]
    runs = sum(int(v) for v in r.hvals(work.RUNS))
    if contender.baseline:
        seconds = ends[-1] - started if r.hlen(work.DONE) >= work.MEMBERS else None
        return Run(seconds, 0, False, None, None, runs, kills, worker.restarts)
    first = calls[0] if calls else None
    before = [end for end in ends if first and end < first[0]]
    return Run(
        seconds=first[0] - started if first else None,
        calls=len(calls),
        early=bool(first and first[1] < work.MEMBERS),
        ordered=None if contender.name == "dramatiq" else bool(first and first[2]),
        gap_ms=(first[0] - before[-1]) * 1000 if first and before else None,
        member_runs=runs,
        kills=kills,
        restarts=worker.restarts,
    )


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    parser.add_argument(
        "--only",
        nargs="*",
        metavar="NAME",
        help="run only these: " + ", ".join(c.name for c in CONTENDERS),
    )
    parser.add_argument(
        "--timeout", type=float, default=240, help="seconds a run may take (default 240)"
    )
    options = parser.parse_args()
    unknown = set(options.only or ()) - {c.name for c in CONTENDERS}
    if unknown:
        parser.error(f"no such contender: {', '.join(sorted(unknown))}")
    chosen = []
    for contender in CONTENDERS:
        if options.only and contender.name not in options.only:
            continue
        if not installed(contender.library):
            print(f"{contender.label}: skipped, {contender.library} is not installed")
            continue
        chosen.append(contender)

    os.environ["DJANGO_SETTINGS_MODULE"] = f"{APPS}.settings"
    import django

    logs = Path(tempfile.mkdtemp(prefix="rc-workflows-"))
    server = start_redis()
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        django.setup()
        r = server.client()
        print(f"Machine: {machine(r)}", flush=True)
        runs: dict[str, list[Run]] = {c.name: [] for c in chosen}
        for round_ in range(options.rounds):
            shift = round_ % len(chosen)
            for contender in chosen[shift:] + chosen[:shift]:
                run = run_once(contender, r, logs / f"{contender.name}.log", options.timeout)
                runs[contender.name].append(run)
                print(f"round {round_ + 1}: {contender.name}: {run}", flush=True)
    finally:
        server.stop()

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    baseline = median([run.seconds for run in runs.get("ours-independent", [])])
    rows = []
    for contender in chosen:
        found = runs[contender.name]
        seconds = median([run.seconds for run in found])
        gap = median([run.gap_ms for run in found])
        rows.append(
            [
                contender.label,
                "; ".join(sorted({run.verdict(contender.baseline) for run in found})),
                "-" if seconds is None else f"{seconds:.1f}",
                "-"
                if seconds is None or baseline is None or contender.baseline
                else f"{seconds / baseline:.2f}x",
                "-" if gap is None else f"{gap:.1f}",
                f"{median([float(run.member_runs) for run in found]):,.0f}",
                f"{median([float(run.kills) for run in found]):.0f}",
                f"{median([float(run.restarts) for run in found]):.0f}",
            ]
        )
    print()
    print(
        table(
            [
                "contender",
                "reduce",
                "seconds",
                "vs baseline",
                "gap before the reduce (ms)",
                "member runs",
                "kill -9s",
                "worker restarts",
            ],
            rows,
        )
    )
    print(f"\nWorkers' logs: {logs}")


if __name__ == "__main__":
    main()
