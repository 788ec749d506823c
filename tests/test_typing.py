"""What a type checker sees of tasks: tests/typechecks/tasks_typed.py, checked by mypy
(with django-stubs, as ``make lint`` checks the package) and by pyright, each in a
process of its own. That file's expected errors fail either checker when they go
missing, as its ``assert_type`` lines do when a type changes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import missing

ROOT = Path(__file__).resolve().parent.parent
CHECKED = Path("tests", "typechecks", "tasks_typed.py")

pytestmark = pytest.mark.timeout(600)


def run(*command: str) -> subprocess.CompletedProcess[str]:
    # Pyright's package asks the package index whether it is the newest release unless
    # told to keep quiet: the check needs no network.
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def needs(checker: str) -> None:
    if importlib.util.find_spec(checker) is None:
        missing(f"{checker} is not installed (it is in the dev dependency group)")


def test_mypy_sees_typed_tasks() -> None:
    needs("mypy")
    checked = run("mypy", "--strict", "--warn-unused-ignores", str(CHECKED))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "no issues found in 1 source file" in checked.stdout


def test_pyright_sees_typed_tasks() -> None:
    needs("pyright")
    # Its pyrightconfig.json there: strict, and an ignore that ignores nothing is an error.
    checked = run(
        "pyright", "--outputjson", "--pythonpath", sys.executable, "-p", str(CHECKED.parent)
    )
    report = json.loads(checked.stdout)
    problems = [
        f"{Path(d['file']).name}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
    ]
    assert checked.returncode == 0, "\n".join(problems) or checked.stderr
    assert report["summary"]["filesAnalyzed"] == 1
