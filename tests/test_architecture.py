"""The design's rules, read from the source (CONTRIBUTING.md, "Layout").

- No import cycle among the package's modules. Every ``import`` counts, wherever it
  stands: inside a function (lazy) and under ``if TYPE_CHECKING:`` too, since a cycle
  that only a lazy import hides is still two modules that cannot be read apart.
- The task system is at most ten floors tall (``MAX_FLOORS``): no chain of imports among
  the modules of ``tasks/`` passes through more than ten of them, every import counted
  as above and the store package (``tasks/store/``) counted as one floor, since its own
  layers are its own matter. A taller chain is a lower module reaching up for what it
  could be handed (a type, a protocol) or for what belongs to another module.
- What a module never needs at run time (``NEVERS``): the task type talks to no Redis
  and reads no workflow codec; the worker side needs no Django backend module.
- Nothing under ``tasks/`` imports ``django.http``: HTTP lives in ``admin/`` and views.
- Under ``tasks/`` only the store speaks the task keys' protocol: no other module runs
  scripts, gets a client of its own, or calls a Redis command method; each asks the
  store (``TaskStore``) instead. The few that hold a connection for the store are listed
  below with what they may import and why.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import redis

import redis_components

PACKAGE = "redis_components"
ROOT = Path(redis_components.__file__).parent
STORE = f"{PACKAGE}.tasks.store"

# What gives a module a way to send commands to Redis: running Lua, or a client.
REDIS_ACCESS = {
    f"{PACKAGE}.scripts": {"*"},
    f"{PACKAGE}.connection": {
        "get_client",
        "get_async_client",
        "node_client",
        "private_client",
        "OneConnection",
        "pubsub",
        "subscribe",
    },
    f"{PACKAGE}.twins": {"*"},
    STORE: {"tasks_client"},
}

# Modules under tasks/ (not the store) that may import some of REDIS_ACCESS, and why.
REDIS_ACCESS_ALLOWED = {
    # The worker owns its connections (a private pool that no task uses, one held
    # connection for the loop's fetches) and hands them to TaskStore and to its Waker;
    # it sends no command itself (the command-method rule below holds for it).
    f"{PACKAGE}.tasks.worker": {"private_client", "OneConnection", "tasks_client"},
    # An idle worker SUBSCRIBEs to its queues' wake-up channels: Pub/Sub channels, not
    # keys; the store's scripts PUBLISH there.
    f"{PACKAGE}.tasks.waker": {"pubsub", "subscribe"},
}

# Method names of everyday Python objects that redis-py also uses for commands
# (threading.Event.wait/set, file and socket close, select.select, logger.info...):
# a call to one of them says nothing about Redis.
COMMON_METHODS = {
    "close",
    "get",
    "info",
    "keys",
    "reset",
    "select",
    "set",
    "time",
    "wait",
}


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


@functools.cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text(), filename=str(modules()[name]))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node`` that may run: ``if TYPE_CHECKING:`` bodies left out."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield other
                yield from _run_time(other)
            continue
        yield child
        yield from _run_time(child)


def imported(name: str, *, run_time: bool = False) -> Iterator[tuple[str, str | None, int]]:
    """(module, imported name or None, line) for every import in module ``name``
    (``run_time``: leaving out those under ``if TYPE_CHECKING:``).

    ``from a import b`` is an import of the module ``a.b`` when there is one (as
    import-linter reads it), else of ``b`` from ``a``. Nothing outside the package is
    resolved, only named.
    """
    package = name if is_package(name) else name.rpartition(".")[0]
    nodes = _run_time(tree(name)) if run_time else ast.walk(tree(name))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules():
                    yield submodule, None, node.lineno
                else:
                    yield base, alias.name, node.lineno


def internal(module: str) -> str | None:
    """The package's module that importing ``module`` runs last (None if outside)."""
    while module and module not in modules():
        module = module.rpartition(".")[0]
    return module or None


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for name in modules():
        for module, _, _ in imported(name):
            target = internal(module)
            if target is not None and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each module that is on a cycle, without repeats."""
    found: dict[frozenset[str], list[str]] = {}
    for start in sorted(graph):
        # Breadth first from start's successors back to start: a shortest cycle.
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            following = []
            for module in frontier:
                for successor in sorted(graph[module]):
                    if successor == start:
                        cycle = [*paths[module], start]
                        break
                    if successor not in paths:
                        paths[successor] = [*paths[module], successor]
                        following.append(successor)
                if cycle is not None:
                    break
            frontier = following
        if cycle is not None:
            found.setdefault(frozenset(cycle), cycle)
    return list(found.values())


def task_modules() -> list[str]:
    return sorted(name for name in modules() if name.startswith(f"{PACKAGE}.tasks."))


def is_store(name: str) -> bool:
    return name == STORE or name.startswith(f"{STORE}.")


def redis_commands() -> set[str]:
    """The names of redis-py's command methods, less those everyday objects share."""
    names: set[str] = set()
    for kind in (redis.Redis, redis.client.Pipeline):
        names |= {name for name in dir(kind) if not name.startswith("_")}
    for kind in (dict, list, set, str, bytes, tuple, object):
        names -= set(dir(kind))
    return names - COMMON_METHODS


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.tasks.backend" in graph[f"{PACKAGE}.tasks"]  # from .backend import
    assert f"{PACKAGE}.keys" in graph[f"{PACKAGE}.tasks.messages"]  # from .. import keys
    assert f"{PACKAGE}.tasks.status" in graph[f"{PACKAGE}.metrics"]  # inside a function
    assert f"{PACKAGE}.keys" in graph[f"{PACKAGE}.autocomplete"]  # under TYPE_CHECKING
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


