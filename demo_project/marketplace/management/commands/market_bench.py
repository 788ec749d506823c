"""`manage.py market_bench`: the book's locking benchmark (section 6.2), reproduced.

Lister processes put new items up for sale as fast as they can; buyer processes buy
random listings as fast as they can; each mode (WATCH, one coarse lock, fine-grained
locks) runs on a market of its own for the same time. The table is the book's: items
listed, items bought, purchase retries, average wait per purchase; then the market's
invariants are checked.
"""

from __future__ import annotations

import multiprocessing
import random
import sys
import time
from typing import Any

from django.core.management.base import CommandError, CommandParser

from demo_project.marketplace.market import MODES, Market, Mode, parse_listing
from redis_components.management.base import RedisCommand

FORK = multiprocessing.get_context("fork")
FIRST_BUYER = 1001

# The book's figures for 60 s on its hardware: (listed, bought, retries, wait in ms).
BOOK = {
    (1, 1): {
        "watch": (145_000, 27_000, 80_000, 14),
        "lock": (51_000, 50_000, 0, 1),
        "fine": (113_000, 110_000, 0, 1),
    },
    (5, 1): {
        "watch": (331_000, 200, 50_000, 150),
        "lock": (68_000, 13_000, 10, 5),
        "fine": (192_000, 36_000, 0, 2),
    },
    (5, 5): {
        "watch": (206_000, 600, 161_000, 498),
        "lock": (21_000, 20_500, 0, 14),
        "fine": (116_000, 111_000, 0, 3),
    },
}
TITLES = {"watch": "WATCH", "lock": "coarse lock", "fine": "fine-grained lock"}


def lister(market_name: str, me: int, slot: int, mode: Mode, run: Any) -> None:
    start, stop_at, progress, results = run
    market = Market(market_name)
    rng = random.Random(me)
    start.wait()
    listed = made = 0
    while time.monotonic() < stop_at.value:
        item = f"L{me}n{made}"
        made += 1
        market.make_item(me, item)
        if market.list_item(item, me, rng.randint(1, 100), mode):
            listed += 1
            progress[slot] = listed
    results.put(("listed", listed, 0, 0, 0.0))


def buyer(market_name: str, me: int, slot: int, mode: Mode, run: Any) -> None:
    start, stop_at, progress, results = run
    market = Market(market_name)
    key = market.key("market")
    start.wait()
    bought = attempts = retries = 0
    waited = 0.0
    while time.monotonic() < stop_at.value:
        member = market.client.zrandmember(key)
        if member is None:
            continue
        item, seller = parse_listing(member.decode() if isinstance(member, bytes) else member)
        began = time.perf_counter()
        purchase = market.purchase_item(me, item, seller, mode)
        waited += time.perf_counter() - began
        attempts += 1
        retries += purchase.retries
        if purchase.ok:
            bought += 1
            progress[slot] = bought
    results.put(("bought", bought, attempts, retries, waited))


