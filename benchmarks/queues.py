"""Task queues: redis_components against RQ, Huey, Dramatiq and the book's BLPOP loop.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/queues.py            # all contenders, 3 rounds
    .venv/bin/python benchmarks/queues.py --only ours huey --rounds 1
    .venv/bin/python benchmarks/queues.py --scheduler-overhead 2   # idle schedulers

Each contender runs against a private redis-server that this script starts (never
the machine's Redis), with its library's defaults, and its worker started the way a
user would start it (one worker process, one task at a time); the tasks each library
runs are in benchmarks/queue_apps/:

* enqueue rate: 20,000 no-op tasks enqueued one by one from this process;
* processing rate: one worker process drains those 20,000 tasks (timed from the
  first task it runs to the last, so start-up is not counted);
* latency: enqueue-to-start of 200 tasks sent one at a time to an idle worker;
* delayed start: 20 tasks due 1 to 2.9 s after they are sent (each library's own
  delay feature), how late each starts past its due time, into an idle worker;
* kills: 2,000 tasks that count their start, work 1 ms, and count their finish; the
  worker (every process of it) is SIGKILLed 5 times mid-run and restarted; then each
  contender gets its recovery window to finish. Lost: never finished. Run twice:
  started more than once.

Rates and CPU times are medians over the rounds (kills: one round). The CPU columns
(process CPU time plus redis-server's, per task) vary less than the rates when other
work shares the machine.
"""

from __future__ import annotations

import argparse
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository's root, for benchmarks.queue_apps (imported here and by the workers).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import in_turns, machine, percentile, start_redis, table

ROOT = Path(__file__).resolve().parent.parent

BIN = Path(sys.executable).parent
THROUGHPUT_TASKS = 20_000
LATENCY_SAMPLES = 200
DELAYED_SAMPLES = 20
KILL_TASKS = 2_000
KILL_AT = (0.10, 0.25, 0.40, 0.55, 0.70)  # fractions of KILL_TASKS done


# How this process sends a task: enqueue(name, *args), and enqueue_in(seconds, name, *args).
Senders = tuple[Callable[..., None], Callable[..., None]]


@dataclass
class Contender:
    name: str
    label: str
    command: list[str]
    # Seconds after the last restart in which a dead worker's tasks may still come back.
    recovery_window: float
    setup: Callable[[], Senders] = field(repr=False)
    # The worker command for delayed tasks, when the library needs another one.
    delayed_command: list[str] | None = None
    # What the worker's environment adds.
    env: dict[str, str] = field(default_factory=dict)


def ours() -> Senders:
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.queue_apps.settings"
    import django

    django.setup()
    from benchmarks.queue_apps import tasks

    return (
        lambda name, *args: getattr(tasks, name).enqueue(*args),
        lambda delay, name, *args: getattr(tasks, name).enqueue_in(delay, *args),
    )


