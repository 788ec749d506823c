"""Throughput across a network (issue 62): first-to-last runs with added round-trip time.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    taskset -c 1 .venv/bin/python benchmarks/latency.py       # 0, 0.5, 1 ms; 3 rounds
    taskset -c 1 .venv/bin/python benchmarks/latency.py --rtt 0 1 --rounds 1 --tasks 500
    .venv/bin/python benchmarks/latency.py --method proxy     # skip the tc netem attempt

Users run Redis across a network (0.3-1 ms a round trip); on one machine every round
trip is ~50 us. This script adds round-trip time between the workers and one private
redis-server (started by common.start_redis(), never the machine's Redis), the same
for every contender, and measures first-to-last throughput as first_to_last.py does:
the tasks are enqueued first (by this process, over the server's unix socket, with no
delay), then one worker process starts, and the rate runs from the first task's start
to the last task's end, as the tasks record them (start-up not counted).

How the round-trip time is added (``--method``):

* ``netem`` (tried first by ``auto``): ``tc qdisc`` on ``lo``, a ``prio`` root with a
  fourth band under ``netem delay RTT/2``, and u32 filters sending only packets to or
  from the benchmark server's port into it (nothing else on loopback is delayed). It
  needs CAP_NET_ADMIN and a kernel with sch_prio and sch_netem; it is removed on exit
  (``tc qdisc del dev lo root``), on errors and on Ctrl-C too.
* ``proxy`` (the fallback): benchmarks/delay_proxy.py, a TCP proxy that holds each
  chunk RTT/2 in each direction, in order, one process per added RTT, pinned to its
  own CPU (``--proxy-cpu``, default 0); its CPU time per task is reported.

Added RTT 0 is the direct connection in both methods. Before the runs and after them,
the round trip of a redis-py ``PING`` is measured (200 of them) at each added RTT: the
real added RTT, which the proxy's own handling makes a little larger than asked.

Contenders, one worker process each, with the same task counts:

* no-op tasks (benchmarks/queue_apps/, as queues.py and first_to_last.py): ours
  ``rc_worker -c 1``, Huey ``huey_consumer -w 1 -k thread``, Dramatiq ``-p 1 -t 1``;
* tasks that ``time.sleep(0.005)`` then record their start and end with one RPUSH
  (benchmarks/concurrency_apps/), 8 in flight: ours ``rc_worker -c 1 --threads 8``,
  Huey ``-w 8 -k thread``, Dramatiq ``-p 1 -t 8``. Ideal at 0 ms: 1,600 tasks/s.

Each round runs every (RTT, contender) pair once, the contenders starting one later
each round (and the RTTs too), so that other load falls on all alike; the tables give
medians over the rounds. At 0 ms the server's ``INFO commandstats`` is read before the
worker starts and after the last task: commands per task (the scripts' own commands
counted too; this script's own polling subtracted). "Serial round trips per task" is
(1 / rate at the RTT - 1 / rate at 0 ms) / the added PING RTT measured: how many round
trips each task waits for, one after another, in the worker.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from common import machine, percentile, reply_parser, start_redis, table
from queues import CONTENDERS, Contender, Worker, session_cpu, versions, wait_for

from redis_components.embedded import die_with_parent

BIN = Path(sys.executable).parent
PROXY = Path(__file__).resolve().parent / "delay_proxy.py"
SLEEP = 0.005  # seconds each sleeping task waits
THREADS = 8
PINGS = 200


@dataclasses.dataclass
class Entry:
    """A contender of one workload: its worker and how this process enqueues a task."""

    name: str  # "ours", "huey", "dramatiq"
    contender: Contender
    enqueue: Callable[[], None]
    send: Callable[..., None] = print  # send(task name, *args): the no-op workload's marks


def noop_entries() -> list[Entry]:
    """No-op tasks: queues.py's contenders, ours with ``-c 1`` spelled out."""
    by_name = {c.name: c for c in CONTENDERS}
    ours = by_name["ours"]
    ours = dataclasses.replace(
        ours, label="ours, rc_worker -c 1", command=[*ours.command, "-c", "1"]
    )
    entries = []
    for contender in (ours, by_name["huey"], by_name["dramatiq"]):
        send = contender.setup()[0]
        entries.append(Entry(contender.name, contender, lambda send=send: send("noop"), send))
    return entries


