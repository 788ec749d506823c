"""Capture the Redis keys that this release writes for queued tasks.

``tests/test_upgrade.py`` restores them into a fresh server and checks that the code of
a later release runs every one of them: the wire format and the key layout are a
contract with the tasks waiting in users' Redis. Run it once per release whose format
later ones must read, from the project's root::

    .venv/bin/python -m tests.upgrade.capture tests/upgrade/queued-<version>.json

It starts a private redis-server, enqueues the tasks below through ``@task`` and
Django's Tasks, and writes every key (``DUMP``, its TTL) with what each task must return.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import sys
from typing import Any

from redis_components.embedded import EmbeddedRedis


def enqueue() -> list[dict[str, Any]]:
    """Queue tasks of every kind; return each one's id, front door and expected value."""
    from django.utils import timezone

    from tests.testapp import framework_tasks, tasks

    expected: list[dict[str, Any]] = []

    def ours(result: Any, value: list[Any]) -> None:
        expected.append({"id": result.id, "door": "task", "return_value": value})

    def djangos(result: Any, value: list[Any]) -> None:
        expected.append({"id": result.id, "door": "django", "return_value": value})

    ours(tasks.echo.enqueue("plain", 1), [["plain", 1], {}])
    ours(
        tasks.echo.enqueue("kw", n=2.5, flag=True, none=None),
        [["kw"], {"n": 2.5, "flag": True, "none": None}],
    )
    ours(tasks.echo.enqueue("ünïcødé ✓ 中文 🚀"), [["ünïcødé ✓ 中文 🚀"], {}])
    ours(tasks.echo.enqueue_in(0.2, "delayed"), [["delayed"], {}])
    when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(milliseconds=300)
    ours(tasks.echo.enqueue_at(when, "at"), [["at"], {}])
    ours(tasks.urgent_echo.enqueue("urgent"), [["urgent"], {}])
    ours(tasks.unique_echo.enqueue("unique", [1, {"b": 2}]), [["unique", [1, {"b": 2}]], {}])
    djangos(framework_tasks.echo.enqueue("django", 3), [["django", 3], {}])
    djangos(
        framework_tasks.echo.using(priority=9).enqueue("prioritised", k="✓"),
        [["prioritised"], {"k": "✓"}],
    )
    later = timezone.now() + datetime.timedelta(milliseconds=200)
    djangos(
        framework_tasks.echo.using(run_after=later).enqueue("django later"), [["django later"], {}]
    )
    return expected


def capture(client: Any) -> list[dict[str, Any]]:
    """Every key of the server: its name, DUMP and TTL in ms (0: none), base64 for bytes."""
    found = []
    for key in sorted(client.scan_iter(count=1000)):
        ttl = client.pttl(key)
        found.append(
            {
                "key": base64.b64encode(key).decode(),
                "dump": base64.b64encode(client.dump(key)).decode(),
                "ttl_ms": max(ttl, 0),
            }
        )
    return found


def main(output: str) -> None:
    with EmbeddedRedis() as server:
        os.environ["RC_TEST_REDIS_URL"] = server.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
        import django

        django.setup()
        expected = enqueue()
        client = server.client()
        data = {
            "redis_version": client.info("server")["redis_version"],
            "tasks": expected,
            "keys": capture(client),
        }
    with open(output, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1, ensure_ascii=False)
        file.write("\n")
    print(f"{len(data['keys'])} keys, {len(expected)} tasks written to {output}")


if __name__ == "__main__":
    main(sys.argv[1])
