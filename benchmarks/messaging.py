"""Group chat: send rate and fetch_pending latency, ours against the book's.

    .venv/bin/python benchmarks/messaging.py [--senders 4] [--messages 5000] [--repeat 3]

The book's version is benchmarks/book_messaging.py (its listing as printed, fixed
only to run on redis-py 5+). Both run in this one process tree against one
redis-server that the script starts itself (redis_components.embedded) with Redis's
own defaults, over TCP, with the same redis-py. Ours runs with its default settings
(it caps a chat at 1,000 messages; the book keeps everything).

- send: a 10-member chat; ``--senders`` processes send ``--messages`` each, all at
  once; the rate is all messages over the wall time from the start signal until the
  last send returned. The median of ``--repeat`` runs, not the best.
- fetch: one member has 10 chats (10 members each) with 100 unread messages in each;
  the time of one fetch call, over ``--fetches`` fresh setups.

Round trips are counted by the client (a connection class that counts the requests
it writes: one per command, one per pipeline); server commands by INFO commandstats
(commands run inside scripts included).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import book_messaging as book
import django
import redis
from common import machine, median, percentile, start_redis, table
from django.conf import settings

FORK = multiprocessing.get_context("fork")
MEMBERS = [f"user{n}" for n in range(10)]


class CountingConnection(redis.Connection):
    """Counts the requests this process writes: one per command or pipeline."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


def book_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(
        url, decode_responses=True, connection_class=CountingConnection
    )
    return redis.Redis(connection_pool=pool)


def server_commands(admin: redis.Redis) -> int:
    stats = admin.info("commandstats")
    return sum(s["calls"] for name, s in stats.items() if name not in ("cmdstat_info",))


# Sending


def _ours_sender(chat_id: str, sender: str, count: int, barrier: Any, sent: Any) -> None:
    from redis_components import GroupChat
    from redis_components.connection import get_client

    chats = GroupChat(accounts=True)
    get_client().ping()
    barrier.wait()
    before = CountingConnection.sent
    for n in range(count):
        chats.send(chat_id, sender, f"message {n} from {sender}")
    sent.put((CountingConnection.sent - before, time.perf_counter()))


def _book_sender(url: str, chat_id: str, sender: str, count: int, barrier: Any, sent: Any) -> None:
    conn = book_client(url)
    conn.ping()
    barrier.wait()
    before = CountingConnection.sent
    for n in range(count):
        book.send_message(conn, chat_id, sender, f"message {n} from {sender}")
    sent.put((CountingConnection.sent - before, time.perf_counter()))


def send_run(
    admin: redis.Redis,
    create: Callable[[], str],
    sender: Callable[..., None],
    senders: int,
    count: int,
) -> dict[str, float]:
    admin.flushall()
    chat_id = create()
    barrier, sent = FORK.Barrier(senders + 1), FORK.Queue()
    processes = [
        FORK.Process(target=sender, args=(chat_id, MEMBERS[i], count, barrier, sent))
        for i in range(senders)
    ]
    for process in processes:
        process.start()
    admin.config_resetstat()
    barrier.wait()
    started = time.perf_counter()
    # perf_counter is the system-wide monotonic clock on Linux: comparable across
    # processes, so the time is until the last send returned, not until processes exit.
    reports = [sent.get() for _ in processes]
    round_trips = sum(trips for trips, _ in reports)
    elapsed = max(finished for _, finished in reports) - started
    for process in processes:
        process.join()
    assert all(process.exitcode == 0 for process in processes)
    total = senders * count
    return {
        "rate": total / elapsed,
        "round_trips": round_trips / total,
        "commands": server_commands(admin) / total,
    }


# Fetching


