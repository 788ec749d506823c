"""What saying its progress costs a task: 100,000 items, each followed by
``context.set_progress()`` or not, at a few sizes of work per item, on a real worker
(``redis_components.testing.drain``) and a private Redis.

    .venv/bin/python benchmarks/progress.py     # about a minute
"""

from __future__ import annotations

import hashlib
import time

from common import machine, median, setup_django, start_redis, table

ITEMS = 100_000
ROUNDS = 5
SIZES = (0, 256, 4096, 8192, 32768)  # bytes hashed per item (0: no work at all)


def main() -> None:
    server = start_redis()
    setup_django(server.url)
    from redis_components import get_result, redis_task
    from redis_components.connection import get_client
    from redis_components.tasks import RedisTaskContext
    from redis_components.testing import drain

    @redis_task(queue="bench", takes_context=True)
    def work(context: RedisTaskContext, size: int, report: bool) -> float:
        block = b"x" * size
        started = time.perf_counter()
        for done in range(1, ITEMS + 1):
            if size:
                hashlib.sha256(block).digest()
            if report:
                context.set_progress(done, ITEMS)
        return time.perf_counter() - started

    def seconds(size: int, report: bool) -> float:
        result = work.enqueue(size, report)
        assert drain(["bench"]) == 1
        value = get_result(result.id).return_value
        assert isinstance(value, float)
        return value

    print(machine(get_client()))
    print(f"{ITEMS:,} items, median of {ROUNDS} runs each, the two kinds taking turns\n")
    rows = []
    for size in SIZES:
        plain, reported = [], []
        for _ in range(ROUNDS):
            plain.append(seconds(size, False))
            reported.append(seconds(size, True))
        without, with_ = median(plain), median(reported)
        per_call = (with_ - without) / ITEMS * 1e6
        rows.append(
            (
                size,
                f"{without * 1e6 / ITEMS:.2f}",
                f"{without:.3f}",
                f"{with_:.3f}",
                f"{per_call:.2f}",
                f"{(with_ / without - 1) * 100:.1f} %" if size else "-",
            )
        )
    headers = ("bytes hashed per item", "µs per item", "s without", "s with", "µs per call")
    print(table((*headers, "slower by"), rows))
    server.stop()


if __name__ == "__main__":
    main()