def sleep_entries() -> list[Entry]:
    """5 ms sleeping tasks, 8 threads per worker process (benchmarks/concurrency_apps/).

    This process enqueues ours in queue_apps' settings: redis_components warns that
    ``conc.sleep`` was registered after start-up, which only its workers need to know;
    theirs run in concurrency_apps' settings, where it is registered at start-up.
    """
    from benchmarks.concurrency_apps import dramatiq_tasks, huey_tasks, tasks
    from benchmarks.concurrency_apps.work import QUEUE

    apps = "benchmarks.concurrency_apps"
    threads = str(THREADS)

    def worker(name: str, label: str, command: list[str], **env: str) -> Contender:
        return Contender(name, label, command, 10, lambda: (print, print), env=env)

    return [
        Entry(
            "ours",
            worker(
                "ours",
                f"ours, rc_worker -c 1 --threads {threads}",
                [
                    sys.executable,
                    "-m",
                    "django",
                    "rc_worker",
                    QUEUE,
                    "-c",
                    "1",
                    "--threads",
                    threads,
                ],
                DJANGO_SETTINGS_MODULE=f"{apps}.settings",
            ),
            lambda: tasks.sleep.enqueue(SLEEP),
        ),
        Entry(
            "huey",
            worker(
                "huey",
                f"Huey, -w {threads} -k thread",
                [
                    str(BIN / "huey_consumer"),
                    f"{apps}.huey_tasks.huey",
                    "-w",
                    threads,
                    "-k",
                    "thread",
                ],
            ),
            lambda: huey_tasks.sleep(SLEEP),
        ),
        Entry(
            "dramatiq",
            worker(
                "dramatiq",
                f"Dramatiq, -p 1 -t {threads}",
                [str(BIN / "dramatiq"), f"{apps}.dramatiq_tasks", "-p", "1", "-t", threads],
            ),
            lambda: dramatiq_tasks.sleep.send(SLEEP),
        ),
    ]


# --- Added round-trip time -------------------------------------------------------------


def tc(command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *command.split()], capture_output=True, text=True, check=check)


class Netem:
    """``tc netem`` on loopback for one port only; ``url(rtt)`` applies ``rtt``."""

    name = "tc netem on lo, the server's port only"

    def __init__(self, port: int, direct_url: str) -> None:
        self.port, self.direct_url = port, direct_url
        self.applied = False
        atexit.register(self.close)
        try:
            current = tc("qdisc show dev lo").stdout.split()
            if current[:2] != ["qdisc", "noqueue"]:  # someone else's: leave it alone
                raise RuntimeError(f"lo already has a root qdisc: {' '.join(current)}")
            tc("qdisc add dev lo root handle 1: prio bands 4")
            self.applied = True
            tc("qdisc add dev lo parent 1:4 handle 40: netem delay 0us")
            for match in ("dport", "sport"):
                tc(
                    "filter add dev lo parent 1: protocol ip prio 1 "
                    f"u32 match ip {match} {port} 0xffff flowid 1:4"
                )
        except (OSError, subprocess.CalledProcessError) as error:
            self.close()
            stderr = getattr(error, "stderr", "") or ""
            raise RuntimeError(f"tc netem refused: {error} {stderr.strip()}") from error

    def url(self, rtt_ms: float) -> str:
        """Delay the port's packets RTT / 2 each way (0: through the qdisc, no delay)."""
        tc(f"qdisc change dev lo parent 1:4 handle 40: netem delay {round(rtt_ms * 500)}us")
        return self.direct_url

    def cpu(self, rtt_ms: float) -> float:
        return 0.0  # the kernel's, not measured

    def close(self) -> None:
        if self.applied:
            tc("qdisc del dev lo root", check=False)
            self.applied = False


