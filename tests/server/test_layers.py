"""The reference server's layering, checked on its source (as tests/protocol/test_sans_io.py does
for the client's protocol package). Unit test: it parses files with ``ast``, imports nothing.

What is checked:

* **Layers.** ``engine/`` never imports ``net/``, ``security/``, ``replication/`` or
  ``queues/`` (the queue engine is built by the broker's builder and passed in,
  ``engine/queue_site.py``);
  ``security/`` never imports ``net/``; ``errors.py`` imports nothing of the server.
* **No import cycles** among the modules of ``ampsclient_server_stub``. Every import statement
  counts wherever it stands: at the top, inside a function (a lazy import) or under
  ``if TYPE_CHECKING:``. ``from package import name`` is an edge to ``package.name`` when that
  is a module, else to the package (whose ``__init__`` is a module like any other).
* **No module uses another module's private names**, found two ways:

  - ``from x import _name`` (``x`` in ``ampsclient`` or ``ampsclient_server_stub``; dunders
    are allowed);
  - an attribute access ``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is
    not defined anywhere in the same module (as a function, class, ``self._name`` assignment,
    class attribute, ``__slots__`` entry or module-level name). The namedtuple and enum API
    (``_replace``, ``_asdict``, ``_value_``...) is allowed.

  The attribute check cannot know types: ``other._x`` between two objects of a class of the
  same module counts as the module's own business (it is), and a private name that happens to
  be spelled like one of the module's own is not seen. ``getattr(obj, "_x")`` is not seen.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import sys
from collections.abc import Iterable

import ampsclient_server_stub

PACKAGE = "ampsclient_server_stub"
ROOT = pathlib.Path(ampsclient_server_stub.__file__).parent

ALLOWED_PRIVATE = frozenset(
    {
        "_replace",
        "_asdict",
        "_fields",
        "_make",
        "_field_defaults",
        "_value_",
        "_name_",
        "_missing_",
        "_generate_next_value_",
        "_ignore_",
    }
)

THIRD_PARTY_PRIVATE = {
    # google-re2's raw binding: its public wrapper costs 6.6 us a search against 1.1 us here,
    # on every LIKE evaluation (docs/benchmarks.md, issue 31). Pinned in pyproject.toml; the
    # engine's tests (tests/server/test_regexes.py) fail if the binding changes.
    "ampsclient_server_stub.regexes": frozenset({"re2._re2"}),
}
"""Third-party private names a module may use, each with its reason."""


# --------------------------------------------------------------------------- the scan


def module_files(root: pathlib.Path = ROOT, package: str = PACKAGE) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    found: dict[str, pathlib.Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported_modules(
    module: str, tree: ast.AST, modules: Iterable[str], *, is_package: bool
) -> set[str]:
    """The package's modules that ``tree`` imports anywhere (lazy and TYPE_CHECKING too)."""
    known = set(modules)
    base = module.split(".") if is_package else module.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:  # import a.b.c imports a.b.c's packages too
                    name = name.rpartition(".")[0]
                if name:
                    out.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif target in known:
                    out.add(target)
    out.discard(module)
    return out


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the package's modules it imports."""
    files = module_files()
    graph: dict[str, frozenset[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = frozenset(
            imported_modules(module, tree, files, is_package=path.name == "__init__.py")
        )
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def _own_names(tree: ast.AST) -> set[str]:
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            own.add(node.attr)
        elif isinstance(node, ast.alias):
            own.add(node.asname or node.name)
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else []
                if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets):
                    assert isinstance(stmt, ast.Assign)
                    for item in ast.walk(stmt.value):
                        if isinstance(item, ast.Constant) and isinstance(item.value, str):
                            own.add(item.value)
    return own


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_uses(tree: ast.AST) -> list[str]:
    """Uses of other modules' private names in ``tree`` (see the module docstring)."""
    own = _own_names(tree)
    uses: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level or source.startswith(("ampsclient", PACKAGE)):
                uses += [
                    f"line {node.lineno}: from {'.' * node.level}{source} import {a.name}"
                    for a in node.names
                    if _is_private(a.name)
                ]
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own or node.attr in ALLOWED_PRIVATE:
                continue
            uses.append(f"line {node.lineno}: {ast.unparse(node)}")
    return uses


@functools.cache
def private_uses() -> dict[str, tuple[str, ...]]:
    """Module -> its uses of other modules' private names (only modules that have some)."""
    found: dict[str, tuple[str, ...]] = {}
    for module, path in module_files().items():
        uses = foreign_private_uses(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        allowed = THIRD_PARTY_PRIVATE.get(module, frozenset())
        uses = [use for use in uses if use.split(": ", 1)[1] not in allowed]
        if uses:
            found[module] = tuple(uses)
    return found


def _in(module: str, *packages: str) -> bool:
    return any(module == f"{PACKAGE}.{p}" or module.startswith(f"{PACKAGE}.{p}.") for p in packages)


# --------------------------------------------------------------------------- the scan works


def test_the_import_scan_counts_lazy_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "if TYPE_CHECKING:\n"
        "    from ..other.mod import Thing\n"
        "def f():\n"
        "    from .lazy import g\n"
        "    import pkg.deep.mod\n"
    )
    modules = {"pkg", "pkg.a", "pkg.a.me", "pkg.a.sibling", "pkg.a.lazy", "pkg.other.mod"}
    modules |= {"pkg.other", "pkg.deep"}
    got = imported_modules("pkg.a.me", ast.parse(source), modules, is_package=False)
    assert got == {"pkg.a.sibling", "pkg.other.mod", "pkg.a.lazy", "pkg.deep"}


def test_the_cycle_finder_finds_lazy_cycles_and_only_them() -> None:
    graph = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a"}),
        "d": frozenset({"a"}),
        "e": frozenset(),
    }
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({k: frozenset() for k in graph}) == []


