"""Django's own tests of its Tasks framework (``tests/tasks/``), run against our backend.

The tests come from the published source distribution of the installed Django (see
``tests/peer_suites.py``) and run in a subprocess with ``tests/django_suite/plugin.py``.
Their assertions are Django's. Each test must pass, or be one of :data:`NOT_APPLICABLE`,
which says why it cannot apply (docs/tasks.md lists them too, under "Django's own tests").
"""

from __future__ import annotations

from pathlib import Path

import django
import pytest

from redis_components.embedded import EmbeddedCluster, EmbeddedRedis
from tests.peer_suites import check, run_suite, unpack

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


@pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="Django 5.2 has no django.tasks, so its source has no tests of it; the leg on "
    "Django 6 runs them",
)
def test_djangos_own_tasks_tests_pass_on_our_backend(
    tmp_path: Path, redis_server: EmbeddedRedis | EmbeddedCluster
) -> None:
    suite = unpack("django", django.get_version(), {"tests/tasks": "tasks"})
    outcomes, output = run_suite(
        [suite / "tasks"],
        tmp_path / "report.xml",
        {"RC_TEST_REDIS_URL": redis_server.url},
        ("-p", "tests.django_suite.plugin"),
    )
    check(
        f"Django {django.get_version()}'s tests/tasks on our backend",
        outcomes,
        NOT_APPLICABLE,
        output,
        60,
    )
