"""Where a no-op task's CPU goes: the worker's side and the server's, in two placements.

Each run enqueues 5,000 no-op tasks (``enqueue_many``), then one worker drains them in
its own process (``Worker(burst=True)``, the loop ``rc_worker --no-supervisor`` runs,
without the command's start-up), on a private redis-server. It reports the worker's
process CPU per task, the server's (``INFO cpu``), the wall time per task and the
server's commands per task (``INFO commandstats``, the scripts' own included). The
placements: the server on CPU 0 and the worker on CPU 1 (the worker's CPU alone is
what it costs), then both on CPU 1 (they take turns: the wall time per task is the
CPU a task costs them both, the figure to compare with other workers'). Run it pinned::

    taskset -c 1 .venv/bin/python benchmarks/task_cpu.py [--before /tmp/rc-before]

``--before``: a worktree of another commit, run the same way in turns with this one.
``--lua``: also split the fetch script's time in the server (this code only): a copy
of ``lua/queue_fetch.lua`` that reads the server's clock between its parts, and the
fixed cost of the functions it includes (defined again at every call).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
CHILD_ENV = "TASK_CPU_CHILD"


def child(tasks: int, server_cpu: int, lua: bool) -> dict[str, float]:
    """One run in this process (its tree first on the path): the figures per task."""
    import logging

    from redis_components.embedded import EmbeddedRedis

    server = EmbeddedRedis().start()
    assert server.process is not None
    os.sched_setaffinity(server.process.pid, {server_cpu})
    os.environ["BENCH_REDIS_URL"] = server.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.queue_apps.settings"
    import django

    django.setup()
    for name in ("django.tasks", "django_tasks"):  # as rc_worker does
        logging.getLogger(name).disabled = True
    if lua:
        _instrument()
    from benchmarks.queue_apps import tasks as bench_tasks
    from benchmarks.queue_apps.work import QUEUE
    from redis_components.tasks.worker import Worker

    client = server.client()

    def enqueue() -> None:
        many = getattr(bench_tasks.noop, "enqueue_many", None)
        if many is not None:
            many([()] * tasks)
        else:
            for _ in range(tasks):
                bench_tasks.noop.enqueue()

    def server_cpu_s() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    enqueue()
    Worker([QUEUE], burst=True, scheduler=False).run()  # warm up
    enqueue()
    client.config_resetstat()
    worker = Worker([QUEUE], burst=True, scheduler=False)
    server_before, usage = server_cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    worker.run()
    wall, cpu = time.perf_counter() - wall_before, time.process_time() - cpu_before
    used = resource.getrusage(resource.RUSAGE_SELF)
    served = server_cpu_s() - server_before
    stats = client.info("commandstats")
    commands = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))
    figures = {
        "processed": worker.processed,
        "worker_us": 1e6 * cpu / tasks,
        "server_us": 1e6 * served / tasks,
        "wall_us": 1e6 * wall / tasks,
        "commands": (commands - 1) / tasks,  # (less the CONFIG RESETSTAT)
        "script_us": float(stats["cmdstat_evalsha"]["usec_per_call"]),
        # The worker's context switches: it waited (voluntary), or was preempted.
        "waits": (used.ru_nvcsw - usage.ru_nvcsw) / tasks,
        "preempted": (used.ru_nivcsw - usage.ru_nivcsw) / tasks,
    }
    if lua:
        parts = {k.decode(): int(v) for k, v in client.hgetall("task_cpu:lua").items()}
        calls = parts.pop("n", 0) or 1
        figures |= {f"lua_{name}": parts.get(name, 0) / calls for name in LUA_PARTS}
        figures["lua_includes"] = _includes_cost(client)
    server.stop()
    return figures


# The parts of lua/queue_fetch.lua timed by --lua: each ends at the line named.
LUA_PARTS = {
    "options": "local flow_keys = o.flow_keys or 0",
    "record": "\n-- A task held ahead starts:",
    "take": "\nif started then\n",
    "rest": "return {payload, position, wait, code, now, score, read}",
}


def _instrument() -> None:
    """Make ``scripts.load("queue_fetch")`` a copy that adds up its parts' times."""
    from redis_components import scripts

    real = scripts.load
    source = real("queue_fetch").source
    clock = "local __t = redis.call('TIME'); __p[#__p + 1] = __t[1] * 1000000 + __t[2]\n"
    first = "local o = cjson.decode(ARGV[1])"
    source = source.replace(first, "local __p = {}\n" + clock + first, 1)
    for name, line in LUA_PARTS.items():
        at = source.rindex(line) if name == "rest" else source.index(line)
        added = clock
        if name == "rest":
            added += "".join(
                f"redis.call('HINCRBY', 'task_cpu:lua', '{part}', __p[{i + 2}] - __p[{i + 1}])\n"
                for i, part in enumerate(LUA_PARTS)
            )
            added += "redis.call('HINCRBY', 'task_cpu:lua', 'n', 1)\n"
        source = source[:at] + (added if line[0] != "\n" else "\n" + added) + source[at:]
    timed = scripts.Script("queue_fetch", source)
    scripts.load = lambda name: timed if name == "queue_fetch" else real(name)  # type: ignore[assignment]


