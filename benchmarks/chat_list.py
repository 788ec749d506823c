"""The chat list of a user in many chats: one call of ``GroupChat.chat_list`` against
what the demo's chat page did before it (``unread_counts``, then ``members`` per chat).

    .venv/bin/python benchmarks/chat_list.py [--repeat 50]

A user is in 1, 50 and 500 chats of 3 members, each with 5 messages; the time of one
listing is the median of ``--repeat`` calls, against one private redis-server (Redis's
defaults) over TCP.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median, setup_django, start_redis, table


def timed(call: Callable[[], Any], repeat: int) -> float:
    call()  # warm: scripts loaded, connection open
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=50)
    options = parser.parse_args()
    with start_redis() as server:
        setup_django(server.url)
        from redis_components import GroupChat

        chats = GroupChat(creates_per_minute=0, accounts=True)
        admin = server.client()

        def one_by_one(user: str) -> list[Any]:
            counts = chats.unread_counts(user)
            return [(chat_id, chats.members(chat_id), n) for chat_id, n in counts.per_chat.items()]

        rows, made = [], 0
        for size in (1, 50, 500):
            while made < size:
                chat_id = chats.create("reader", [f"friend{made}", "other"], "hello")
                for n in range(4):
                    chats.send(chat_id, f"friend{made}", f"message {n}")
                made += 1
            listed = timed(lambda: chats.chat_list("reader"), options.repeat)
            before = timed(lambda: one_by_one("reader"), options.repeat)
            rows.append(
                [
                    f"{size:,}",
                    f"{listed * 1000:.2f} ms",
                    f"{before * 1000:.2f} ms",
                    f"{before / listed:.1f}x",
                ]
            )
        print(f"Machine: {machine(admin)}\n")
        print(
            table(
                ["chats", "chat_list (2 round trips)", "unread_counts + members each", "faster"],
                rows,
            )
        )


if __name__ == "__main__":
    main()
