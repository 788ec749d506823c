"""Django's Tasks framework: our RedisTaskBackend against django-tasks-rq, django-tasks-db
and django-tasks-redis.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/tasks_backends.py                  # every contender, 3 rounds
    .venv/bin/python benchmarks/tasks_backends.py --only ours rq --rounds 1 --tasks 2000

One run starts a private redis-server (``redis_components.embedded``) and, when the
machine has PostgreSQL's binaries, a private PostgreSQL server (its own directory and
socket under /tmp, run as the ``postgres`` user when this runs as root), then measures
every contender on them. Tasks are declared with Django's ``@task`` and enqueued with
``.enqueue()`` (benchmarks/django_tasks_apps/); each contender is configured as its
documentation shows, with no options, and its worker is started as its users start
it, as one worker process:

* ours: ``RedisTaskBackend``, ``manage.py rc_worker``;
* rq: django-tasks-rq, ``manage.py rqworker --job-class django_tasks_rq.Job`` (RQ's
  default ``Worker``, which forks a child for every job);
* rq-simple: the same with ``--worker-class rq.worker.SimpleWorker`` (no fork per job:
  RQ's fastest one-process worker, measured to be generous to RQ);
* db-sqlite, db-postgresql: django-tasks-db, ``manage.py db_worker``, on SQLite and on
  PostgreSQL (Django's defaults for both);
* tasks-redis: django-tasks-redis (Redis Streams), configured as its README's quick
  start shows (``QUEUES: []``, ``OPTIONS: {"REDIS_URL": ...}``), worker
  ``manage.py run_redis_tasks --continuous`` (its README's long-running worker: without
  ``--continuous`` it drains the queue and exits).

Measured, per contender:

* enqueue rate: ``--tasks`` no-op tasks enqueued one by one from one process;
* processing rate: one worker process drains them (timed from the first task it runs
  to the last, so start-up is not counted), and the CPU time per task of the worker's
  processes plus redis-server's;
* results readable per second: ``task.get_result(id)`` of finished tasks, one by one;
* latency: enqueue-to-start of ``--latency-samples`` tasks sent one at a time into an
  idle worker, at random moments 0.02 to 1.02 s apart (so that a worker that polls
  every second is met at every phase of its poll);
* kills: 1,000 tasks that count their start, work 1 ms, and count their finish; the
  worker (every process of it) is SIGKILLed 5 times mid-run and restarted; then every
  contender gets the same recovery window (``KILL_WINDOW``). Lost: never finished. Run
  twice: started more than once. Stuck: results that still say RUNNING;
* recovery: a 2 s task is running when its worker is SIGKILLed; a new worker starts at
  once; the time until the task starts again (``--recovery-window``, 30 s by default, at
  most).

Each contender's measurements run in a child process configured for it alone (its
``TASKS``, its apps), which warms up before it measures. Rates are medians over the
rounds; each round runs every contender, starting with the next one each round; latency
percentiles are over the samples of every round. Kills and recovery run once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository's root, for benchmarks.django_tasks_apps (here and in the workers).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import queues
import redis
from common import in_turns, machine, median, percentile, start_redis, table
from queues import server_cpu, wait_for

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "benchmarks.django_tasks_apps.settings"

WARMUP_TASKS = 500
RESULT_READS = 2_000
KILL_TASKS = 1_000
KILL_AT = (0.10, 0.25, 0.40, 0.55, 0.70)  # fractions of KILL_TASKS started
# Seconds every contender gets, after the last restart, to finish what its dead workers
# left: ours needs 2 x its 3 s heartbeat interval at most; RQ and django-tasks-db never
# run a dead worker's task again (see benchmarks/README.md), and django-tasks-redis only
# once it has been pending for its REDIS_CLAIM_TIMEOUT (300 s by default, found by a
# sweep every 60 s), so this window changes none of their counts.
KILL_WINDOW = 15.0
RECOVERY_WINDOW = 30.0  # the default of --recovery-window


@dataclass(frozen=True)
class Contender:
    name: str
    label: str
    backend: str  # BENCH_BACKEND: which TASKS entry the settings use
    database: str  # "sqlite" or "postgresql"
    command: tuple[str, ...]  # the manage.py command that runs its worker


CONTENDERS = [
    Contender("ours", "ours: RedisTaskBackend, rc_worker", "ours", "sqlite", ("rc_worker",)),
    Contender(
        "rq",
        "django-tasks-rq, rqworker (RQ's forking Worker)",
        "rq",
        "sqlite",
        ("rqworker", "--job-class", "django_tasks_rq.Job"),
    ),
    Contender(
        "rq-simple",
        "django-tasks-rq, rqworker --worker-class SimpleWorker",
        "rq",
        "sqlite",
        ("rqworker", "--job-class", "django_tasks_rq.Job", "--worker-class", "rq.SimpleWorker"),
    ),
    Contender("db-sqlite", "django-tasks-db on SQLite, db_worker", "db", "sqlite", ("db_worker",)),
    Contender(
        "db-postgresql",
        "django-tasks-db on PostgreSQL, db_worker",
        "db",
        "postgresql",
        ("db_worker",),
    ),
    Contender(
        "tasks-redis",
        "django-tasks-redis, run_redis_tasks --continuous",
        "tasks-redis",
        "sqlite",
        ("run_redis_tasks", "--continuous"),
    ),
]


# -- a private PostgreSQL ---------------------------------------------------------------


def postgres_binaries() -> Path | None:
    """The directory of PostgreSQL's server binaries (Debian's newest, else PATH), or None."""
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    for folder in reversed(debian):
        if (folder / "postgres").is_file() and (folder / "initdb").is_file():
            return folder
    found = shutil.which("postgres")
    return Path(found).resolve().parent if found and shutil.which("initdb") else None


class PrivatePostgres:
    """A PostgreSQL server owned by this process: its own directory, a unix socket only.

    PostgreSQL refuses to run as root; as root, it runs as the ``postgres`` user that
    Debian's packages create. Its settings are PostgreSQL's defaults.
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="rc-pg-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.version = ""
        self.user: str | None = "postgres" if os.geteuid() == 0 else None

    def start(self) -> PrivatePostgres:
        binaries = postgres_binaries()
        if binaries is None:
            raise RuntimeError("no PostgreSQL server binaries (postgres, initdb) found")
        if self.user is not None:
            shutil.chown(self.directory, self.user)
        data = self.directory / "data"
        log = self.directory / "postgres.log"
        self._run(
            [str(binaries / "initdb"), "-D", str(data), "-U", "bench", "--auth=trust", "-E", "UTF8"]
        )
        # die_with_parent imports ctypes in the child, where the postgres user may not
        # be allowed to read this interpreter's modules: import it here, once.
        import ctypes  # noqa: F401

        from redis_components.embedded import die_with_parent, free_port

        self.port = free_port()
        with open(log, "wb") as output:
            self.process = subprocess.Popen(
                [
                    str(binaries / "postgres"),
                    *("-D", str(data), "-p", str(self.port), "-k", str(self.directory)),
                    *("-c", "listen_addresses="),
                ],
                cwd=self.directory,
                stdout=output,
                stderr=subprocess.STDOUT,
                user=self.user,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(**self.params("postgres"), autocommit=True) as connection:
                    connection.execute("CREATE DATABASE bench")
                    self.version = str(connection.execute("SHOW server_version").fetchone()[0])
                break
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"PostgreSQL did not start: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        return self

    def params(self, dbname: str = "bench") -> dict[str, Any]:
        return {"host": str(self.directory), "port": self.port, "user": "bench", "dbname": dbname}

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            command, cwd=self.directory, user=self.user, capture_output=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{command[0]} failed: {done.stderr.decode()[-2000:]}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


# -- what runs in a contender's child process -----------------------------------------------


class Worker(queues.Worker):
    """A contender's worker command (``python -m django <command>``) in its own session."""

    stop_timeout = 20

    def __init__(self, contender: Contender, log: Path) -> None:
        self.output = open(log, "ab")  # noqa: SIM115 - closed in stop() or kill()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", *contender.command],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=self.output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def cpu(self) -> float:
        """CPU seconds used so far by the worker's processes, including its ended children."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:  # the process ended meanwhile
                continue
            if int(fields[3]) == self.process.pid:  # fields[3]: the session id
                # utime, stime, and cutime, cstime: RQ's worker forks a child per job.
                total += sum(int(value) for value in fields[11:15])
        return total / ticks


@contextmanager
def running(contender: Contender, log: Path) -> Iterator[Worker]:
    worker = Worker(contender, log)
    try:
        yield worker
    finally:
        worker.stop()


class Child:
    """One contender's measurements, in a process whose Django settings are its own."""

    def __init__(self, contender: Contender, r: redis.Redis, log: Path) -> None:
        import django

        django.setup()
        from benchmarks.django_tasks_apps import tasks

        self.contender = contender
        self.r = r
        self.log = log
        self.tasks = tasks

    def reset(self) -> None:
        """Empty the private Redis and, for django-tasks-db, its table (no worker runs)."""
        self.r.flushall()
        if self.contender.backend == "db":
            from django_tasks_db.models import DBTaskResult

            DBTaskResult.objects.all().delete()

    def warm_up(self) -> None:
        """Connections, scripts, imports and caches, for the enqueuing process."""
        ids = [self.tasks.noop.enqueue().id for _ in range(WARMUP_TASKS)]
        for result_id in ids[:100]:
            self.tasks.noop.get_result(result_id)
        self.reset()

    def round(self, tasks: int, latency_samples: int, seed: int) -> dict[str, Any]:
        self.warm_up()
        measured = self.throughput(tasks)
        measured["reads_per_s"], measured["missing"] = self.results(measured.pop("ids"))
        self.reset()
        measured["latency"] = self.latency(latency_samples, random.Random(seed))
        self.reset()
        return measured

    def throughput(self, count: int) -> dict[str, Any]:
        noop, r = self.tasks.noop, self.r
        self.tasks.mark.enqueue("start")
        begin = time.perf_counter()
        ids = [noop.enqueue().id for _ in range(count)]
        enqueue_rate = count / (time.perf_counter() - begin)
        self.tasks.mark.enqueue("end")
        with running(self.contender, self.log) as worker:
            wait_for(lambda: r.exists("bench:start"), 120, "the first task")
            cpu, redis_cpu = worker.cpu(), server_cpu(r)
            wait_for(lambda: r.exists("bench:end"), 3600, "the last task")
            process_cpu = worker.cpu() - cpu + server_cpu(r) - redis_cpu
        elapsed = float(r.get("bench:end") or 0) - float(r.get("bench:start") or 0)
        return {
            "enqueue_rate": enqueue_rate,
            "process_rate": count / elapsed,
            "process_cpu_us": process_cpu * 1e6 / count,
            "ids": ids,
        }

    def results(self, ids: list[str]) -> tuple[float, int]:
        """Results read per second (the last ``RESULT_READS`` tasks), and how many were gone."""
        chosen = ids[-RESULT_READS:]
        missing = 0
        begin = time.perf_counter()
        for result_id in chosen:
            try:
                result = self.tasks.noop.get_result(result_id)
            except does_not_exist():
                missing += 1
                continue
            if result.status != "SUCCESSFUL":
                raise RuntimeError(f"task {result_id} is {result.status}, not finished")
        return len(chosen) / (time.perf_counter() - begin), missing

    def latency(self, samples: int, rng: random.Random) -> list[float]:
        r = self.r
        with running(self.contender, self.log):
            self.tasks.mark.enqueue("ready")
            wait_for(lambda: r.exists("bench:ready"), 120, "the worker to start")
            found = []
            for _ in range(samples):
                time.sleep(rng.uniform(0.02, 1.02))  # the worker is idle; a poller's phase varies
                self.tasks.started.enqueue(time.time())
                reply = r.blpop(["bench:latency"], 60)
                if reply is None:
                    raise TimeoutError("a latency sample did not arrive")
                found.append(float(reply[1]))
        return found

    def kills(self) -> dict[str, Any]:
        """Lost, run twice and stuck RUNNING among KILL_TASKS after 5 kills of the worker."""
        r = self.r
        self.reset()
        ids = [self.tasks.record.enqueue(f"t{i}").id for i in range(KILL_TASKS)]
        for fraction in KILL_AT:
            worker = Worker(self.contender, self.log)
            goal = fraction * KILL_TASKS
            wait_for(lambda goal=goal: r.hlen("bench:started") >= goal, 600, "progress")
            worker.kill()
        with running(self.contender, self.log):
            restarted = last_change = time.monotonic()
            done = -1
            while r.hlen("bench:finished") < KILL_TASKS:
                if r.hlen("bench:finished") != done:
                    done, last_change = r.hlen("bench:finished"), time.monotonic()
                quiet = time.monotonic() - last_change > 3
                if quiet and time.monotonic() - restarted > KILL_WINDOW:
                    break
                time.sleep(0.05)
        starts = [int(count) for count in r.hvals("bench:started")]
        statuses = Counter(str(self.tasks.record.get_result(i).status) for i in ids)
        return {
            "lost": KILL_TASKS - r.hlen("bench:finished"),
            "twice": sum(starts) - len(starts),
            "statuses": dict(statuses),
        }

    def recovery(self, window: float) -> dict[str, Any]:
        """Seconds from the kill of a worker running a task until the task starts again."""
        r = self.r
        self.reset()
        worker = Worker(self.contender, self.log)
        result = self.tasks.slow.enqueue("recovery")
        wait_for(lambda: r.llen("bench:slow") >= 1, 120, "the slow task to start")
        worker.kill()
        killed = time.time()
        with running(self.contender, self.log):
            deadline = time.monotonic() + window
            while r.llen("bench:slow") < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            again = r.lindex("bench:slow", 1)
            status = str(self.tasks.slow.get_result(result.id).status)
        return {
            "seconds": float(again) - killed if again else None,
            "status": status,
            "window": window,
        }


def does_not_exist() -> tuple[type[Exception], ...]:
    """The exceptions of a missing result: Django's, and the backport's (django-tasks-rq)."""
    from django.tasks.exceptions import TaskResultDoesNotExist

    try:
        from django_tasks.exceptions import TaskResultDoesNotExist as BackportDoesNotExist
    except ImportError:
        return (TaskResultDoesNotExist,)
    return (TaskResultDoesNotExist, BackportDoesNotExist)


def child(contender: Contender, options: argparse.Namespace) -> None:
    """Run one contender's part of a round (or its kills) and print it as JSON."""
    r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    measured = Child(contender, r, Path(options.log))
    if options.phase == "round":
        found = measured.round(options.tasks, options.latency_samples, options.seed)
    else:
        found = {"kills": measured.kills(), "recovery": measured.recovery(options.recovery_window)}
    print(json.dumps(found))


# -- the run ------------------------------------------------------------------------------


@dataclass
class Setup:
    """Where the contenders' children find the servers."""

    redis_url: str
    sqlite: Path
    postgres: PrivatePostgres | None

    def env(self, contender: Contender) -> dict[str, str]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "PYTHONPATH": str(ROOT),
            "BENCH_BACKEND": contender.backend,
            "BENCH_REDIS_URL": self.redis_url,
            "BENCH_DB_ENGINE": contender.database,
        }
        if contender.database == "postgresql":
            assert self.postgres is not None
            env |= {
                "BENCH_DB_NAME": "bench",
                "BENCH_DB_HOST": str(self.postgres.directory),
                "BENCH_DB_PORT": str(self.postgres.port),
            }
        else:
            env["BENCH_DB_NAME"] = str(self.sqlite)
        return env


