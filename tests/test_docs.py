"""What the README and the documentation's pages say, where a test can check it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def read(path: str) -> str:
    return (ROOT / path).read_text()


def test_the_docs_index_lists_every_component_of_the_readme() -> None:
    readme = re.findall(r"^\| (.+?) \| 6\.\d \| \[docs/(\w+\.md)\]", read("README.md"), re.M)
    index = re.findall(
        r"^\| (.+?) \| 6\.\d \| .+? \| \[.+?\]\((\w+\.md)\) \|$", read("docs/index.md"), re.M
    )
    assert len(readme) == 7
    assert index == readme


def test_the_readme_lock_view_says_how_long_it_waits_before_its_409() -> None:
    [view] = re.findall(r"^@redis_lock\(.*\)$", read("README.md"), re.M)
    assert "blocking_timeout=" in view


def test_the_locks_page_says_what_user_is_when_nobody_is_logged_in() -> None:
    # tests/test_locks.py shows the name: an anonymous request's lock is "...:anonymous".
    assert "the string `anonymous`, one name shared by every anonymous" in " ".join(
        read("docs/locks.md").split()
    )


def test_the_development_redis_server_listens_on_loopback_only() -> None:
    commands = re.findall(r"^\S*redis-server .*$", read("docs/installation.md"), re.M)
    assert commands
    assert all("--bind 127.0.0.1 " in command for command in commands)


def test_the_workflows_page_offers_s_for_djangos_task() -> None:
    page = " ".join(read("docs/workflows.md").split())
    assert "for Django's `@task` on our backend on every supported version" in page


def test_contributings_map_names_every_module_of_the_task_system() -> None:
    layout = read("CONTRIBUTING.md").split("## Layout", 1)[1].split("## ", 1)[0]
    mapped = set(re.findall(r"^    (\w+) ", layout, re.M))
    assert mapped == task_modules()


def test_the_task_packages_docstring_names_every_module_of_it() -> None:
    docstring = read("redis_components/tasks/__init__.py").split('"""')[1]
    named = set(re.findall(r"``(\w+)(?:\.py|/)``", docstring))
    assert named == task_modules()


def task_modules() -> set[str]:
    """The modules and packages of the task system (a package by its folder's name)."""
    tasks = ROOT / "redis_components" / "tasks"
    modules = {path.stem for path in tasks.glob("*.py")} - {"__init__"}
    return modules | {path.parent.name for path in tasks.glob("*/__init__.py")}