def fetch_run(
    admin: redis.Redis,
    setup: Callable[[int], None],
    fetch: Callable[[], list[Any]],
    chats: int,
) -> dict[str, float]:
    admin.flushall()
    setup(chats)
    admin.config_resetstat()
    before = CountingConnection.sent
    started = time.perf_counter()
    result = fetch()
    elapsed = time.perf_counter() - started
    round_trips = CountingConnection.sent - before
    commands = server_commands(admin)
    assert len(result) == chats, len(result)
    assert all(len(messages) == 100 for _, messages in result)
    return {"latency": elapsed, "round_trips": round_trips, "commands": commands}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--messages", type=int, default=5000, help="per sending process")
    parser.add_argument("--repeat", type=int, default=3, help="send runs per version")
    parser.add_argument("--fetches", type=int, default=30, help="fetch runs per version")
    options = parser.parse_args()

    with start_redis() as server:
        # common.setup_django, plus the connection class that counts round trips.
        settings.configure(
            INSTALLED_APPS=["redis_components"],
            CACHES={
                "default": {
                    "BACKEND": "django_redis.cache.RedisCache",
                    "LOCATION": server.url,
                    "OPTIONS": {"CONNECTION_POOL_KWARGS": {"connection_class": CountingConnection}},
                }
            },
            USE_TZ=True,
        )
        django.setup()
        from redis_components import GroupChat

        ours = GroupChat(accounts=True)
        conn = book_client(server.url)
        admin = server.client()

        def ours_create() -> str:
            return ours.create(MEMBERS[0], MEMBERS[1:], "hello")

        def book_create() -> str:
            return str(book.create_chat(conn, MEMBERS[0], MEMBERS[1:], "hello"))

        def ours_setup(chats: int) -> None:
            for _ in range(chats):
                chat_id = ours.create(MEMBERS[1], MEMBERS[2:] + MEMBERS[:1], "hello")
                for n in range(99):
                    ours.send(chat_id, MEMBERS[1 + n % 9], f"message {n}")

        def book_setup(chats: int) -> None:
            for _ in range(chats):
                chat_id = book.create_chat(conn, MEMBERS[1], MEMBERS[2:] + MEMBERS[:1], "hello")
                for n in range(99):
                    book.send_message(conn, chat_id, MEMBERS[1 + n % 9], f"message {n}")

        def ours_fetch() -> list[Any]:
            return ours.fetch_pending(MEMBERS[0])

        def book_fetch() -> list[Any]:
            return list(book.fetch_pending_messages(conn, MEMBERS[0]))

        def book_sender(*args: Any) -> None:
            _book_sender(server.url, *args)

        load_before = os.getloadavg()
        # Warm up: load the scripts, open the connections.
        fetch_run(admin, ours_setup, ours_fetch, 1)
        fetch_run(admin, book_setup, book_fetch, 1)

        sends: dict[str, list[dict[str, float]]] = {"book": [], "ours": []}
        for _ in range(options.repeat):
            args = (options.senders, options.messages)
            sends["book"].append(send_run(admin, book_create, book_sender, *args))
            sends["ours"].append(send_run(admin, ours_create, _ours_sender, *args))

        fetches: dict[str, list[dict[str, float]]] = {"book": [], "ours": []}
        for _ in range(options.fetches):
            fetches["book"].append(fetch_run(admin, book_setup, book_fetch, 10))
            fetches["ours"].append(fetch_run(admin, ours_setup, ours_fetch, 10))
        scaling = {
            name: [fetch_run(admin, setup, fetch, n)["round_trips"] for n in (1, 10, 100)]
            for name, setup, fetch in (
                ("book", book_setup, book_fetch),
                ("ours", ours_setup, ours_fetch),
            )
        }
        load_after = os.getloadavg()
        where = machine(admin)

    def stat(runs: list[dict[str, float]], field: str, fraction: float = 0.5) -> float:
        values = [run[field] for run in runs]
        return median(values) if fraction == 0.5 else percentile(values, fraction)

    sent = f"{options.senders} processes x {options.messages} messages"
    fetched = "fetch_pending, 10 chats x 100 unread"
    # label, the statistic of a version, its format, whether higher is better
    measured: list[tuple[str, Callable[[str], float], str, bool]] = [
        (f"send rate, {sent} (msg/s)", lambda v: stat(sends[v], "rate"), "{:,.0f}", True),
        ("round trips per send", lambda v: stat(sends[v], "round_trips"), "{:.2f}", False),
        ("server commands per send", lambda v: stat(sends[v], "commands"), "{:.2f}", False),
        (f"{fetched}: median (ms)", lambda v: 1000 * stat(fetches[v], "latency"), "{:.2f}", False),
        (
            f"{fetched}: p95 (ms)",
            lambda v: 1000 * stat(fetches[v], "latency", 0.95),
            "{:.2f}",
            False,
        ),
        (f"{fetched}: round trips", lambda v: stat(fetches[v], "round_trips"), "{:.0f}", False),
        (f"{fetched}: server commands", lambda v: stat(fetches[v], "commands"), "{:.0f}", False),
    ]
    rows: list[list[object]] = []
    for label, statistic, form, higher_is_better in measured:
        theirs, mine = statistic("book"), statistic("ours")
        factor = mine / theirs if higher_is_better else theirs / mine
        rows.append([label, form.format(theirs), form.format(mine), f"{factor:.1f}x"])
    trips = [" / ".join(f"{n:.0f}" for n in scaling[v]) for v in ("book", "ours")]
    rows.append(["fetch_pending round trips, 1 / 10 / 100 chats", *trips, ""])
    headers = ["measurement", "book (lock)", "ours (script)", "ours vs book (>1: ours better)"]
    print(table(headers, rows))
    print()
    print(f"Machine: {where}")
    print(f"Load average (1, 5, 15 min) before: {load_before}, after: {load_after}")


if __name__ == "__main__":
    main()
