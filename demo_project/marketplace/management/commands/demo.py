"""`manage.py demo`: everything `make demo` runs, in one process tree.

Migrates the database, seeds the demo's data when there is none, then runs the
development server on 127.0.0.1:8000 and a task worker (``manage.py rc_worker``) beside
the embedded Redis (started by the settings when REDIS_URL is unset). Ctrl-C stops every
process it started, the Redis server last; so does SIGTERM or SIGHUP sent to this
process alone, and the children stop by themselves if it is killed outright.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandParser

from demo_project.marketplace.seed import DEMO_PASSWORD, PEOPLE
from demo_project.marketplace.views import MARKET
from redis_components.embedded import die_with_parent
from redis_components.management.base import RedisCommand

# Seconds the children get to stop after Ctrl-C (which they receive too) or SIGTERM.
STOP_TIMEOUT = 10
# SIGTERM and SIGHUP reach this process alone: it tells its children.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Command(RedisCommand):
    help = (
        "Run the demo marketplace: migrate, then serve http://127.0.0.1:8000/ and run a task "
        "worker until Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000).")

    def handle(self, *args: Any, port: int, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        if not MARKET.client.exists(MARKET.key("people")):
            self.stdout.write("Seeding the demo's data (once):")
            call_command("seed_demo")
        where = "embedded, data in .demo-data/" if settings.REDIS_EMBEDDED else "from REDIS_URL"
        self.stdout.write(f"Redis: {settings.REDIS_URL} ({where})")
        manage = str(settings.BASE_DIR / "manage.py")
        stop: list[str] = []

        def note(signum: int, frame: FrameType | None) -> None:
            stop.append(signal.Signals(signum).name)

        for signum in STOP_SIGNALS:
            signal.signal(signum, note)
        children = [
            subprocess.Popen(command, preexec_fn=die_with_parent)
            for command in (
                [sys.executable, manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
                [sys.executable, manage, "rc_worker"],
            )
        ]
        people = ", ".join(PEOPLE)
        self.stdout.write(f"Log in as any of {people}, with the password {DEMO_PASSWORD!r}.")
        self.stdout.write(
            self.style.SUCCESS(f"The demo is at http://127.0.0.1:{port}/  (Ctrl-C stops it)")
        )
        try:
            while not stop and all(child.poll() is None for child in children):
                time.sleep(0.2)
            if stop:
                self.stdout.write(f"{stop[0]}: stopping the server and the worker.")
        except KeyboardInterrupt:
            # Ctrl-C reached every child too: give the worker time to finish its task.
            deadline = time.monotonic() + STOP_TIMEOUT
            while time.monotonic() < deadline and any(c.poll() is None for c in children):
                time.sleep(0.1)
        finally:
            for signum in STOP_SIGNALS:  # already stopping
                signal.signal(signum, signal.SIG_IGN)
            for child in children:
                if child.poll() is None:
                    child.terminate()  # the worker finishes its task, then exits
            for child in children:
                try:
                    child.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.stdout.write("Stopped.")