def _includes_cost(client: Any) -> float:
    """µs per call of the fetch script's included functions alone, less an empty script."""
    from redis_components import scripts

    source = scripts.load("queue_fetch").source

    def per_call(body: str) -> float:
        sha = client.script_load(body)
        client.config_resetstat()
        for _ in range(5000):
            client.evalsha(sha, 0)
        stats = client.info("commandstats")["cmdstat_evalsha"]
        return float(stats["usec_per_call"])

    return per_call(source[: source.index("local o = cjson.decode")] + "return 1") - per_call(
        "return 1"
    )


def run(tree: Path, tasks: int, server_cpu: int, lua: bool) -> dict[str, float]:
    """One run in a fresh process of ``tree``'s code."""
    command = [sys.executable, "-P", __file__, str(tasks), str(server_cpu), str(int(lua))]
    env = {**os.environ, CHILD_ENV: str(tree), "PYTHONPATH": str(tree)}
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the run in {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a worktree of the code to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each, in turns (5)")
    parser.add_argument("--tasks", type=int, default=5000, help="no-op tasks a run (5,000)")
    parser.add_argument("--lua", action="store_true", help="split the fetch script's time")
    options = parser.parse_args()
    if options.rounds < 1 or options.tasks < 1:
        parser.error("--rounds and --tasks must be at least 1")
    if options.before and not (options.before / "redis_components" / "tasks").is_dir():
        parser.error(f"--before {options.before}: not a worktree of this repository")
    sys.path.insert(0, str(HERE / "benchmarks"))
    from common import in_turns, machine, median, start_redis, table

    probe = start_redis()
    print(machine(probe.client()))
    probe.stop()
    print(f"this process on CPUs {sorted(os.sched_getaffinity(0))}\n")
    trees = {"this code": HERE} | ({"before": options.before.resolve()} if options.before else {})
    rows = []
    for server_cpu in (0, 1):
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _, name in in_turns(list(trees), options.rounds):
            runs[name].append(run(trees[name], options.tasks, server_cpu, False))
        for name, done in runs.items():

            def mid(field: str, done: list[dict[str, float]] = done) -> float:
                return median([figures[field] for figures in done])

            rows.append(
                [
                    name,
                    f"server on CPU {server_cpu}, worker on CPU 1",
                    f"{mid('worker_us'):.0f} us",
                    f"{mid('server_us'):.0f} us",
                    f"{mid('wall_us'):.0f} us",
                    f"{1e6 / mid('wall_us'):,.0f}",
                    f"{mid('commands'):.2f}",
                    f"{mid('script_us'):.1f} us",
                    f"{mid('waits'):.2f} / {mid('preempted'):.2f}",
                    " / ".join(f"{figures['wall_us']:.0f}" for figures in done),
                ]
            )
    headers = ["code", "placement", "worker CPU/task", "server CPU/task", "wall/task"]
    headers += ["tasks/s", "server commands/task", "fetch script (usec/call)"]
    headers += ["worker's switches/task (waited / preempted)", "rounds (wall)"]
    print(table(headers, rows))
    if options.lua:
        done = [run(HERE, options.tasks, 0, True) for _ in range(options.rounds)]
        parts = [*(f"lua_{name}" for name in LUA_PARTS), "lua_includes"]
        print()
        print(
            table(
                ["fetch script part (server on CPU 0)", "us per call (median)"],
                [[part[4:], f"{median([d[part] for d in done]):.1f}"] for part in parts],
            )
        )


if __name__ == "__main__":
    if os.environ.get(CHILD_ENV):
        sys.path.insert(0, os.environ[CHILD_ENV])
        count, cpu, timed = (int(value) for value in sys.argv[1:4])
        print(json.dumps(child(count, cpu, bool(timed))))
    else:
        main()
