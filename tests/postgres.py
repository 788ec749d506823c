"""A PostgreSQL server of the suite's own, for tests of threads and the ORM.

Debian's ``postgresql`` package (``make test`` installs it as root, as it installs
Chromium) gives ``initdb`` and ``pg_ctl``; the server lives in a temporary directory,
listens on 127.0.0.1 at a free port, and trusts local connections. As root it runs as
the package's ``postgres`` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from redis_components.embedded import free_port

DATABASE = "rc_tests"


def binaries() -> Path | None:
    """The directory of Debian's newest PostgreSQL server programs, or of those on PATH."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    found.sort(key=lambda path: int(path.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable() -> str | None:
    """Why the suite cannot start PostgreSQL here, or ``None``."""
    if binaries() is None:
        return "PostgreSQL's server programs are not installed (Debian's postgresql package)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (the dev dependency group has it)"
    if os.getuid() == 0 and (shutil.which("runuser") is None or not _user_exists("postgres")):
        return "running as root without runuser or a 'postgres' user to run PostgreSQL as"
    return None


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextmanager
def postgres_server() -> Iterator[dict[str, Any]]:
    """Start a server; yield Django's ``DATABASES`` entry for a fresh database on it."""
    bindir = binaries()
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="rc-postgres-"))
    as_user: list[str] = []
    if os.getuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", free_port()

    def run(*command: str | Path) -> None:
        subprocess.run([*as_user, *map(str, command)], check=True, capture_output=True)

    run(bindir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    run(bindir / "pg_ctl", "-D", data, "-l", base / "server.log", "-o", options, "-w", "start")
    try:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(port),
        }
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)
