"""Shared pieces of the benchmarks: a private Redis, Django settings, the machine, tables."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redis_components.embedded import EmbeddedRedis


def start_redis(**config: str) -> EmbeddedRedis:
    """A private redis-server with Redis's own defaults (hz 10) unless told otherwise."""
    return EmbeddedRedis(config=config).start()


def setup_django(url: str) -> None:
    """Configure Django just enough for redis_components to talk to ``url``."""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["redis_components"],
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}},
        USE_TZ=True,
    )
    django.setup()


def machine(client: redis.Redis) -> str:
    """One line that says where the numbers come from."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = client.info("server")
    hz = client.config_get("hz")["hz"]
    return (
        f"{os.cpu_count()} CPUs ({model}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, redis-py {redis.__version__} "
        f"({reply_parser()}), Redis {info['redis_version']} (hz {hz})"
    )


def reply_parser() -> str:
    """Which reply parser redis-py uses in this environment: hiredis's C one, or its own."""
    from redis.utils import HIREDIS_AVAILABLE

    if HIREDIS_AVAILABLE:
        return f"hiredis {importlib.metadata.version('hiredis')} parser"
    return "its pure-Python parser; hiredis is not installed"


T = TypeVar("T")


def in_turns(contenders: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """Each round (from 0) with each contender, the rounds taking turns: each starts one
    contender later in the list, so that none always runs first (or after the same one)."""
    for round_ in range(rounds):
        shift = round_ % len(contenders)
        for contender in [*contenders[shift:], *contenders[:shift]]:
            yield round_, contender


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