class Proxies:
    """One delay_proxy.py process per added RTT, pinned to ``cpu``; RTT 0: direct."""

    name = "TCP delay proxy (benchmarks/delay_proxy.py)"

    def __init__(self, port: int, direct_url: str, rtts: list[float], cpu: int | None) -> None:
        self.direct_url = direct_url
        self.processes: dict[float, subprocess.Popen[str]] = {}
        self.urls: dict[float, str] = {}
        atexit.register(self.close)
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        for rtt in rtts:
            if rtt <= 0:
                continue
            process = subprocess.Popen(
                [
                    *pin,
                    sys.executable,
                    str(PROXY),
                    "--target",
                    f"127.0.0.1:{port}",
                    "--rtt-ms",
                    str(rtt),
                ],
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=die_with_parent,  # gone with this process, even if it is killed
            )
            self.processes[rtt] = process
            assert process.stdout is not None
            line = process.stdout.readline().split()
            if not line or line[0] != "ready":
                self.close()
                raise RuntimeError("the delay proxy did not start")
            self.urls[rtt] = f"redis://127.0.0.1:{line[1]}/0"

    def url(self, rtt_ms: float) -> str:
        return self.urls.get(rtt_ms, self.direct_url)

    def cpu(self, rtt_ms: float) -> float:
        """CPU seconds the proxy of ``rtt_ms`` has used so far."""
        process = self.processes.get(rtt_ms)
        if process is None:
            return 0.0
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
                process.wait(5)
        self.processes.clear()


def ping_rtts(url: str) -> tuple[float, float]:
    """Median and p99 of a redis-py PING's round trip to ``url``, in ms."""
    client = redis.Redis.from_url(url)
    client.ping()
    samples = []
    for _ in range(PINGS):
        begin = time.perf_counter()
        client.ping()
        samples.append((time.perf_counter() - begin) * 1000)
    client.close()
    return statistics.median(samples), percentile(samples, 0.99)


# --- One run ---------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    rate: float  # tasks per second, first start to last end
    worker_cpu: float  # CPU microseconds per task: the worker's processes
    proxy_cpu: float  # CPU microseconds per task: the delay proxy (0: none, or netem)
    commands: Counter[str]  # server commands per task, by command (this script's removed)


def commandstats(r: redis.Redis) -> Counter[str]:
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(stats["calls"])
            for name, stats in r.info("commandstats").items()
        }
    )


