"""Django's own tests of its Tasks framework (``tests/tasks/``), run against our backend.

The tests come from the published source distribution of the installed Django,
downloaded at test time into ``.peer-suites/`` (nothing of Django's is in this
repository), and run in a subprocess with ``tests/django_suite/plugin.py``. Their
assertions are Django's. Each test must pass, or be one of :data:`NOT_APPLICABLE`,
which says why it cannot apply (the README lists them too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import django
import pytest

from redis_components.embedded import EmbeddedCluster, EmbeddedRedis
from tests.processes import ROOT

CACHE = ROOT / ".peer-suites"

_DUMMY = "tasks.test_dummy_backend.DummyBackendTestCase"
_IMMEDIATE = "tasks.test_immediate_backend.ImmediateBackendTestCase"
_TASKS = "tasks.test_tasks.TaskTestCase"
_CLASS = "asserts that the configured backend is Django's own {} class"
_LACKS = "asserts that Django's ImmediateBackend lacks {}, which our backend supports"
NOT_APPLICABLE = {
    f"{_DUMMY}.test_using_correct_backend": _CLASS.format("DummyBackend"),
    f"{_TASKS}.test_using_correct_backend": _CLASS.format("DummyBackend"),
    f"{_TASKS}.test_get_backend": _CLASS.format("DummyBackend"),
    f"{_IMMEDIATE}.test_using_correct_backend": _CLASS.format("ImmediateBackend"),
    f"{_DUMMY}.test_refresh_result": "changes the DummyBackend's in-memory record and expects "
    "refresh() to read that change; our records live in Redis, written by the workers",
    f"{_DUMMY}.test_refresh_result_async": "the same, with arefresh()",
    f"{_IMMEDIATE}.test_cannot_get_result": _LACKS.format("get_result()"),
    f"{_IMMEDIATE}.test_cannot_refresh_result": _LACKS.format("refresh()"),
    f"{_IMMEDIATE}.test_cannot_pass_run_after": _LACKS.format("run_after"),
}


def django_suite() -> Path:
    """Django's ``tests/tasks`` for the installed version, downloaded once."""
    version = django.get_version()
    target = CACHE / f"django-{version}"
    if (target / "tasks" / "__init__.py").exists():
        return target
    CACHE.mkdir(exist_ok=True)
    download = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"),
            *(f"django=={version}", "--dest", str(CACHE), "--quiet"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    archives = [p for p in CACHE.glob("*.tar.gz") if p.name.lower() == f"django-{version}.tar.gz"]
    if download.returncode != 0 or not archives:
        pytest.skip(
            f"Django {version}'s source distribution could not be downloaded, so its tests "
            f"of django.tasks were not run: {download.stderr.strip()[-500:]}"
        )
    with tarfile.open(archives[0]) as archive:
        members = [m for m in archive.getmembers() if "/tests/tasks/" in m.name and m.isfile()]
        for member in members:
            member.name = "tasks/" + member.name.split("/tests/tasks/", 1)[1]
        archive.extractall(target, members=members, filter="data")
    return target


@pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="Django 5.2 has no django.tasks, so its source has no tests of it; the leg on "
    "Django 6 runs them",
)
def test_djangos_own_tasks_tests_pass_on_our_backend(
    tmp_path: Path, redis_server: EmbeddedRedis | EmbeddedCluster
) -> None:
    suite = django_suite()
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", str(suite / "tasks")),
            *("-p", "tests.django_suite.plugin", "-p", "no:cacheprovider"),
            *("--rootdir", str(suite), "-c", str(ROOT / "pyproject.toml")),
            *("--junitxml", str(report), "-q", "--no-cov"),
        ],
        cwd=ROOT,
        env={**os.environ, "RC_TEST_REDIS_URL": redis_server.url},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.exists(), result.stdout + result.stderr
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[name] = "failed" if failed else "skipped" if case.find("skipped") else "passed"
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    unexpected = failed - set(NOT_APPLICABLE)
    assert not unexpected, (
        f"Django's tests that failed on our backend: {sorted(unexpected)}\n"
        + (result.stdout[-5000:])
    )
    stale = set(NOT_APPLICABLE) - failed
    assert not stale, f"listed as not applicable, yet they pass or are gone: {sorted(stale)}"
    passed = sum(outcome == "passed" for outcome in outcomes.values())
    assert passed >= 60, outcomes  # the suite ran, not just collected
    print(
        f"\nDjango {django.get_version()}'s tests/tasks on our backend: {passed} passed, "
        f"{len(failed)} not applicable:\n"
        + "\n".join(f"  {name}: {NOT_APPLICABLE[name]}" for name in sorted(failed))
    )
