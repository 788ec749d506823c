"""Limits against Dramatiq's and Huey's limiters: an API call under 3 at once and 20 a
second, in the same run on one private redis-server.

    .venv/bin/python benchmarks/limit_peers.py                 # every contender, 1 round
    .venv/bin/python benchmarks/limit_peers.py --rounds 3 --only ours huey

Each contender's worker is one process with 8 threads, started as its users start it
(``rc_worker bench --threads 8``, ``dramatiq ... -p 1 -t 8``, ``huey_consumer ... -w 8 -k
thread``), and its tasks are in benchmarks/queue_apps/ (``limited_api``): each counts
its attempts, runs ``work.limited_work`` (record its start, count the tasks running,
sleep, record its end) when its limits let it, and counts the attempts refused and
their thread time. The limits:

* ours: ``limits=[concurrency_limit(3, key="bench-api"), rate_limit(20, per=1.0,
  key="bench-api")]``, checked where the worker takes a task;
* Dramatiq: ``ConcurrentRateLimiter(backend, "bench-api-c", limit=3)`` and
  ``BucketRateLimiter(backend, "bench-api-r", limit=20, bucket=1000)`` on its
  ``RedisBackend``, acquired inside the actor; a refusal raises RateLimitExceeded,
  which its Retries middleware retries after its backoff;
* Huey: ``huey.rate_limit("bench-api", limit=20, per=1)`` inside
  ``huey.contrib.helpers.lock_task_semaphore(huey, "bench-api", 3)``.

The run: 300 tasks of 0.05 s, enqueued before the worker starts; timed from the first
task's start to the last one's end. The rate alone sets a floor of 15 s (299 starts
50 ms apart, then 0.05 s). Then kill -9: 12 tasks of 1 s, the worker's whole process
group SIGKILLed once 3 of them run, the limiter's state read at once, a new worker
started and 6 new tasks of 0.05 s enqueued, and what runs in the next ``--kill-window``
seconds recorded (or until every task is done).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository's root, for benchmarks.queue_apps (imported here and by the workers).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import in_turns, machine, start_redis, table
from queues import BIN, Contender, Worker, ours, server_cpu, session_cpu, wait_for

ROOT = Path(__file__).resolve().parent.parent
TASKS = 300
SECONDS = 0.05
RATE = 20  # starts a second
CONCURRENCY = 3
KILL_TASKS = 12
KILL_SECONDS = 1.0
FRESH_TASKS = 6
LIMITED = "bench:lim:"  # work.LIMITED
OUR_BASE = "rc:queue:{tasks}:"
RUN_TIMEOUT = 1200  # seconds a contender gets to run the 300 tasks
SETTLE = 5  # seconds without an attempt, nothing left queued: the rest gave up


@dataclass
class Peer:
    """A contender: how to send a task and read its limiter, and what it was run with."""

    name: str
    label: str
    command: list[str]
    settings: list[str]
    # Send limited task (index, seconds).
    send: Callable[[int, float], None] = field(repr=False)
    # Tasks still waiting somewhere (queued, delayed, waiting on a limit, running).
    pending: Callable[[redis.Redis], int] = field(repr=False)
    # Tasks that gave up (dead-lettered, retries exhausted).
    gave_up: Callable[[redis.Redis], int] = field(repr=False)
    # The concurrency limiter's permits taken, and when they come back.
    permits: Callable[[redis.Redis], tuple[int, str]] = field(repr=False)
    # What refused attempts cost a worker thread, when they exist.
    refusals: str = ""
    # The limits whose refusals spend one of the task's retries.
    charged: tuple[str, ...] = ()

    def worker(self, url: str, log: Path) -> Worker:
        return Worker(Contender(self.name, self.label, self.command, 0, ours), url, log)


def our_peer() -> Peer:
    enqueue, _ = ours()  # Django set up with benchmarks.queue_apps.settings

    def pending(r: redis.Redis) -> int:
        return int(
            r.zcard(OUR_BASE + "ready:bench")
            + r.zcard(OUR_BASE + "delayed:bench")
            + r.zcard(OUR_BASE + "limit:wait:bench-api")
            + r.hlen(OUR_BASE + "running")
        )

    def permits(r: redis.Redis) -> tuple[int, str]:
        held = int(r.scard(OUR_BASE + "limit:held:bench-api"))
        return held, f"{held} held (SCARD)"

    return Peer(
        "ours",
        "redis_components (rc_worker --threads 8)",
        [sys.executable, "-m", "django", "rc_worker", "bench", "--threads", "8"],
        [
            'limits=[concurrency_limit(3, key="bench-api"), '
            'rate_limit(20, per=1.0, key="bench-api")] (burst: its default, 0); '
            "TASK_HEARTBEAT_INTERVAL: its default, 3 s (a lease lasts 4.5 s)",
        ],
        lambda index, seconds: enqueue("limited_api", index, seconds),
        pending,
        lambda r: int(r.llen(OUR_BASE + "dead:bench")),
        permits,
        refusals="no attempt is refused: a task over a limit is not taken",
    )


def dramatiq_peer() -> Peer:
    from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT
    from dramatiq.middleware.retries import DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF

    from benchmarks.queue_apps import dramatiq_tasks

    concurrency = dramatiq_tasks.api_concurrency

    def permits(r: redis.Redis) -> tuple[int, str]:
        taken = int(r.get(concurrency.key) or 0)
        ttl = int(r.pttl(concurrency.key))
        left = f"the key expires in {ttl / 1000:.0f} s" if ttl > 0 else "no key"
        return taken, f"{taken} taken (GET {concurrency.key}; {left})"

    return Peer(
        "dramatiq",
        "Dramatiq (-p 1 -t 8)",
        [str(BIN / "dramatiq"), "benchmarks.queue_apps.dramatiq_tasks", "-p", "1", "-t", "8"],
        [
            f"ConcurrentRateLimiter(backend, {concurrency.key!r}, limit={concurrency.limit}) "
            f"(ttl: its default, {concurrency.ttl} ms), BucketRateLimiter(backend, "
            f"{dramatiq_tasks.api_rate.key!r}, limit={dramatiq_tasks.api_rate.limit}, "
            f"bucket={dramatiq_tasks.api_rate.bucket}), RedisBackend on the same server; "
            "in the actor: `with concurrency.acquire(), rate.acquire():`",
            f"actor max_retries={dramatiq_tasks.LIMITED_MAX_RETRIES} (set: its default, 20, "
            f"could dead-letter tasks); min_backoff {DEFAULT_MIN_BACKOFF} ms, max_backoff "
            f"{DEFAULT_MAX_BACKOFF} ms (its defaults: the n-th retry waits "
            "min_backoff x 2^(n-1) x a jitter of 1 to 2)",
            f"RedisBroker defaults: heartbeat_timeout {DEFAULT_HEARTBEAT_TIMEOUT} ms, prefetch "
            "2 x threads (queue) and 1,000 x threads (delay queue)",
        ],
        lambda index, seconds: dramatiq_tasks.limited_api.send(index, seconds),
        lambda r: int(r.hlen("dramatiq:bench.msgs") + r.hlen("dramatiq:bench.DQ.msgs")),
        lambda r: int(r.zcard("dramatiq:bench.XQ")),
        permits,
        refusals="the body's time from entry to refusal",
        charged=("concurrency", "rate"),  # RateLimitExceeded is retried as any error
    )


def huey_peer() -> Peer:
    from huey.utils import Error

    from benchmarks.queue_apps import huey_tasks

    huey = huey_tasks.huey
    key = f"{huey.name}.lock.bench-api"  # RedisSemaphore's ZSET: holder -> renewed at
    timeout = 300  # lock_task_semaphore's default timeout, seconds

    def gave_up(r: redis.Redis) -> int:
        values = huey.all_results().values()  # a task out of retries stores its Error
        return sum(isinstance(huey.serializer.deserialize(value), Error) for value in values)

    def permits(r: redis.Redis) -> tuple[int, str]:
        taken = int(r.zcard(key))
        oldest = r.zrange(key, 0, 0, withscores=True)
        if not oldest:
            return taken, f"{taken} taken (ZCARD {key})"
        seconds, micros = r.time()
        left = timeout - (seconds + micros / 1e6 - oldest[0][1])
        return taken, f"{taken} taken (ZCARD {key}; the oldest times out in {left:.0f} s)"

    return Peer(
        "huey",
        "Huey (-w 8 -k thread)",
        [
            str(BIN / "huey_consumer"),
            "benchmarks.queue_apps.huey_tasks.huey",
            *("-w", "8", "-k", "thread"),
        ],
        [
            '@huey.task(retries=1000) over lock_task_semaphore(huey, "bench-api", 3) '
            f"(huey.contrib.helpers; timeout: its default, {timeout} s) over "
            '@huey.rate_limit("bench-api", limit=20, per=1) (a fixed window; retry=True, '
            "its default)",
            "retries=1000 (set: its default, 0, fails a task the semaphore refuses); "
            "retry_delay: its default, 0 (a refused task goes straight back to the queue); "
            "consumer defaults (scheduler every 1 s, blocking dequeue)",
            "Huey cannot express: a rate that spreads starts (its window lets all 20 start "
            "at once, and sends every refused task back at the next window's start); a "
            "task that waits for a permit (the semaphore is try-once: each refusal is a "
            "retry); lock_task itself is a mutex (1 at once): 3 at once needs the contrib "
            "semaphore, Redis only",
        ],
        lambda index, seconds: huey_tasks.limited_api(index, seconds),
        lambda r: int(huey.pending_count() + huey.scheduled_count()),
        gave_up,
        permits,
        refusals="the body's time from entry to refusal",
        charged=("concurrency",),  # a RateLimitExceeded gives its retry back
    )


PEERS = {"ours": our_peer, "dramatiq": dramatiq_peer, "huey": huey_peer}


def entries(r: redis.Redis, name: str) -> list[tuple[int, float]]:
    """The (task index, epoch seconds) recorded in list ``name``."""
    found = []
    for raw in r.lrange(LIMITED + name, 0, -1):
        index, at = raw.split()
        found.append((int(index), float(at)))
    return found


def most_in_a_second(starts: list[float]) -> int:
    """The most starts in any window of 1 s."""
    ordered, most, first = sorted(starts), 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def counter(r: redis.Redis, name: str) -> float:
    return float(r.get(LIMITED + name) or 0)


def most_running(r: redis.Redis) -> int:
    return int(r.zscore(LIMITED + "most", "running") or 0)


def twice(r: redis.Redis) -> int:
    return sum(int(runs) > 1 for runs in r.hvals(LIMITED + "runs"))


@dataclass
class Run:
    done: int
    wall: float
    most_running: int
    most_starts: int
    retries: int  # attempts beyond each task's first
    refused: dict[str, int]  # by limit: "concurrency", "rate"
    refused_s: float
    charged: int  # refusals that spent one of the task's retries
    gave_up: int
    twice: int
    cpu: float  # the worker's processes plus redis-server, seconds


def run(peer: Peer, r: redis.Redis, url: str, log: Path) -> Run:
    for index in range(TASKS):
        peer.send(index, SECONDS)
    worker = peer.worker(url, log)
    try:
        wait_for(lambda: r.llen(LIMITED + "starts"), 120, f"{peer.name}'s first task")
        cpu, redis_cpu = session_cpu(worker.process.pid), server_cpu(r)
        deadline = time.monotonic() + RUN_TIMEOUT
        tries, quiet_since = -1.0, time.monotonic()
        while r.llen(LIMITED + "ends") < TASKS and time.monotonic() < deadline:
            now_tries = sum(float(n) for n in r.hvals(LIMITED + "tries"))
            if now_tries != tries:
                tries, quiet_since = now_tries, time.monotonic()
            elif time.monotonic() - quiet_since > SETTLE and peer.pending(r) == 0:
                break  # nothing left to run: the rest gave up
            time.sleep(0.05)
        cpu = session_cpu(worker.process.pid) - cpu + server_cpu(r) - redis_cpu
    finally:
        worker.stop()
    starts, ends = entries(r, "starts"), entries(r, "ends")
    tries_by_task = [int(n) for n in r.hvals(LIMITED + "tries")]
    return Run(
        done=len({index for index, _ in ends}),
        wall=max(at for _, at in ends) - min(at for _, at in starts) if ends else float("nan"),
        most_running=most_running(r),
        most_starts=most_in_a_second([at for _, at in starts]),
        retries=sum(tries_by_task) - len(tries_by_task),
        refused={limit: int(n) for limit, n in r.hgetall(LIMITED + "refused_by").items()},
        refused_s=counter(r, "refused_s"),
        charged=sum(int(r.hget(LIMITED + "refused_by", limit) or 0) for limit in peer.charged),
        gave_up=peer.gave_up(r),
        twice=twice(r),
        cpu=cpu,
    )


@dataclass
class Kill:
    after_kill: str
    first_start: str
    fresh_done: int
    killed_batch_done: int
    most_running: int
    twice: int
    gave_up: int
    at_end: str


def kill(peer: Peer, r: redis.Redis, url: str, log: Path, window: float) -> Kill:
    for index in range(KILL_TASKS):
        peer.send(index, KILL_SECONDS)
    worker = peer.worker(url, log)
    try:
        wait_for(lambda: int(r.get(LIMITED + "running") or 0) >= CONCURRENCY, 120, "3 running")
    finally:
        worker.kill()
    _, after_kill = peer.permits(r)
    # The killed tasks never count their end: none runs now, and the most at once
    # is counted afresh.
    r.delete(LIMITED + "running", LIMITED + "most")
    worker = peer.worker(url, log)
    restarted = time.time()
    fresh = range(1000, 1000 + FRESH_TASKS)
    for index in fresh:
        peer.send(index, SECONDS)
    try:
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            done = {index for index, _ in entries(r, "ends")}
            if len(done) == KILL_TASKS + FRESH_TASKS:
                # Every task ran: the permits go back as the outcomes are recorded.
                with contextlib.suppress(TimeoutError):
                    wait_for(lambda: peer.pending(r) == 0, 5, "the outcomes")
                break
            time.sleep(0.1)
        _, at_end = peer.permits(r)
    finally:
        worker.stop()
    elapsed = time.time() - restarted
    later = [at for _, at in entries(r, "starts") if at >= restarted]
    done = {index for index, _ in entries(r, "ends")}
    return Kill(
        after_kill=after_kill,
        first_start=(f"{min(later) - restarted:.1f} s" if later else f"none in {elapsed:.0f} s"),
        fresh_done=len(done & set(fresh)),
        killed_batch_done=len(done - set(fresh)),
        most_running=most_running(r),
        twice=twice(r),
        gave_up=peer.gave_up(r),
        at_end=at_end,
    )


def versions() -> str:
    found = []
    for name in ("dramatiq", "huey"):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def spread(values: list[float], form: str) -> str:
    """The median of ``values``, and each of them when there are several."""
    text = form.format(statistics.median(values))
    if len(values) > 1:
        text += " (" + " / ".join(form.format(value) for value in values) + ")"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=list(PEERS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--kill-window",
        type=float,
        default=45,
        metavar="SECONDS",
        help="how long the new worker runs after the kill, unless it ends sooner (45)",
    )
    parser.add_argument("--skip-kill", action="store_true")
    options = parser.parse_args()
    names = [name for name in PEERS if not options.only or name in options.only]
    command = shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv])
    logs = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    load_before = os.getloadavg()
    server = start_redis()
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        r = redis.Redis.from_url(server.url, decode_responses=True)
        info = machine(r)
        peers = [PEERS[name]() for name in names]
        runs: dict[str, list[Run]] = {peer.name: [] for peer in peers}
        kills: dict[str, Kill] = {}
        # Rounds interleave the contenders, each round starting with the next one.
        for round_, peer in in_turns(peers, options.rounds):
            r.flushall()
            done = run(peer, r, server.url, logs / f"{peer.name}.log")
            runs[peer.name].append(done)
            print(f"round {round_ + 1} {peer.name}: {done}", flush=True)
        if not options.skip_kill:
            for peer in peers:
                r.flushall()
                killed = kill(
                    peer, r, server.url, logs / f"{peer.name}-kill.log", options.kill_window
                )
                kills[peer.name] = killed
                print(f"kill -9 {peer.name}: {killed}", flush=True)
    finally:
        server.stop()

    rows = []
    for peer in peers:
        done = runs[peer.name]
        concurrency = [x.refused.get("concurrency", 0) for x in done]
        rate = [x.refused.get("rate", 0) for x in done]
        refused = (
            f"{spread([sum(x.refused.values()) for x in done], '{:,.0f}')} "
            f"({spread(concurrency, '{:,.0f}')} concurrency, {spread(rate, '{:,.0f}')} rate) "
            f"/ {spread([x.refused_s for x in done], '{:.2f} s')}"
        )
        rows.append(
            [
                peer.label,
                f"{min(x.done for x in done)} of {TASKS}",
                spread([x.wall for x in done], "{:.2f} s"),
                max(x.most_running for x in done),
                max(x.most_starts for x in done),
                f"{spread([x.retries for x in done], '{:,.0f}')} "
                f"({spread([x.charged for x in done], '{:,.0f}')})",
                refused,
                max(x.gave_up for x in done),
                max(x.twice for x in done),
                spread([x.cpu for x in done], "{:.2f} s"),
            ]
        )
    print()
    print(f"Machine: {info}; {versions()}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"Command: {command}")
    print(f"Worker logs: {logs}")
    print()
    for peer in peers:
        print(f"- {peer.label}: `{shlex.join(peer.command)}`")
        for setting in peer.settings:
            print(f"  - {setting}")
        print(f"  - refused attempts' thread time: {peer.refusals}")
    print()
    print(
        f"{TASKS} tasks of {SECONDS} s, at most {CONCURRENCY} at once and {RATE} starts a "
        f"second (one key), one worker process of 8 threads; the rate's floor is "
        f"{(TASKS - 1) / RATE + SECONDS:.2f} s; {options.rounds} round(s)"
    )
    print()
    print(
        table(
            [
                "worker",
                "tasks done",
                "first start to last end",
                "most running at once",
                "most starts in any 1 s",
                "attempts beyond the first (of them spent from the retry budget)",
                "attempts refused (by which limit) / thread time in them",
                "gave up",
                "run twice",
                "CPU (worker + Redis)",
            ],
            rows,
        )
    )
    print()
    print(
        "Starts and ends are read in the task bodies (time.time()), not by the limiters' "
        f"clocks: {RATE + 1} starts {1000 // RATE} ms apart span 1.000 s, so a millisecond of "
        f"jitter can put {RATE + 1} in a window of 1 s."
    )
    if kills:
        print()
        print(
            f"kill -9: {KILL_TASKS} tasks of {KILL_SECONDS} s, the worker's process group "
            f"SIGKILLed once {CONCURRENCY} run; then a new worker and {FRESH_TASKS} new "
            f"tasks of {SECONDS} s, watched for up to {options.kill_window:.0f} s"
        )
        print()
        print(
            table(
                [
                    "worker",
                    "permits taken right after kill -9",
                    "first start after the restart",
                    f"new tasks done (of {FRESH_TASKS})",
                    f"killed batch done (of {KILL_TASKS})",
                    "most at once after",
                    "run twice",
                    "gave up",
                    "permits at the end",
                ],
                [
                    [
                        peer.label,
                        kills[peer.name].after_kill,
                        kills[peer.name].first_start,
                        kills[peer.name].fresh_done,
                        kills[peer.name].killed_batch_done,
                        kills[peer.name].most_running,
                        kills[peer.name].twice,
                        kills[peer.name].gave_up,
                        kills[peer.name].at_end,
                    ]
                    for peer in peers
                    if peer.name in kills
                ],
            )
        )


if __name__ == "__main__":
    main()
