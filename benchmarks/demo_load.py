"""Load on the demo site: purchases and listings from many clients at once.

    .venv/bin/pip install -e '.[embedded,hiredis]' --group bench
    .venv/bin/python benchmarks/demo_load.py [--clients 20] [--requests 3000] [--workers 4]

Starts a private redis-server, seeds the demo into it (and into a temporary SQLite
database), serves the site with gunicorn (sync workers) and runs a task worker beside it,
as a deployment would. Then ``--clients`` threads, each logged in as one of the demo's
users on its own keep-alive connection, send ``--requests`` POSTs in all: half purchases
of a random listing at its current price, half listings of one of their own items at a
random price. Reported: requests per second, the responses by status (no 5xx allowed),
what the purchases came to, and the market's invariants afterwards (``market_check``).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, percentile, start_redis, table

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "redis-demo"
USERS = ["alice", "bob", "carol", "dave", "erin"]


class Client:
    """One logged-in user on one keep-alive connection (cookies kept by hand)."""

    def __init__(self, port: int, name: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies: dict[str, str] = {}
        self.get("/login/")
        status, _ = self.post("/login/", {"username": name, "password": PASSWORD})
        assert status == 302, f"{name} could not log in ({status})"

    def _send(self, method: str, path: str, body: str | None = None) -> tuple[int, str]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
            headers["Referer"] = "http://127.0.0.1/"
        self.connection.request(method, path, body=body, headers=headers)
        response = self.connection.getresponse()
        for header, value in response.getheaders():
            if header.lower() == "set-cookie":
                name, _, rest = value.partition("=")
                self.cookies[name] = rest.split(";", 1)[0]
        text = response.read().decode(errors="replace")
        return response.status, response.getheader("Location") or text

    def get(self, path: str) -> tuple[int, str]:
        return self._send("GET", path)

    def post(self, path: str, data: dict[str, object]) -> tuple[int, str]:
        data = {**data, "csrfmiddlewaretoken": self.cookies.get("csrftoken", "")}
        return self._send("POST", path, urlencode(data))


@dataclass
class Result:
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0


def load(port: int, clients: int, requests: int, market: Any, ids: dict[str, int]) -> Result:
    result = Result()
    lock = threading.Lock()
    per_client = requests // clients
    sessions = [Client(port, USERS[n % len(USERS)]) for n in range(clients)]
    names = [USERS[n % len(USERS)] for n in range(clients)]
    start = threading.Barrier(clients + 1)

    def run(n: int) -> None:
        rng = random.Random(n)
        me = ids[names[n]]
        start.wait()
        for _ in range(per_client):
            mine = market.inventory(me)
            if mine and rng.random() < 0.5:
                kind = "list"
                path, data = (
                    "/inventory/sell/",
                    {"item": rng.choice(mine), "price": rng.randint(1, 60)},
                )
            else:
                others = [row for row in market.listings() if row[1] != me]
                if not others:
                    continue
                item, seller, price = rng.choice(others)
                kind = "buy"
                path, data = f"/market/buy/{quote(item)}/{seller}/", {"price": price}
            began = time.perf_counter()
            status, _ = sessions[n].post(path, data)
            took = time.perf_counter() - began
            with lock:
                result.statuses[status] += 1
                result.kinds[kind] += 1
                result.latencies.append(took)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    result.elapsed = time.perf_counter() - began
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()

    server = start_redis()
    where = machine(server.client())
    data_dir = tempfile.mkdtemp(prefix="rc-demo-load-")
    env = {**os.environ, "REDIS_URL": server.url, "DEMO_DATA_DIR": data_dir, "DJANGO_DEBUG": "0"}
    env["DJANGO_SETTINGS_MODULE"] = "demo_project.settings"
    python = sys.executable
    manage = str(ROOT / "manage.py")
    subprocess.run([python, manage, "migrate", "-v", "0"], env=env, check=True, cwd=ROOT)
    subprocess.run(
        [python, manage, "seed_demo"], env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL
    )
    gunicorn = [
        str(Path(python).parent / "gunicorn"), "demo_project.wsgi", "-w", str(args.workers),
        "-b", f"127.0.0.1:{args.port}", "--log-level", "warning",
    ]  # fmt: skip
    site = subprocess.Popen(gunicorn, env=env, cwd=ROOT)
    worker = subprocess.Popen(
        [python, manage, "rc_worker"], env=env, cwd=ROOT, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                http.client.HTTPConnection("127.0.0.1", args.port, timeout=1).request("GET", "/")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        os.environ.update(REDIS_URL=server.url, DEMO_DATA_DIR=data_dir)
        os.environ["DJANGO_SETTINGS_MODULE"] = "demo_project.settings"
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from demo_project.marketplace.views import MARKET

        ids = dict(get_user_model()._default_manager.values_list("username", "pk"))
        result = load(args.port, args.clients, args.requests, MARKET, ids)
        problems = MARKET.check()
    finally:
        site.terminate()
        worker.terminate()
        site.wait()
        worker.wait()
        server.stop()

    statuses = result.statuses
    total = sum(statuses.values())
    failures = sum(count for status, count in statuses.items() if status >= 500)
    print(f"Machine: {where}\n")
    print(
        f"{total} POSTs ({dict(result.kinds)}) from {args.clients} clients to gunicorn "
        f"with {args.workers} sync workers, in {result.elapsed:.1f} s\n"
    )
    row = [
        f"{total / result.elapsed:,.0f}",
        f"{percentile(result.latencies, 0.5) * 1000:.1f} ms",
        f"{percentile(result.latencies, 0.99) * 1000:.1f} ms",
        ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items())),
        failures,
        "ok" if not problems else f"{len(problems)} violations",
    ]
    print(table(["requests / s", "p50", "p99", "responses", "5xx", "market_check"], [row]))
    for problem in problems:
        print("  ", problem)
    if problems or failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