def rq() -> Senders:
    from datetime import timedelta

    from rq import Queue

    from benchmarks.queue_apps import rq_tasks, work

    queue = Queue(work.QUEUE, connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
    return (
        lambda name, *args: queue.enqueue(getattr(rq_tasks, name), *args),
        lambda delay, name, *args: queue.enqueue_in(
            timedelta(seconds=delay), getattr(rq_tasks, name), *args
        ),
    )


def huey() -> Senders:
    from benchmarks.queue_apps import huey_tasks

    return (
        lambda name, *args: getattr(huey_tasks, name)(*args),
        lambda delay, name, *args: getattr(huey_tasks, name).schedule(args=args, delay=delay),
    )


def dramatiq() -> Senders:
    from benchmarks.queue_apps import dramatiq_tasks

    return (
        lambda name, *args: getattr(dramatiq_tasks, name).send(*args),
        lambda delay, name, *args: getattr(dramatiq_tasks, name).send_with_options(
            args=args, delay=round(delay * 1000)
        ),
    )


def book() -> Senders:
    from benchmarks.queue_apps import book as book_queue
    from benchmarks.queue_apps import work

    conn = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return (
        lambda name, *args: book_queue.send(conn, name, *args),
        lambda delay, name, *args: book_queue.execute_later(
            conn, work.QUEUE, name, list(args), delay
        ),
    )


CONTENDERS = [
    Contender(
        "ours",
        "redis_components (rc_worker)",
        [sys.executable, "-m", "django", "rc_worker", "bench"],
        recovery_window=10,  # 2 x the default 3 s heartbeat interval, and some
        setup=ours,
    ),
    Contender(
        "ours-metrics",
        "redis_components (rc_worker, METRICS on)",
        [sys.executable, "-m", "django", "rc_worker", "bench"],
        recovery_window=10,
        setup=ours,
        env={"BENCH_METRICS": "1"},
    ),
    Contender(
        "rq",
        "RQ SimpleWorker",
        [str(BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-u", "{url}", "bench"],
        recovery_window=5,
        setup=rq,
        delayed_command=[
            str(BIN / "rq"),
            "worker",
            "--with-scheduler",
            *("-w", "rq.worker.SimpleWorker", "-u", "{url}", "bench"),
        ],
    ),
    Contender(
        "huey",
        "Huey (RedisHuey, 1 thread)",
        [
            str(BIN / "huey_consumer"),
            "benchmarks.queue_apps.huey_tasks.huey",
            "-w",
            "1",
            "-k",
            "thread",
        ],
        recovery_window=5,
        setup=huey,
    ),
    Contender(
        "dramatiq",
        "Dramatiq (RedisBroker, -p 1 -t 1)",
        [str(BIN / "dramatiq"), "benchmarks.queue_apps.dramatiq_tasks", "-p", "1", "-t", "1"],
        recovery_window=90,  # its heartbeat timeout is 60 s
        setup=dramatiq,
    ),
    Contender(
        "book",
        "the book's BLPOP loop",
        [sys.executable, "-m", "benchmarks.queue_apps.book"],
        recovery_window=5,
        setup=book,
    ),
]


class Worker:
    """A contender's worker command in its own process group."""

    stop_timeout = 10  # seconds a SIGTERMed worker gets to finish, before SIGKILL

    def __init__(self, contender: Contender, url: str, log: Path, delayed: bool = False) -> None:
        command = (contender.delayed_command if delayed else None) or contender.command
        command = [part.replace("{url}", url) for part in command]
        self.output = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **contender.env},
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.output.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.output.close()


def session_cpu(session: int) -> float:
    """CPU seconds (user + system) used so far by the processes of a session (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[3]) == session:  # fields[3] is the session id
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def server_cpu(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)


@dataclass
class Throughput:
    enqueue_rate: float  # tasks per second
    enqueue_cpu: float  # CPU microseconds per task: this process plus redis-server
    process_rate: float
    process_cpu: float  # CPU microseconds per task: the worker's processes plus redis-server


def throughput(
    enqueue: Callable[..., None],
    contender: Contender,
    r: redis.Redis,
    url: str,
    log: Path,
    tasks: int = THROUGHPUT_TASKS,
) -> Throughput:
    enqueue("mark", "start")
    begin, cpu, redis_cpu = time.perf_counter(), time.process_time(), server_cpu(r)
    for _ in range(tasks):
        enqueue("noop")
    enqueue_rate = tasks / (time.perf_counter() - begin)
    enqueue_cpu = time.process_time() - cpu + server_cpu(r) - redis_cpu
    enqueue("mark", "end")
    worker = Worker(contender, url, log)
    session = worker.process.pid
    try:
        wait_for(lambda: r.exists("bench:start"), 60, "the first task")
        cpu, redis_cpu = session_cpu(session), server_cpu(r)
        wait_for(lambda: r.exists("bench:end"), 600, "the last task")
        process_cpu = session_cpu(session) - cpu + server_cpu(r) - redis_cpu
    finally:
        worker.stop()
    elapsed = float(r.get("bench:end") or 0) - float(r.get("bench:start") or 0)
    per_task = 1e6 / tasks
    return Throughput(enqueue_rate, enqueue_cpu * per_task, tasks / elapsed, process_cpu * per_task)


def latency(
    enqueue: Callable[..., None], contender: Contender, r: redis.Redis, url: str, log: Path
) -> list[float]:
    worker = Worker(contender, url, log)
    try:
        enqueue("mark", "ready")
        wait_for(lambda: r.exists("bench:ready"), 60, "the worker to start")
        time.sleep(0.5)  # let it settle into its idle wait
        samples = []
        for _ in range(LATENCY_SAMPLES):
            enqueue("started", time.time())
            reply = r.blpop(["bench:latency"], 30)
            if reply is None:
                raise TimeoutError("a latency sample did not arrive")
            samples.append(float(reply[1]))
            time.sleep(0.02)  # the worker goes idle again
        return samples
    finally:
        worker.stop()


def delayed_start(
    enqueue: Callable[..., None],
    enqueue_in: Callable[..., None],
    contender: Contender,
    r: redis.Redis,
    url: str,
    log: Path,
) -> list[float]:
    """How late, in seconds, delayed tasks start past their due time."""
    worker = Worker(contender, url, log, delayed=True)
    try:
        enqueue("mark", "ready")
        wait_for(lambda: r.exists("bench:ready"), 60, "the worker to start")
        time.sleep(0.5)
        for i in range(DELAYED_SAMPLES):
            delay = 1.0 + 0.1 * i
            enqueue_in(delay, "late", time.time() + delay)
        wait_for(lambda: r.llen("bench:late") >= DELAYED_SAMPLES, 60, "the delayed tasks")
        return [float(value) for value in r.lrange("bench:late", 0, -1)]
    finally:
        worker.stop()


def kills(
    enqueue: Callable[..., None], contender: Contender, r: redis.Redis, url: str, log: Path
) -> tuple[int, int]:
    """Tasks never finished, and extra starts, after 5 SIGKILLs of the whole worker."""
    for i in range(KILL_TASKS):
        enqueue("record", f"t{i}")
    for fraction in KILL_AT:
        worker = Worker(contender, url, log)
        wait_for(lambda f=fraction: r.hlen("bench:started") >= f * KILL_TASKS, 300, "progress")
        worker.kill()
    worker = Worker(contender, url, log)
    restarted = time.monotonic()
    try:
        last, quiet_since = -1, time.monotonic()
        while r.hlen("bench:finished") < KILL_TASKS:
            done = r.hlen("bench:finished")
            if done != last:
                last, quiet_since = done, time.monotonic()
            settled = time.monotonic() - quiet_since > 3
            if settled and time.monotonic() - restarted > contender.recovery_window:
                break
            time.sleep(0.05)
    finally:
        worker.stop()
    starts = [int(count) for count in r.hvals("bench:started")]
    return KILL_TASKS - r.hlen("bench:finished"), sum(starts) - len(starts)


def count_commands(url: str, seconds: float) -> tuple[int, int]:
    """Commands the server ran during ``seconds``: (sent by clients, run inside scripts),
    as MONITOR sees them."""
    monitor_client = redis.Redis.from_url(url)
    sent = inside = 0
    stop = time.monotonic() + seconds
    with monitor_client.monitor() as monitor:
        pinger = redis.Redis.from_url(url)
        for command in monitor.listen():
            if time.monotonic() >= stop:
                break
            if command["client_type"] == "lua":
                inside += 1
            else:
                sent += 1
            if sent % 50 == 0:
                pinger.ping()  # MONITOR yields only when something runs: keep it ticking
        pinger.close()
    monitor_client.close()
    return sent, inside


def scheduler_overhead(url: str, minutes: float, logs: Path) -> None:
    """Commands per minute of idle rc_workers with no schedule, then with 100.

    The schedules' task goes to a queue these workers do not serve, so the difference
    is the cost of scheduling alone (claims and reads), not of running the tasks.
    """
    ours_contender = CONTENDERS[0]
    ours_contender.setup()  # the workers' Django settings
    rows = []
    for count in (1, 4):
        per_minute = {}
        for schedules in (0, 100):
            server_client = redis.Redis.from_url(url)
            server_client.flushall()
            env = {"BENCH_SCHEDULES": str(schedules)}
            contender = Contender(
                "ours", "", ours_contender.command, 10, ours_contender.setup, env=env
            )
            workers = [
                Worker(contender, url, logs / f"sched-{count}-{schedules}.log")
                for _ in range(count)
            ]
            try:
                time.sleep(10)  # started, registered, schedules stored
                sent, inside = count_commands(url, minutes * 60)
            finally:
                for worker in workers:
                    worker.stop()
            per_minute[schedules] = (sent / minutes, (sent + inside) / minutes)
        sent_cost = per_minute[100][0] - per_minute[0][0]
        all_cost = per_minute[100][1] - per_minute[0][1]
        rows.append(
            [
                str(count),
                f"{per_minute[0][0]:,.0f} / {per_minute[0][1]:,.0f}",
                f"{per_minute[100][0]:,.0f} / {per_minute[100][1]:,.0f}",
                f"{sent_cost / 100:.2f}",
                f"{all_cost / 100:.2f}",
            ]
        )
        print(f"{count} workers: {per_minute}", flush=True)
    headers = [
        "idle rc_worker processes",
        "commands/min, no schedule (sent / all)",
        "commands/min, 100 schedules (sent / all)",
        "scheduling, sent per schedule per minute",
        "scheduling, all (scripts' too) per schedule per minute",
    ]
    print()
    print(table(headers, rows))


def versions() -> str:
    names = ("rq", "huey", "dramatiq")
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=[c.name for c in CONTENDERS])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-kills", action="store_true")
    parser.add_argument(
        "--scheduler-overhead",
        type=float,
        metavar="MINUTES",
        help="instead of the rest: measure idle schedulers for MINUTES per setting",
    )
    options = parser.parse_args()
    contenders = [c for c in CONTENDERS if not options.only or c.name in options.only]
    logs = Path(tempfile.mkdtemp(prefix="rc-bench-"))
    load_before = os.getloadavg()
    server = start_redis()
    try:
        os.environ["BENCH_REDIS_URL"] = server.url
        r = server.client()
        info = machine(r)
        if options.scheduler_overhead:
            print(f"Machine: {info}")
            scheduler_overhead(server.url, options.scheduler_overhead, logs)
            return
        senders = {contender.name: contender.setup() for contender in contenders}
        for enqueue, _ in senders.values():  # connections, scripts, caches: warm for all
            for _ in range(2000):
                enqueue("noop")
            r.flushall()
        results: dict[str, dict[str, Any]] = {
            c.name: {"runs": [], "latency": [], "late": []} for c in contenders
        }
        # Rounds interleave the contenders, each round starting with the next one, so
        # that other load on the machine falls on all of them alike.
        for round_, contender in in_turns(contenders, options.rounds):
            (enqueue, enqueue_in), result = senders[contender.name], results[contender.name]
            log = logs / f"{contender.name}.log"
            r.flushall()
            run = throughput(enqueue, contender, r, server.url, log)
            result["runs"].append(run)
            r.flushall()
            result["latency"] += latency(enqueue, contender, r, server.url, log)
            r.flushall()
            result["late"] += delayed_start(enqueue, enqueue_in, contender, r, server.url, log)
            print(
                f"round {round_ + 1} {contender.name}: enqueue {run.enqueue_rate:,.0f}/s "
                f"({run.enqueue_cpu:.0f} us CPU), process {run.process_rate:,.0f}/s "
                f"({run.process_cpu:.0f} us CPU), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        if not options.skip_kills:
            for contender in contenders:
                r.flushall()
                log = logs / f"{contender.name}.log"
                enqueue = senders[contender.name][0]
                lost, twice = kills(enqueue, contender, r, server.url, log)
                results[contender.name] |= {"lost": lost, "twice": twice}
                print(f"{contender.name} kills: lost {lost}, run twice {twice}", flush=True)
    finally:
        server.stop()
    rows = []
    for contender in contenders:
        result = results[contender.name]
        late = result["late"]

        def median(field: str, runs: list[Throughput] = result["runs"]) -> float:
            return statistics.median(getattr(run, field) for run in runs)

        rows.append(
            [
                contender.label,
                f"{median('enqueue_rate'):,.0f}",
                f"{median('enqueue_cpu'):.0f} us",
                f"{median('process_rate'):,.0f}",
                f"{median('process_cpu'):.0f} us",
                f"{percentile(result['latency'], 0.5) * 1000:.2f} ms",
                f"{percentile(result['latency'], 0.99) * 1000:.2f} ms",
                f"{percentile(late, 0.5) * 1000:.0f} / {max(late) * 1000:.0f} ms",
                result.get("lost", "-"),
                result.get("twice", "-"),
            ]
        )
    headers = [
        "queue",
        "enqueue (tasks/s)",
        "enqueue CPU/task",
        "processed (tasks/s)",
        "processing CPU/task",
        "latency p50",
        "latency p99",
        "delayed start, late by p50 / max",
        "lost after 5 kills",
        "run twice",
    ]
    print()
    print(f"Machine: {info}; {versions()}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"Worker logs: {logs}")
    print()
    print(table(headers, rows))


if __name__ == "__main__":
    main()