def run_child(setup: Setup, contender: Contender, logs: Path, *arguments: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            contender.name,
            "--log",
            str(logs / f"{contender.name}.log"),
            *arguments,
        ],
        cwd=ROOT,
        env=setup.env(contender),
        stdout=subprocess.PIPE,
        check=True,
    )
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def migrate(setup: Setup, contender: Contender) -> None:
    """django-tasks-db's table, in the contender's database."""
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=setup.env(contender),
        check=True,
    )


def versions(postgres: PrivatePostgres | None) -> str:
    import django

    names = (
        *("django-tasks-db", "django-tasks-rq", "django-rq", "rq", "django-tasks"),
        *("django-tasks-redis", "psycopg"),
    )
    found = [f"Django {django.get_version()}"]
    for name in names:  # those not installed were not measured (--only)
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    found.append(f"SQLite {sqlite3.sqlite_version}")
    if postgres is not None:
        found.append(f"PostgreSQL {postgres.version}")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", choices=[c.name for c in CONTENDERS])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=5_000, help="tasks per throughput run")
    parser.add_argument("--latency-samples", type=int, default=100, help="per round")
    parser.add_argument("--skip-kills", action="store_true")
    parser.add_argument(
        "--recovery-window",
        type=float,
        default=RECOVERY_WINDOW,
        help="seconds a killed task gets to start again under a new worker",
    )
    # Internal: run one contender's part in a child process configured for it.
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--phase", default="round", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(next(c for c in CONTENDERS if c.name == options.child), options)
        return
    contenders = [c for c in CONTENDERS if not options.only or c.name in options.only]
    logs = Path(tempfile.mkdtemp(prefix="rc-bench-tasks-"))
    load_before = os.getloadavg()
    server = start_redis()
    postgres: PrivatePostgres | None = None
    if any(c.database == "postgresql" for c in contenders):
        try:
            postgres = PrivatePostgres().start()
        except (RuntimeError, OSError, ImportError) as error:
            print(f"PostgreSQL cannot run here, so db-postgresql is left out: {error}")
            contenders = [c for c in contenders if c.database != "postgresql"]
    setup = Setup(server.url, logs / "bench.sqlite3", postgres)
    results: dict[str, dict[str, Any]] = {c.name: {"runs": [], "latency": []} for c in contenders}
    try:
        info = machine(server.client())
        for database in ("sqlite", "postgresql"):
            found = [c for c in contenders if c.backend == "db" and c.database == database]
            if found:
                migrate(setup, found[0])
        # Rounds interleave the contenders, each round starting with the next one, so
        # that other load on the machine falls on all of them alike.
        for round_, contender in in_turns(contenders, options.rounds):
            run = run_child(
                setup,
                contender,
                logs,
                *("--tasks", str(options.tasks)),
                *("--latency-samples", str(options.latency_samples)),
                *("--seed", str(round_)),
            )
            results[contender.name]["latency"] += run.pop("latency")
            results[contender.name]["runs"].append(run)
            print(
                f"round {round_ + 1} {contender.name}: enqueue {run['enqueue_rate']:,.0f}/s, "
                f"process {run['process_rate']:,.0f}/s ({run['process_cpu_us']:,.0f} us "
                f"CPU), results {run['reads_per_s']:,.0f}/s, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        if not options.skip_kills:
            for contender in contenders:
                found = run_child(
                    setup,
                    contender,
                    logs,
                    *("--phase", "kills"),
                    *("--recovery-window", str(options.recovery_window)),
                )
                results[contender.name] |= found
                print(f"{contender.name}: {found}", flush=True)
    finally:
        server.stop()
        if postgres is not None:
            postgres.stop()
    report(contenders, results, info, versions(postgres), load_before, logs)


def report(
    contenders: list[Contender],
    results: dict[str, dict[str, Any]],
    info: str,
    versions: str,
    load_before: tuple[float, float, float],
    logs: Path,
) -> None:
    def middle(name: str, field: str) -> float:
        return median([run[field] for run in results[name]["runs"]])

    rows = []
    for contender in contenders:
        result = results[contender.name]
        kills, recovery = result.get("kills", {}), result.get("recovery", {})
        # A measured count, 0 when no result says RUNNING; "-" only when kills did not run.
        stuck = kills["statuses"].get("RUNNING", 0) if kills else "-"
        if recovery:
            seconds = recovery["seconds"]
            recovered = (
                f"{seconds:.1f} s"
                if seconds is not None
                else (f"not within {recovery['window']:.0f} s ({recovery['status']})")
            )
        else:
            recovered = "-"
        rows.append(
            [
                contender.label,
                f"{middle(contender.name, 'enqueue_rate'):,.0f}",
                f"{middle(contender.name, 'process_rate'):,.0f}",
                f"{middle(contender.name, 'process_cpu_us'):,.0f} us",
                f"{middle(contender.name, 'reads_per_s'):,.0f}",
                f"{percentile(result['latency'], 0.5) * 1000:.2f} ms",
                f"{percentile(result['latency'], 0.99) * 1000:.2f} ms",
                kills.get("lost", "-"),
                kills.get("twice", "-"),
                stuck,
                recovered,
            ]
        )
    headers = [
        "backend, worker",
        "enqueue (tasks/s)",
        "processed (tasks/s)",
        "processing CPU/task",
        "results read (/s)",
        "latency p50",
        "latency p99",
        f"lost after {len(KILL_AT)} kills",
        "run twice",
        "stuck RUNNING",
        "killed task runs again after",
    ]
    print()
    print(f"Machine: {info}")
    print(f"Versions: {versions}")
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"Worker logs: {logs}")
    print()
    print(table(headers, rows))
    names = [c.name for c in contenders]
    if "ours" in names:
        print()
        ours = results["ours"]["runs"]
        for other in (name for name in names if name != "ours"):
            theirs = results[other]["runs"]
            per_round = ", ".join(
                f"{mine['process_rate'] / their['process_rate']:.1f}x"
                for mine, their in zip(ours, theirs, strict=True)
            )
            processing = middle("ours", "process_rate") / middle(other, "process_rate")
            print(
                f"ours / {other}: processing {processing:.1f}x "
                f"(per round {per_round}), enqueue "
                f"{middle('ours', 'enqueue_rate') / middle(other, 'enqueue_rate'):.1f}x, results "
                f"{middle('ours', 'reads_per_s') / middle(other, 'reads_per_s'):.1f}x"
            )


if __name__ == "__main__":
    main()