class Command(RedisCommand):
    help = (
        "Reproduce the book's locking benchmark: listers and buyers trade on a market for "
        "DURATION seconds with each MODE, then print the book's table and check the market."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--listers", type=int, default=5, help="lister processes (default 5)")
        parser.add_argument("--buyers", type=int, default=5, help="buyer processes (default 5)")
        parser.add_argument(
            "--duration", type=float, default=60, help="seconds per mode (default 60)"
        )
        parser.add_argument(
            "--mode", choices=[*MODES, "all"], default="all", help="which mode (default all)"
        )
        parser.add_argument("--chart", metavar="FILE.png", help="also draw the results as a chart")

    def handle(self, *args: Any, **options: Any) -> None:
        listers, buyers, duration = options["listers"], options["buyers"], options["duration"]
        if listers < 1 or buyers < 1 or duration <= 0:
            raise CommandError("--listers and --buyers need at least 1, --duration more than 0")
        if options["chart"]:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise CommandError("--chart needs matplotlib: pip install matplotlib") from None
        modes = MODES if options["mode"] == "all" else (options["mode"],)
        rows = []
        for mode in modes:
            rows.append(self.run_mode(mode, listers, buyers, duration))
        self.stdout.write("")
        self.stdout.write(self.table(rows, listers, buyers, duration))
        if options["chart"]:
            self.chart(options["chart"], rows, listers, buyers, duration)
            self.stdout.write(f"Chart written to {options['chart']}")
        if any(row["problems"] for row in rows):
            raise CommandError("The market's invariants were violated (see above).")

    def run_mode(self, mode: Mode, listers: int, buyers: int, duration: float) -> dict[str, Any]:
        market = Market(f"bench-{mode}")
        market.delete()
        for n in range(1, listers + 1):
            market.add_user(n, f"lister{n}", 0)
        for n in range(FIRST_BUYER, FIRST_BUYER + buyers):
            market.add_user(n, f"buyer{n}", 10**12)
        # Each process counts its own progress in its own slot.
        progress = FORK.Array("q", listers + buyers, lock=False)
        start, stop_at, results = FORK.Event(), FORK.Value("d", 0.0), FORK.Queue()
        run = (start, stop_at, progress, results)
        processes = [
            FORK.Process(target=lister, args=(market.name, n, n - 1, mode, run))
            for n in range(1, listers + 1)
        ] + [
            FORK.Process(target=buyer, args=(market.name, FIRST_BUYER + n, listers + n, mode, run))
            for n in range(buyers)
        ]
        for process in processes:
            process.start()
        time.sleep(0.5)  # let every process connect before the clock starts
        began = time.monotonic()
        stop_at.value = began + duration
        start.set()
        while (left := stop_at.value - time.monotonic()) > 0:
            time.sleep(min(1.0, left))
            self.progress(mode, time.monotonic() - began, duration, progress, listers)
        outcomes = [results.get() for _ in processes]
        for process in processes:
            process.join()
        self.progress(mode, duration, duration, progress, listers, done=True)
        problems = market.check()
        for problem in problems:
            self.stderr.write(f"  {problem}")
        market.delete()
        bought = [outcome for outcome in outcomes if outcome[0] == "bought"]
        attempts = sum(outcome[2] for outcome in bought)
        return {
            "mode": mode,
            "listed": sum(outcome[1] for outcome in outcomes if outcome[0] == "listed"),
            "bought": sum(outcome[1] for outcome in bought),
            "retries": sum(outcome[3] for outcome in bought),
            "wait_ms": 1000 * sum(outcome[4] for outcome in bought) / max(attempts, 1),
            "problems": problems,
        }

    def progress(
        self,
        mode: Mode,
        elapsed: float,
        duration: float,
        progress: Any,
        listers: int,
        done: bool = False,
    ) -> None:
        listed, bought = sum(progress[:listers]), sum(progress[listers:])
        line = (
            f"{TITLES[mode]:>17}: {elapsed:4.0f} / {duration:g} s, "
            f"{listed:,} listed, {bought:,} bought"
        )
        if sys.stdout.isatty():
            self.stdout.write("\r" + line, ending="\n" if done else "")
            self.stdout.flush()
        elif done or int(elapsed) % 10 == 0:
            self.stdout.write(line)

    def table(self, rows: list[dict[str, Any]], listers: int, buyers: int, duration: float) -> str:
        book = BOOK.get((listers, buyers), {})
        lines = [
            f"{listers} listers, {buyers} buyers, {duration:g} s per mode",
            "",
            "| mode | listed | bought | retries | average wait | market_check | the book (60 s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            figures = book.get(row["mode"])
            theirs = (
                f"{figures[0]:,} / {figures[1]:,} / {figures[2]:,} / {figures[3]} ms"
                if figures
                else "-"
            )
            verdict = "ok" if not row["problems"] else f"{len(row['problems'])} violations"
            lines.append(
                f"| {TITLES[row['mode']]} | {row['listed']:,} | {row['bought']:,} | "
                f"{row['retries']:,} | {row['wait_ms']:.2f} ms | {verdict} | {theirs} |"
            )
        return "\n".join(lines)

    def chart(
        self, path: str, rows: list[dict[str, Any]], listers: int, buyers: int, duration: float
    ) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        book = BOOK.get((listers, buyers), {})
        labels = [TITLES[row["mode"]] for row in rows]
        scale = 60 / duration  # compare per 60 s, as the book does
        ours_bought = [row["bought"] * scale for row in rows]
        book_bought = [book.get(row["mode"], (0, 0, 0, 0))[1] for row in rows]
        ours_wait = [row["wait_ms"] for row in rows]
        book_wait = [book.get(row["mode"], (0, 0, 0, 0))[3] for row in rows]
        figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        positions = range(len(rows))
        for axis, ours, theirs, title in (
            (left, ours_bought, book_bought, "items bought per 60 s"),
            (right, ours_wait, book_wait, "average wait per purchase (ms)"),
        ):
            axis.bar([p - 0.2 for p in positions], ours, width=0.4, label="this run")
            axis.bar([p + 0.2 for p in positions], theirs, width=0.4, label="the book")
            axis.set_xticks(list(positions), labels)
            axis.set_title(title)
            axis.legend()
        figure.suptitle(f"{listers} listers, {buyers} buyers")
        figure.tight_layout()
        figure.savefig(path, dpi=120)
