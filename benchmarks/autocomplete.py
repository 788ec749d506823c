"""Autocomplete benchmark: the book's marker method against ``Guild``; recent contacts.

    .venv/bin/python benchmarks/autocomplete.py                  # the full run (a few minutes)
    .venv/bin/python benchmarks/autocomplete.py --sizes 10000 --seconds 2 --queries 300

It starts its own redis-server (``redis_components.embedded``) and prints Markdown
tables for benchmarks/README.md:

1. One client, guilds of 10k, 100k and 1M names (ASCII, accented Latin and CJK):
   p50 / p99 per query for 1-, 2- and 3-character prefixes taken from real names;
   round trips, commands and writes per query (counted, not assumed).
2. 4 reader processes querying while 2 processes join and leave names as fast as
   they can: queries per second, p50 / p99, and the book's WATCH retries per query.
3. Recent contacts: ``add`` per second, and ``suggest`` latency with 100 contacts.

The book's code is seed 002's byte variant of ``autocomplete_on_prefix``, copied
below unchanged. It runs on the same Redis client as ours (the app's), and the two
take turns query by query (and round by round under load), so that both meet the
same conditions when other work comes and goes on the machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from redis.utils import HIREDIS_AVAILABLE

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redis_components.embedded import EmbeddedRedis

FORK = multiprocessing.get_context("fork")
BOOK_GUILD = "bench"
OUR_GUILD = "bench"


# --- The book's code (seed 002, the UTF-8 byte variant), unchanged -----------------


def find_prefix_range(prefix):
    encoded_prefix = prefix.encode("utf-8")
    start = encoded_prefix + b"\x00"
    end = encoded_prefix + b"\xff"
    return start, end


def autocomplete_on_prefix(conn, guild, prefix):
    start, end = find_prefix_range(prefix)
    identifier = str(uuid.uuid4())
    start += identifier.encode("utf-8")
    end += identifier.encode("utf-8")
    zset_name = "members:" + guild

    conn.zadd(zset_name, {start: 0, end: 0})
    pipeline = conn.pipeline(True)
    while True:
        try:
            pipeline.watch(zset_name)
            sindex = pipeline.zrank(zset_name, start)
            eindex = pipeline.zrank(zset_name, end)
            erange = min(sindex + 9, eindex - 2)
            pipeline.multi()
            pipeline.zrem(zset_name, start, end)
            pipeline.zrange(zset_name, sindex, erange)
            items = pipeline.execute()[-1]
            break
        except redis.exceptions.WatchError:
            continue
    return [item for item in items if b"{" not in item]


# The book's join_guild / leave_guild (6.1.2), with redis-py 3+'s zadd mapping.
def join_guild(conn, guild, user):
    conn.zadd("members:" + guild, {user: 0})


def leave_guild(conn, guild, user):
    conn.zrem("members:" + guild, user)


# The book's recent contacts (6.1.1), with redis-py 3+'s lrem argument order and a
# bytes prefix (the book's str prefix cannot be compared with bytes on Python 3).
def add_update_contact(conn, user, contact):
    ac_list = "recent:" + user
    pipeline = conn.pipeline(True)
    pipeline.lrem(ac_list, 0, contact)
    pipeline.lpush(ac_list, contact)
    pipeline.ltrim(ac_list, 0, 99)
    pipeline.execute()


def fetch_autocomplete_list(conn, user, prefix):
    candidates = conn.lrange("recent:" + user, 0, -1)
    matches = []
    for candidate in candidates:
        if candidate.lower().startswith(prefix):
            matches.append(candidate)
    return matches


# --- Names ------------------------------------------------------------------------

# Space-separated syllables, split: easier to read than a list literal.
ASCII_SYLLABLES = "ka el tor an mi ra zo be dri ven lo sa ri thu gar ny os pe qua li".split()  # noqa: SIM905
ACCENTED_SYLLABLES = "æ ø é ñ ü ł ç å ö ß ão ér ìn ôl ús ýr ðe þo ė ą".split()  # noqa: SIM905
CJK_FIRST, CJK_COUNT = 0x4E00, 3000


def make_names(count: int, seed: int = 6) -> list[str]:
    """``count`` distinct names: 70 % ASCII, 20 % accented Latin, 10 % CJK."""
    rng = random.Random(seed)

    def word(syllables: list[str]) -> str:
        return "".join(rng.choices(syllables, k=rng.randint(2, 4))).capitalize()

    names: set[str] = set()
    while len(names) < count:
        kind = rng.random()
        if kind < 0.7:
            name = f"{word(ASCII_SYLLABLES)} {word(ASCII_SYLLABLES)}"
        elif kind < 0.9:
            mixed = ASCII_SYLLABLES + ACCENTED_SYLLABLES
            name = f"{word(mixed)} {word(mixed)}"
        else:
            name = "".join(
                chr(CJK_FIRST + rng.randrange(CJK_COUNT)) for _ in range(rng.randint(2, 4))
            )
        names.add(name)
    return sorted(names)


def prefixes_of(names: Sequence[str], length: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [name[:length] for name in rng.choices(names, k=count)]


# --- Measuring ----------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def timed(queries: Sequence[Callable[[str], object]], prefixes: Sequence[str]) -> list[list[float]]:
    """Seconds per query of each of ``queries``, taking turns on every prefix.

    Taking turns puts the methods under the same conditions when other work comes
    and goes on the machine.
    """
    samples: list[list[float]] = [[] for _ in queries]
    for prefix in prefixes:
        for query, into in zip(queries, samples, strict=True):
            began = time.perf_counter()
            query(prefix)
            into.append(time.perf_counter() - began)
    return samples


@contextmanager
def counting_round_trips() -> Iterator[list[int]]:
    """Count the requests sent to Redis: every round trip is one packed send."""
    sent = [0]
    original = redis.connection.Connection.send_packed_command

    def send(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    redis.connection.Connection.send_packed_command = send  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        redis.connection.Connection.send_packed_command = original  # type: ignore[method-assign]


def server_counts(admin: redis.Redis) -> tuple[int, int, int]:
    """Commands run (INFO left out), WATCH commands run, and changes to the data."""
    stats = admin.info("commandstats")
    calls = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    watches = stats.get("cmdstat_watch", {}).get("calls", 0)
    return calls, watches, int(admin.info("persistence")["rdb_changes_since_last_save"])


def per_query_costs(
    admin: redis.Redis, query: Callable[[str], object], prefixes: Sequence[str]
) -> tuple[float, float, float]:
    """Round trips, commands and writes per query, counted over ``prefixes``."""
    before = server_counts(admin)
    with counting_round_trips() as sent:
        for prefix in prefixes:
            query(prefix)
    after = server_counts(admin)
    n = len(prefixes)
    return sent[0] / n, (after[0] - before[0]) / n, (after[2] - before[2]) / n


# --- Concurrent readers and writers -------------------------------------------------


def reader(method: str, prefixes: list[str], start: Any, deadline: float, out: Any) -> None:
    book = book_client()
    guild = our_guild()
    query = (
        (lambda p: autocomplete_on_prefix(book, BOOK_GUILD, p))
        if method == "book"
        else guild.suggest
    )
    rng = random.Random()
    samples = []
    start.wait()
    began = time.perf_counter()
    while time.time() < deadline:
        prefix = rng.choice(prefixes)
        t0 = time.perf_counter()
        query(prefix)
        samples.append(time.perf_counter() - t0)
    out.put((len(samples), time.perf_counter() - began, samples))


def writer(method: str, worker: int, start: Any, deadline: float, out: Any) -> None:
    book = book_client()
    guild = our_guild()
    writes = 0
    start.wait()
    while time.time() < deadline:
        name = f"Churn {worker} {writes}"
        if method == "book":
            join_guild(book, BOOK_GUILD, name)
            leave_guild(book, BOOK_GUILD, name)
        else:
            guild.join(name)
            guild.leave(name)
        writes += 2
    out.put(writes)


def concurrent_round(
    method: str, admin: redis.Redis, prefixes: list[str], seconds: float
) -> tuple[list[tuple[int, float, list[float]]], int, int]:
    """One run of 4 readers and 2 writers: per reader (queries, seconds, samples);
    the writes done; the WATCH commands run."""
    start = FORK.Event()
    out = FORK.Queue()
    deadline = time.time() + 1.0 + seconds  # the processes start within the first second
    readers = [
        FORK.Process(target=reader, args=(method, prefixes, start, deadline, out)) for _ in range(4)
    ]
    writers = [
        FORK.Process(target=writer, args=(method, i, start, deadline, out)) for i in range(2)
    ]
    for process in readers + writers:
        process.start()
    time.sleep(max(0.0, deadline - seconds - time.time()))
    before = server_counts(admin)
    start.set()
    results = [out.get() for _ in readers + writers]
    for process in readers + writers:
        process.join()
    after = server_counts(admin)
    reads = [r for r in results if isinstance(r, tuple)]
    return reads, sum(r for r in results if isinstance(r, int)), after[1] - before[1]


def concurrent(
    admin: redis.Redis, prefixes: list[str], seconds: float, rounds: int = 3
) -> dict[str, dict[str, float]]:
    """Both methods under concurrent writers, in alternating rounds of seconds / rounds."""
    runs: dict[str, list[Any]] = {"book": [], "ours": []}
    for _ in range(rounds):
        for method, collected in runs.items():
            collected.append(concurrent_round(method, admin, prefixes, seconds / rounds))
    summary = {}
    for method, collected in runs.items():
        reads = [read for round_reads, _, _ in collected for read in round_reads]
        queries = sum(count for count, _, _ in reads)
        samples = [s for _, _, part in reads for s in part]
        summary[method] = {
            # Readers run side by side: a round's rate is the sum of theirs.
            "qps": sum(count / elapsed for count, elapsed, _ in reads) / rounds,
            "p50": percentile(samples, 0.50),
            "p99": percentile(samples, 0.99),
            "writes": sum(writes for _, writes, _ in collected) / seconds,
            # Every attempt of the book's query starts with one WATCH; ours sends none.
            "retries": sum(watches for _, _, watches in collected) / queries - 1
            if method == "book"
            else 0.0,
        }
    return summary


# --- Setup --------------------------------------------------------------------------


def configure_django(url: str) -> None:
    import django
    from django.conf import settings

    # The settings the README shows; REDIS_COMPONENTS is present, as in a configured project.
    settings.configure(
        REDIS_COMPONENTS={"CACHE_ALIAS": "default"},
        INSTALLED_APPS=["redis_components"],
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
    )
    django.setup()


def book_client() -> redis.Redis:
    """The client the book's code runs on: the very client ours uses, so that only the
    methods differ (django-redis's pool, the same parser, the same socket options)."""
    from redis_components import get_client

    return get_client()


def our_guild() -> Any:
    from redis_components import Guild

    return Guild(OUR_GUILD)


def load(admin: redis.Redis, names: list[str]) -> None:
    admin.flushall()
    for i in range(0, len(names), 10_000):
        admin.zadd("members:" + BOOK_GUILD, dict.fromkeys(names[i : i + 10_000], 0))
    our_guild().join_many(names)


def describe_machine(admin: redis.Redis) -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    load1, load5, _ = (f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{multiprocessing.cpu_count()} CPUs ({cpu}), Redis {admin.info()['redis_version']}, "
        f"Python {platform.python_version()}, redis-py {redis.__version__} "
        f"({'hiredis' if HIREDIS_AVAILABLE else 'pure-Python'} reply parser); "
        f"load average at start {load1} (1 min), {load5} (5 min)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=2000, help="per prefix length and method")
    parser.add_argument("--seconds", type=float, default=30, help="per method, concurrent runs")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    run_began = time.perf_counter()

    def took() -> str:
        return f"{(time.perf_counter() - run_began) / 60:.1f} min"

    with EmbeddedRedis() as server:
        configure_django(server.url)
        from redis_components import RecentContacts

        admin = server.client()
        book = book_client()
        guild = our_guild()
        print(f"Machine: {describe_machine(admin)}\n")

        single: list[str] = []
        costs: list[str] = []
        loaded: list[str] = []
        together: list[str] = []
        for size in sizes:
            names = make_names(size)
            began = time.perf_counter()
            load(admin, names)
            memory = admin.memory_usage("members:" + BOOK_GUILD), admin.memory_usage(guild.key)
            loaded.append(
                f"| {size:,} | {time.perf_counter() - began:.1f} s | "
                f"{memory[0] / 2**20:.0f} MiB | {memory[1] / 2**20:.0f} MiB |"
            )

            def book_query(prefix: str) -> object:
                return autocomplete_on_prefix(book, BOOK_GUILD, prefix)

            for length in (1, 2, 3):
                prefixes = prefixes_of(names, length, args.queries, seed=length)
                timed([book_query, guild.suggest], prefixes[:50])  # warm up
                book_samples, our_samples = timed([book_query, guild.suggest], prefixes)
                b50, o50 = percentile(book_samples, 0.5), percentile(our_samples, 0.5)
                single.append(
                    f"| {size:,} | {length} | {ms(b50)} | {ms(percentile(book_samples, 0.99))} "
                    f"| {ms(o50)} | {ms(percentile(our_samples, 0.99))} | {b50 / o50:.1f}x |"
                )
            sample = prefixes_of(names, 2, 200, seed=9)
            for label, query in (("book", book_query), ("ours", guild.suggest)):
                trips, commands, writes = per_query_costs(admin, query, sample)
                costs.append(
                    f"| {size:,} | {label} | {trips:.2f} | {commands:.2f} | {writes:.2f} |"
                )

            mixed = [p for n in (1, 2, 3) for p in prefixes_of(names, n, 300, seed=10 + n)]
            runs = concurrent(admin, mixed, args.seconds)
            book_run, our_run = runs["book"], runs["ours"]
            for label, run in (("book", book_run), ("ours", our_run)):
                together.append(
                    f"| {size:,} | {label} | {run['qps']:,.0f} | {ms(run['p50'])} "
                    f"| {ms(run['p99'])} | {run['retries']:.1f} | {run['writes']:,.0f} |"
                )
            together.append(
                f"| {size:,} | ours / book | {our_run['qps'] / book_run['qps']:,.0f}x | | | | |"
            )

        admin.flushall()
        contacts_lines = contacts_benchmark(book, RecentContacts, args.queries)

    print("Loading (both guilds hold the same names):\n")
    print("| names | load both | book's ZSET | our ZSET |\n|---:|---:|---:|---:|")
    print("\n".join(loaded))
    print("\nOne client, ms per query:\n")
    print(
        "| names | prefix chars | book p50 | book p99 | ours p50 | ours p99 | p50 book/ours |\n"
        "|---:|---:|---:|---:|---:|---:|---:|"
    )
    print("\n".join(single))
    print("\nCost per query (counted over 200 two-character prefixes):\n")
    print(
        "| names | method | round trips | commands | writes (Redis's change counter) |\n"
        "|---:|---|---:|---:|---:|"
    )
    print("\n".join(costs))
    print(
        f"\n4 readers while 2 writers join and leave, {args.seconds:g} s each"
        " (ms per query; writes per second):\n"
    )
    print(
        "| names | method | queries/s | p50 | p99 | retries/query | writes/s |\n"
        "|---:|---|---:|---:|---:|---:|---:|"
    )
    print("\n".join(together))
    print("\nRecent contacts (100 contacts, one client):\n")
    print("\n".join(contacts_lines))
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.2f} (1 min); took {took()}.")


def contacts_benchmark(book: redis.Redis, recent_contacts: Any, queries: int) -> list[str]:
    pool = make_names(150, seed=7)
    rng = random.Random(8)
    adds = [rng.choice(pool) for _ in range(max(queries * 5, 5000))]
    contacts = recent_contacts()
    lines = ["| what | book | ours |", "|---|---:|---:|"]

    book_adds, our_adds = timed(
        [lambda name: add_update_contact(book, "u1", name), lambda name: contacts.add("u1", name)],
        adds,
    )
    lines.append(
        f"| add per second | {len(adds) / sum(book_adds):,.0f} | {len(adds) / sum(our_adds):,.0f} |"
    )
    assert len(contacts.all("u1")) == book.llen("recent:u1") == 100
    prefixes = [p for n in (1, 2, 3) for p in prefixes_of(pool, n, queries // 3, seed=20 + n)]
    book_samples, our_samples = timed(
        [
            lambda p: fetch_autocomplete_list(book, "u1", p.encode()),
            lambda p: contacts.suggest("u1", p),
        ],
        prefixes,
    )
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        lines.append(
            f"| suggest {label} (ms) | {ms(percentile(book_samples, fraction))} "
            f"| {ms(percentile(our_samples, fraction))} |"
        )
    return lines


if __name__ == "__main__":
    main()