class Poller:
    """This script's own checks of the server, counted, so that they can be removed
    from the server's commandstats."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.calls: Counter[str] = Counter()

    def exists(self, key: str) -> bool:
        self.calls["exists"] += 1
        return bool(self.r.exists(key))

    def llen(self, key: str) -> int:
        self.calls["llen"] += 1
        return int(self.r.llen(key))

    def stats(self) -> Counter[str]:
        self.calls["info"] += 1
        return commandstats(self.r)


def run_once(
    workload: str,
    entry: Entry,
    tasks: int,
    r: redis.Redis,
    worker_url: str,
    rtt: float,
    added: Netem | Proxies,
    log: Path,
) -> Run:
    from benchmarks.concurrency_apps.work import DONE

    r.flushall()
    if workload == "noop":
        entry.send("mark", "start")
        for _ in range(tasks):
            entry.enqueue()
        entry.send("mark", "end")
        first: Callable[[Poller], bool] = lambda p: p.exists("bench:start")  # noqa: E731
        done: Callable[[Poller], bool] = lambda p: p.exists("bench:end")  # noqa: E731
    else:
        for _ in range(tasks):
            entry.enqueue()
        first = lambda p: p.llen(DONE) >= 1  # noqa: E731
        done = lambda p: p.llen(DONE) >= tasks  # noqa: E731
    contender = dataclasses.replace(
        entry.contender, env={**entry.contender.env, "BENCH_REDIS_URL": worker_url}
    )
    poller = Poller(r)
    before = poller.stats()  # the commands: the whole run, the worker's start-up included
    worker = Worker(contender, worker_url, log)
    try:
        exited = worker.process.poll
        wait_for(lambda: first(poller) or exited() is not None, 120, "the first task")
        # The CPU times: from the first task on, as queues.py's (start-up not counted).
        cpu, proxy_cpu = session_cpu(worker.process.pid), added.cpu(rtt)
        wait_for(lambda: done(poller) or exited() is not None, 600, "the last task")
        if exited() is not None:
            raise RuntimeError(f"{entry.contender.label}: the worker exited; see {log}")
        worker_cpu = session_cpu(worker.process.pid) - cpu
        after, proxy_cpu = poller.stats(), added.cpu(rtt) - proxy_cpu
    finally:
        worker.stop()
    commands = after - before
    commands.subtract(poller.calls)
    commands["info"] += 1  # the first stats() call is counted in ``after`` only
    commands = Counter({name: count for name, count in commands.items() if count > 0})
    if workload == "noop":
        elapsed = float(r.get("bench:end") or 0) - float(r.get("bench:start") or 0)
    else:
        records = [line.split() for line in r.lrange(DONE, 0, -1)]
        elapsed = max(float(end) for _, _, end in records) - min(
            float(start) for _, start, _ in records
        )
    per_task = 1e6 / tasks
    return Run(tasks / elapsed, worker_cpu * per_task, proxy_cpu * per_task, commands)


# --- The report ------------------------------------------------------------------------


def report(
    workload: str,
    names: dict[str, str],
    runs: dict[tuple[float, str], list[Run]],
    rtts: list[float],
    pings: dict[float, tuple[float, float]],
    tasks: int,
) -> None:
    def rate(rtt: float, name: str) -> float:
        return statistics.median(run.rate for run in runs[rtt, name])

    title = (
        "no-op tasks, 1 thread"
        if workload == "noop"
        else f"tasks of time.sleep({SLEEP}), {THREADS} threads"
    )
    print()
    print(f"{title}: {tasks:,} tasks a run; tasks/s, median (slowest - fastest round)")
    print()
    others = [name for name in ("huey", "dramatiq") if "ours" in names and name in names]
    rows = []
    for rtt in rtts:
        row = [f"{rtt:g} ms", f"{pings[rtt][0]:.3f} / {pings[rtt][1]:.3f}"]
        for name in names:
            rates = [run.rate for run in runs[rtt, name]]
            row.append(f"{rate(rtt, name):,.0f} ({min(rates):,.0f} - {max(rates):,.0f})")
        row += [f"{rate(rtt, 'ours') / rate(rtt, other):.2f}x" for other in others]
        proxy = [statistics.median(run.proxy_cpu for run in runs[rtt, name]) for name in names]
        row.append(" / ".join(f"{cpu:.0f}" for cpu in proxy) + " us" if any(proxy) else "-")
        rows.append(row)
    headers = [
        "added RTT",
        "PING ms p50 / p99",
        *names.values(),
        *(f"ours / {'Huey' if other == 'huey' else 'Dramatiq'}" for other in others),
        "proxy CPU/task (each worker's, in order)",
    ]
    print(table(headers, rows))
    print()
    rows = []
    for name, label in names.items():
        row = [label]
        row.append(f"{statistics.median(run.worker_cpu for run in runs[rtts[0], name]):.0f} us")
        for rtt in rtts[1:]:
            added = pings[rtt][0] - pings[rtts[0]][0]
            extra = 1 / rate(rtt, name) - 1 / rate(rtts[0], name)
            row.append(f"{extra * 1000 / added:.2f}" if added > 0 else "-")
        commands = Counter[str]()
        for run in runs[rtts[0], name]:
            commands.update(run.commands)
        count = len(runs[rtts[0], name]) * tasks
        top = ", ".join(f"{cmd} {n / count:.2f}" for cmd, n in commands.most_common(6))
        row += [f"{sum(commands.values()) / count:.2f}", top]
        rows.append(row)
    headers = [
        "worker",
        f"worker CPU/task at {rtts[0]:g} ms",
        *(f"serial round trips per task at {rtt:g} ms" for rtt in rtts[1:]),
        f"server commands per task at {rtts[0]:g} ms",
        "the most run",
    ]
    print(table(headers, rows))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rtt",
        type=float,
        nargs="+",
        default=[0, 0.5, 1],
        help="added RTTs in ms (default 0 0.5 1)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks a run (default 2000)")
    parser.add_argument(
        "--sleep-tasks", type=int, default=3000, help="sleeping tasks a run (default 3000)"
    )
    parser.add_argument(
        "--workload", nargs="+", choices=["noop", "sleep"], default=["noop", "sleep"]
    )
    parser.add_argument(
        "--only", nargs="+", choices=["ours", "huey", "dramatiq"], help="a smoke run's contenders"
    )
    parser.add_argument(
        "--method",
        choices=["auto", "netem", "proxy"],
        default="auto",
        help="how RTT is added (default: netem, else proxy)",
    )
    parser.add_argument(
        "--proxy-cpu",
        type=int,
        default=0,
        help="the CPU the proxies are pinned to (-1: not pinned)",
    )
    options = parser.parse_args()
    # A SIGTERM unwinds like a Ctrl-C: the qdisc or the proxies are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rtts = sorted(set(options.rtt))
    if rtts[0] != 0:
        rtts.insert(0, 0.0)  # the baseline the ratios and round trips need

    affinity = os.sched_getaffinity(0)  # what redis-server and the workers inherit
    logs = Path(tempfile.mkdtemp(prefix="rc-latency-"))
    load_before = os.getloadavg()
    server = start_redis()
    added: Netem | Proxies | None = None
    try:
        direct, unix = server.url, server.unix_url
        # This process enqueues and polls over the unix socket: never delayed.
        os.environ["BENCH_REDIS_URL"] = unix or direct
        r = redis.Redis.from_url(unix or direct)
        info = machine(r)
        print(f"Machine: {info}", flush=True)
        if options.method in ("auto", "netem"):
            try:
                added = Netem(server.port, direct)
            except RuntimeError as error:
                if options.method == "netem":
                    raise
                print(f"{error}; falling back to the TCP delay proxy", flush=True)
        if added is None:
            cpu = None if options.proxy_cpu < 0 else options.proxy_cpu
            added = Proxies(server.port, direct, rtts, cpu)
        print(f"Added RTT by: {added.name}", flush=True)
        pings = {}
        urls = {}
        for rtt in rtts:
            urls[rtt] = added.url(rtt)
            pings[rtt] = ping_rtts(urls[rtt])
            print(
                f"PING RTT at +{rtt:g} ms: p50 {pings[rtt][0]:.3f} ms, p99 {pings[rtt][1]:.3f} ms",
                flush=True,
            )
        entries = {
            workload: [e for e in found if not options.only or e.name in options.only]
            for workload, found in (("noop", noop_entries()), ("sleep", sleep_entries()))
        }
        for entry in entries["noop"] + entries["sleep"]:  # connections, scripts: warm for all
            for _ in range(500):
                entry.enqueue()
        r.flushall()
        counts = {"noop": options.tasks, "sleep": options.sleep_tasks}
        runs: dict[str, dict[tuple[float, str], list[Run]]] = {w: {} for w in options.workload}
        for round_ in range(options.rounds):
            for workload in options.workload:
                chosen = entries[workload]
                pairs = [(rtt, entry) for rtt in rtts for entry in chosen]
                # Each round starts one contender later, and one RTT later.
                shift = round_ * (len(chosen) + 1) % len(pairs)
                for rtt, entry in pairs[shift:] + pairs[:shift]:
                    url = added.url(rtt)
                    log = logs / f"{workload}-{entry.name}.log"
                    run = run_once(workload, entry, counts[workload], r, url, rtt, added, log)
                    runs[workload].setdefault((rtt, entry.name), []).append(run)
                    print(
                        f"round {round_ + 1} {workload} +{rtt:g} ms {entry.name}: "
                        f"{run.rate:,.0f}/s, "
                        f"worker {run.worker_cpu:.0f} us CPU, proxy {run.proxy_cpu:.0f} us, "
                        f"{sum(run.commands.values()) / counts[workload]:.2f} commands/task, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
        pings_after = {rtt: ping_rtts(added.url(rtt)) for rtt in rtts}
    finally:
        if added is not None:
            added.close()
        server.stop()
    print()
    print(f"Machine: {info}; {versions()}")
    print(f"Reply parser, for every contender: {reply_parser()}")
    print(f"Added RTT by: {added.name}")
    pinned = "not pinned" if options.proxy_cpu < 0 else f"pinned to CPU {options.proxy_cpu}"
    print(
        f"CPU affinity: this process, redis-server and the workers {sorted(affinity)}; "
        f"the proxies (if any) {pinned}"
    )
    for rtt in rtts:
        (before_p50, before_p99), (after_p50, after_p99) = pings[rtt], pings_after[rtt]
        print(
            f"PING RTT at +{rtt:g} ms (p50 / p99): before the runs {before_p50:.3f} / "
            f"{before_p99:.3f} ms, after {after_p50:.3f} / {after_p99:.3f} ms"
        )
    print(f"Load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"Rounds: {options.rounds}; worker logs: {logs}")
    for workload in options.workload:
        names = {entry.name: entry.contender.label for entry in entries[workload]}
        report(workload, names, runs[workload], rtts, pings, counts[workload])


if __name__ == "__main__":
    main()