def test_the_private_scan_sees_foreign_privates_only() -> None:
    source = (
        "from .broker import _ClientState, Broker\n"
        "class Mine:\n"
        "    __slots__ = ('_slot',)\n"
        "    def __init__(self, other):\n"
        "        self._own = 1\n"
        "        other._own = 2\n"
        "        other._slot = 3\n"
        "    def _helper(self): ...\n"
        "def use(broker, row):\n"
        "    broker._route(1)\n"
        "    row._replace(a=1)\n"
        "    Mine()._helper()\n"
        "    return broker.__class__\n"
    )
    uses = foreign_private_uses(ast.parse(source))
    assert uses == ["line 1: from .broker import _ClientState", "line 10: broker._route"]


def test_the_scan_sees_the_whole_package() -> None:
    graph = import_graph()
    assert f"{PACKAGE}.errors" in graph
    assert f"{PACKAGE}.net.flow" in graph
    assert f"{PACKAGE}.net.session" in graph
    assert any(_in(m, "engine") for m in graph)
    assert f"{PACKAGE}.engine.journal" in graph[f"{PACKAGE}.engine.txlog"]


# --------------------------------------------------------------------------- the rules


def _layer_violations(source_pkg: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module, imports in import_graph().items():
        if _in(module, source_pkg):
            bad = sorted(m for m in imports if _in(m, *forbidden))
            if bad:
                found[module] = bad
    return found


def test_engine_never_imports_net_security_or_replication() -> None:
    assert _layer_violations("engine", ("net", "security", "replication")) == {}


def test_engine_never_imports_queues() -> None:
    # the queues import the engine; the engine gets the queue engine as a hook
    # (Broker(..., queues=start_queues), engine/queue_site.py)
    assert _layer_violations("engine", ("queues",)) == {}


def test_security_never_imports_net() -> None:
    assert _layer_violations("security", ("net",)) == {}


def test_errors_is_the_bottom_layer() -> None:
    assert import_graph()[f"{PACKAGE}.errors"] == frozenset()


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    edges = [
        f"{m} -> {', '.join(sorted(graph[m] & set(component)))}"
        for component in found
        for m in component
    ]
    assert found == [], "import cycles (every edge inside them):\n" + "\n".join(edges)


def test_no_module_uses_another_modules_private_names() -> None:
    assert private_uses() == {}
