"""The demo is the code users copy: it imports only public names of redis_components.

Public: a name in ``redis_components.__all__``, and the modules documented for users
(``exceptions``, ``embedded``, ``testing``, ``management.base``, and the read-only
``tasks.status`` that docs/limits.md shows) with the names they define.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import redis_components

DEMO = Path(__file__).resolve().parent.parent / "demo_project"
PUBLIC_MODULES = {"exceptions", "embedded", "testing", "management.base", "tasks.status"}


def public_in(module_name: str, name: str) -> bool:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    if exported is not None:
        return name in exported
    return not name.startswith("_") and hasattr(module, name)


def private_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each import from redis_components that is not public."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                package, _, rest = alias.name.partition(".")
                if package == "redis_components" and rest and rest not in PUBLIC_MODULES:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            package, _, rest = node.module.partition(".")
            if package != "redis_components":
                continue
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                if not rest:
                    public = alias.name in (*redis_components.__all__, "*", *PUBLIC_MODULES)
                else:
                    public = rest in PUBLIC_MODULES and public_in(node.module, alias.name)
                if not public:
                    yield node.lineno, name


def test_the_demo_imports_only_public_names() -> None:
    files = sorted(DEMO.rglob("*.py"))
    assert len(files) > 10
    found = [
        f"{path.relative_to(DEMO.parent)}:{line}: {name}"
        for path in files
        for line, name in private_imports(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "the demo imports private names:\n" + "\n".join(found)


def test_every_kind_of_private_import_is_found() -> None:
    source = """
import redis_components
import redis_components.exceptions
import redis_components.keys
import redis_components.tasks.worker as worker
from redis_components import RedisLock, conf, exceptions
from redis_components.exceptions import LockNotAcquired, _private
from redis_components.embedded import EmbeddedRedis
from redis_components.testing import crashed_worker, not_there
from redis_components.locks import LockScope
from redis_components.tasks.backend import RedisTaskBackend
from django.conf import settings
from . import views


def later():
    from redis_components.scripts import Script
"""
    assert list(private_imports(ast.parse(source))) == [
        (4, "redis_components.keys"),
        (5, "redis_components.tasks.worker"),
        (6, "redis_components.conf"),
        (7, "redis_components.exceptions._private"),
        (9, "redis_components.testing.not_there"),
        (10, "redis_components.locks.LockScope"),
        (11, "redis_components.tasks.backend.RedisTaskBackend"),
        (17, "redis_components.scripts.Script"),
    ]
