"""The take script before and after a change, in one process against one server.

Rates measured in separate runs on a shared 2-core machine move by 20 % between runs;
this benchmark alternates the two versions of ``queue_fetch.lua`` (and of the Python
that builds its call, ``tasks/store/calls.py``'s ``fetch_call``) call by call, on one
``redis-server``, so that both see the same noise. Each block runs 5,000 no-op tasks
through an in-process burst worker; the server's slow log, set to keep every command,
gives each call's time in the server.

    git worktree add /tmp/base <commit before>
    .venv/bin/python benchmarks/take_ab.py /tmp/base

``old_fetch_call`` adapts the call of the worktree's ``fetch_call`` to today's
arguments: change it with ``fetch_call``'s signature. The old script is composed with
the worktree's own ``lua/lib/``. With ``old_fetch_call`` passing its arguments through,
a worktree of the same code with a comment of ``queue_fetch.lua`` changed (so that its
SHA1 differs) measured the harness itself: 1.000 (benchmarks/README.md, "Issue 59,
step 3").
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import logging
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import machine, start_redis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="a worktree of the code before the change")
    parser.add_argument("--blocks", type=int, default=8, help="blocks per version")
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per block")
    options = parser.parse_args()

    server = start_redis()
    os.environ["BENCH_REDIS_URL"] = server.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.queue_apps.settings"
    import django

    django.setup()
    logging.disable(logging.CRITICAL)
    from benchmarks.queue_apps import tasks
    from redis_components import scripts
    from redis_components.connection import get_client
    from redis_components.tasks.store import worker_store
    from redis_components.tasks.worker import Worker

    base = Path(options.base)
    spec = importlib.util.spec_from_file_location(
        "redis_components.tasks.store.calls_before",
        base / "redis_components/tasks/store/calls.py",
    )
    assert spec is not None
    assert spec.loader is not None
    before = importlib.util.module_from_spec(spec)
    import redis_components.tasks.store.records as records_now
    from redis_components.tasks.messages import NOW, Due

    # The base's calls.py reads these from the store's records, which no longer has them.
    records_now.NOW, records_now.Due = NOW, Due
    spec.loader.exec_module(before)
    source = (base / "redis_components/lua/queue_fetch.lua").read_text("utf-8")
    here = scripts.LUA_DIR
    scripts.LUA_DIR = base / "redis_components/lua"  # (its includes as they were too)
    before_script = scripts.compose("queue_fetch_before", source)
    scripts.LUA_DIR = here

    def old_fetch_call(*, outcome: Any, shift: int, start: Any, **kwargs: Any) -> Any:
        # The signature of 115ded8: positions of the call's run, and the outcome's lane,
        # payload, queue and attempt as fields and arguments of its own.
        if start is not None:
            start = dataclasses.replace(start, position=start.position - shift)
        queue, taken_ms = "", 0
        if outcome is not None:
            delivery = outcome.delivery
            queue, taken_ms = delivery.queue, delivery.attempt
            fields = {f.name: getattr(outcome, f.name) for f in dataclasses.fields(outcome)}
            fields |= {"position": delivery.position - shift, "payload": delivery.payload}
            outcome = types.SimpleNamespace(**fields)
        _, keys, args = before.fetch_call(
            outcome=outcome, start=start, queue=queue, taken_ms=taken_ms, **kwargs
        )
        return before_script, keys, args

    # Call by call, the two versions take turns; the server's slow log (every command,
    # with its time in the server) tells their times apart by the script's SHA1.
    versions = {"before": old_fetch_call, "after": worker_store.fetch_call}
    shas = {before_script.sha: "before", scripts.load("queue_fetch").sha: "after"}
    turn = itertools.cycle(versions.values())
    worker_store.fetch_call = lambda **kwargs: next(turn)(**kwargs)  # type: ignore[attr-defined]
    client = get_client()
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 2 * options.tasks + 100)
    micros: dict[str, list[float]] = {name: [] for name in versions}
    rates = []
    for _ in range(options.blocks):
        for _ in range(options.tasks):
            tasks.noop.enqueue()
        client.slowlog_reset()
        started = time.perf_counter()
        done = Worker([tasks.noop.queue_name], burst=True).run()
        rates.append(done / (time.perf_counter() - started))
        times: dict[str, list[int]] = {name: [] for name in versions}
        for entry in client.slowlog_get(2 * options.tasks + 100):
            command = entry["command"].split()
            if command[:1] == [b"EVALSHA"] and command[1].decode() in shas:
                times[shas[command[1].decode()]].append(entry["duration"])
        for name, found in times.items():
            micros[name].append(statistics.median(found))
    print(machine(client))
    print("| take script | EVALSHA us in the server (median of blocks) | blocks |")
    print("|---|---|---|")
    for name in versions:
        shown = " / ".join(f"{value:.0f}" for value in micros[name])
        print(f"| {name} | {statistics.median(micros[name]):.1f} | {shown} |")
    ratio = statistics.median(micros["after"]) / statistics.median(micros["before"])
    print(f"after / before, server time per call: {ratio:.3f}")
    print(f"tasks/s, the two alternating: {statistics.median(rates):,.0f}")
    server.stop()


if __name__ == "__main__":
    main()
