"""No import cycles in ``ampsclient/``, counting every import: module level, inside functions
(lazy) and under ``if TYPE_CHECKING:``.

A cycle hidden in a function or a TYPE_CHECKING block still couples the two modules (neither
can be understood, moved or typed alone), so the graph counts them all. An edge goes from a
module to each ``ampsclient`` module it names: ``from .x import y`` names ``x.y`` when that is
a module, else ``x``; a package stands for its ``__init__.py``. The implicit import of the
parent packages is not an edge (every submodule would otherwise form a cycle with a package
that re-exports it); ``tests/typing/test_package_face.py`` checks what the package face loads.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "ampsclient"


def _modules() -> dict[str, pathlib.Path]:
    found: dict[str, pathlib.Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    # C extensions (``_speedups``): leaves, by the names setup.py builds them under (the
    # client's is made of every .c of ``ampsclient/_speedups_src``)
    setup = ROOT / "setup.py"
    for name in re.findall(r'Extension\(\s*"([\w.]+)"', setup.read_text()):
        if name.split(".")[0] == PACKAGE:
            found[name] = ROOT / (name.replace(".", "/") + ".so")  # a leaf: not parsed
    return found


def _is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py"


def import_graph() -> dict[str, set[str]]:
    """module -> the ``ampsclient`` modules it imports anywhere in its source."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if _is_package(path) else name.rpartition(".")[0]
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else source)
            for target in targets:
                # ``import ampsclient.x.y`` names the deepest module that exists
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == PACKAGE:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _path_within(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete cycle through the component's first module, for the failure message."""
    members = set(component)
    start = component[0]
    trail = [start]
    seen = {start}
    while True:
        nxt = sorted(graph[trail[-1]] & members)
        back = [n for n in nxt if n == start]
        if back and len(trail) > 1:
            return [*trail, start]
        fresh = [n for n in nxt if n not in seen]
        if not fresh:
            return trail
        trail.append(fresh[0])
        seen.add(fresh[0])


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert len(graph) >= 40
    # edges of each kind are found: module level, lazy (in a function), TYPE_CHECKING
    assert "ampsclient.client" in graph["ampsclient.sync"]
    assert "ampsclient.protocol.framing" in graph["ampsclient.transport.tcp"]
    assert "ampsclient.transport.memory" in graph["ampsclient.transport.factory"]  # lazy
    assert "ampsclient.sync" in graph["ampsclient"]  # TYPE_CHECKING
    assert "ampsclient._speedups" in graph["ampsclient._accel"]  # the C extension, a leaf


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert _path_within(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert found == [], "import cycles:\n" + "\n".join(
        " -> ".join(_path_within(graph, c)) + f"   (component: {', '.join(c)})" for c in found
    )