# The most floors the task system may have: modules on its longest chain of imports.
MAX_FLOORS = 10


def tallest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest chain of imports among the task system's modules (``tasks`` and every
    module under it), each a floor, the store package and its modules one floor together
    (``tasks.store``). Fails naming the chain if the floors make a cycle."""

    def floor(name: str) -> str:
        return STORE if is_store(name) else name

    tasks = f"{PACKAGE}.tasks"
    inside = {floor(name) for name in graph if name == tasks or name.startswith(f"{tasks}.")}
    above: dict[str, set[str]] = {name: set() for name in inside}
    for name, targets in graph.items():
        if floor(name) in inside:
            above[floor(name)] |= {floor(t) for t in targets if floor(t) in inside}
    longest: dict[str, list[str]] = {}

    def chain_from(name: str, path: tuple[str, ...]) -> list[str]:
        assert name not in path, "a cycle of floors: " + " -> ".join([*path, name])
        if name not in longest:
            below = [chain_from(t, (*path, name)) for t in sorted(above[name] - {name})]
            longest[name] = [name, *max(below, key=len, default=[])]
        return longest[name]

    return max((chain_from(name, ()) for name in sorted(inside)), key=len, default=[])


def test_the_floors_count_the_store_as_one() -> None:
    t, store = f"{PACKAGE}.tasks", STORE
    graph = {
        f"{t}.worker": {f"{t}.jobs", f"{PACKAGE}.conf"},
        f"{t}.jobs": {f"{store}.queues"},
        f"{store}.queues": {f"{store}.calls"},
        f"{store}.calls": {f"{t}.messages"},
        f"{t}.messages": set(),
        f"{t}.waker": set(),
        f"{PACKAGE}.conf": set(),
    }
    assert tallest_chain(graph) == [f"{t}.worker", f"{t}.jobs", store, f"{t}.messages"]


def test_the_task_system_is_at_most_ten_floors_tall() -> None:
    """A lower module that imports a higher one (for a type, a helper that belongs
    elsewhere) stacks everything above it one floor higher: a reader can no longer learn
    the task system from the bottom up. Counted with every import, the store as one."""
    chain = tallest_chain(import_graph())
    assert len(chain) <= MAX_FLOORS, (
        f"the task system is {len(chain)} floors tall (at most {MAX_FLOORS}): "
        + " -> ".join(name.removeprefix(f"{PACKAGE}.") for name in chain)
    )


def test_the_task_type_needs_neither_the_backend_nor_workflows() -> None:
    """What a task is (its type, options, steps and the message it makes) reads without
    the backend that Django's ``@task`` adds, and without the workflows' public module."""
    graph = import_graph()
    below = {f"{PACKAGE}.tasks.definition"}
    frontier = set(below)
    while frontier:  # everything the task type's module needs, directly or not
        frontier = set().union(*(graph[name] for name in frontier)) - below
        below |= frontier
    assert not below & {f"{PACKAGE}.tasks.backend", f"{PACKAGE}.tasks.workflows"}


def needs(name: str) -> set[str]:
    """What module ``name`` needs at run time, directly or not: the package's modules
    and the other top-level packages they import (``if TYPE_CHECKING:`` left out)."""
    found: set[str] = set()
    frontier = [name]
    while frontier:
        module = frontier.pop()
        for target, _, _ in imported(module, run_time=True):
            inside = internal(target)
            if inside is None:
                found.add(target.partition(".")[0])
            elif inside not in found and inside != name:
                found.add(inside)
                frontier.append(inside)
    return found


def _closure_of(names: set[str], found: set[str]) -> set[str]:
    """``names`` and every module of the package under them (a package's submodules)."""
    return {
        module for module in found if any(module == n or module.startswith(f"{n}.") for n in names)
    }


# What a module never needs at run time, directly or through what it imports, and why.
NEVERS = {
    # The task type (its options, steps, plan and the message a call makes) talks to no
    # Redis (our exceptions subclass redis-py's, nothing more): a node enqueues through
    # its backend, as Django's Task.enqueue delegates to get_backend().
    f"{PACKAGE}.tasks.definition": {
        f"{PACKAGE}.connection",
        f"{PACKAGE}.scripts",
        STORE,
        f"{PACKAGE}.tasks.workflow_records",
        f"{PACKAGE}.tasks.backend",
        f"{PACKAGE}.tasks.workflows",
    },
    # The worker side runs a Django task through its backend's alias (QueueBackend),
    # never through the module of Django's @task backend.
    **{
        f"{PACKAGE}.tasks.{side}": {f"{PACKAGE}.tasks.backend"}
        for side in ("worker", "conveyor", "slots", "execution", "jobs", "lease", "supervisor")
    },
}


def test_what_a_module_never_needs() -> None:
    broken = {name: sorted(_closure_of(never, needs(name))) for name, never in NEVERS.items()}
    assert not any(broken.values()), {name: found for name, found in broken.items() if found}


# A key named in Lua by concatenation (``x .. 'ready:'``) or cut from another's name by
# arithmetic (``#base + 7``, ``- #'counter'``): lua/lib/keys.lua alone may do either.
_LUA_KEY_BUILT = re.compile(r"\.\.\s*'[a-z_]+[:']|#base\s*\+\s*\d|-\s*#'[a-z_:]+'")


def test_only_lib_keys_derives_a_key_name_in_lua() -> None:
    lua = ROOT / "lua"
    found = [
        f"{path.relative_to(lua)}:{number}: {line.strip()}"
        for path in sorted(lua.rglob("*.lua"))
        if path != lua / "lib" / "keys.lua"
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if not line.lstrip().startswith("--") and _LUA_KEY_BUILT.search(line)
    ]
    assert not found, "keys named outside lua/lib/keys.lua:\n" + "\n".join(found)


def test_nothing_under_tasks_imports_django_http() -> None:
    found = [
        f"{name}:{line} imports {module}"
        for name in task_modules()
        for module, attribute, line in imported(name)
        if module == "django.http"
        or module.startswith("django.http.")
        or (module == "django" and attribute == "http")
    ]
    assert not found, "\n".join(found)


def test_only_the_store_gets_a_redis_client_under_tasks() -> None:
    found = []
    for name in task_modules():
        if is_store(name):
            continue
        allowed = REDIS_ACCESS_ALLOWED.get(name, set())
        for module, attribute, line in imported(name):
            names = REDIS_ACCESS.get(module, set())
            if ("*" in names or attribute in names) and attribute not in allowed:
                found.append(f"{name}:{line} imports {attribute or module} from {module}")
    assert not found, "only the store may talk to Redis:\n" + "\n".join(found)


def test_only_the_store_calls_redis_commands_under_tasks() -> None:
    commands = redis_commands()
    assert {"hset", "zadd", "evalsha", "pipeline", "execute_command", "publish"} <= commands
    found = [
        f"{name}:{node.lineno} calls .{node.func.attr}()"
        for name in task_modules()
        if not is_store(name)
        for node in ast.walk(tree(name))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in commands
    ]
    assert not found, "only the store may send Redis commands:\n" + "\n".join(found)


# The design's size budgets (ARCHITECTURE.md, "Budgets"): a reader finds a component in
# one sitting, and no feature grows a hub again.
BUDGETS = {
    "module": 700,  # lines of a Python module
    "function": 80,  # lines of a function, its docstring left out
    "class": 30,  # public methods of a class
    "script": 150,  # lines of a Lua script at its top level (lua/*.lua; lua/lib/ are includes)
    "argv": 8,  # ARGV of a Lua script
}

# What is over a budget today, each at most at its size now: it may shrink, never grow,
# and it leaves this list (the test says so) once it fits. The task system's three hubs
# (the worker, the store, the take script) are being split along their seams (the hubs
# issue); the others are components whose split is still to come.
OVER_BUDGET = {
    "module redis_components/files.py": 858,
    "module redis_components/locks.py": 938,
    "module redis_components/messaging.py": 1003,
    # One property per setting: a namespace, not behaviour.
    "class redis_components/conf.py Settings": 36,
    "script redis_components/lua/chat.lua": 215,
    "script redis_components/lua/files.lua": 320,
    "script redis_components/lua/queue_recover.lua": 158,
    "argv redis_components/lua/queue_cancel.lua": 9,
}


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's lines, its docstring left out."""
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    value = first.value if isinstance(first, ast.Expr) else None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def _measure_python(relative: str, source: str) -> Iterator[tuple[str, int]]:
    yield f"module {relative}", len(source.splitlines())
    parsed = ast.parse(source)
    owners: dict[ast.AST, str] = {}
    for node in ast.walk(parsed):
        if isinstance(node, ast.ClassDef):
            public = [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and not item.name.startswith("_")
            ]
            yield f"class {relative} {node.name}", len(public)
            for item in node.body:
                owners[item] = f"{node.name}."
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"function {relative} {owners.get(node, '')}{node.name}", _body_lines(node)


def _measure_lua(relative: str, source: str) -> Iterator[tuple[str, int]]:
    if "/lib/" not in relative:
        yield f"script {relative}", len(source.splitlines())
    yield f"argv {relative}", max(map(int, re.findall(r"ARGV\[(\d+)\]", source)), default=0)


def measured(root: Path = ROOT) -> dict[str, int]:
    """What exceeds a budget under ``root``, by what it is (as OVER_BUDGET names it)."""
    found = {}
    for path in sorted(root.rglob("*.py")) + sorted(root.rglob("*.lua")):
        relative = f"{PACKAGE}/{path.relative_to(root).as_posix()}"
        source = path.read_text()
        measure = _measure_python if path.suffix == ".py" else _measure_lua
        for what, size in measure(relative, source):
            if size > BUDGETS[what.split(" ", 1)[0]]:
                found[what] = size
    return found


def test_the_size_budgets_hold() -> None:
    found = measured()
    grown = [
        f"{what}: {size} (budget {BUDGETS[what.split(' ', 1)[0]]}"
        + (f", at most {OVER_BUDGET[what]} until it is split)" if what in OVER_BUDGET else ")")
        for what, size in sorted(found.items())
        if size > OVER_BUDGET.get(what, 0)
    ]
    assert not grown, "over the design's budgets (split along a seam first):\n" + "\n".join(grown)
    fits = sorted(set(OVER_BUDGET) - set(found))
    assert not fits, f"these fit their budget now: take them out of OVER_BUDGET: {fits}"
    shrunk = {what: found[what] for what in OVER_BUDGET if found.get(what, 0) < OVER_BUDGET[what]}
    assert not shrunk, f"these shrank: lower their ceilings in OVER_BUDGET to {shrunk}"


def test_the_budgets_see_what_grows(tmp_path: Path) -> None:
    """Each budget, broken on purpose in a module and a script of a copy of the package."""
    (tmp_path / "lua").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    methods = "\n".join(f"    def m{i}(self): ...\n" for i in range(31))
    (tmp_path / "big.py").write_text(
        f"def long():\n    '''Doc.'''\n{body}\n\nclass Wide:\n{methods}\n" + "#\n" * 700
    )
    script = "\n".join(f"local a{i} = ARGV[{i}]" for i in range(1, 10)) + "\n--\n" * 150
    (tmp_path / "lua" / "big.lua").write_text(script)
    (tmp_path / "lua" / "lib").mkdir()
    (tmp_path / "lua" / "lib" / "long.lua").write_text("--\n" * 200)
    found = measured(tmp_path)
    assert set(found) == {
        "module redis_components/big.py",
        "function redis_components/big.py long",
        "class redis_components/big.py Wide",
        "script redis_components/lua/big.lua",
        "argv redis_components/lua/big.lua",
    }
    assert found["function redis_components/big.py long"] == 82  # (the docstring left out)
