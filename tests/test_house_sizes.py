"""The house's size ceilings, checked on the source: no library file over 1,500 lines and no
function over 150 lines, in both packages. Unit test: parses files with ``ast``, imports
nothing of the library.

Size is a smell, not a goal (style.md; issue #29 retired the 800/80 limits of issues #14 and
#15, which were being met by cutting modules and classes apart rather than by design). A module
holds one concept and a class stays in one file; these ceilings only catch a blob: websockets'
largest module, which reads well, is 1,254 lines.

A function's length counts from its ``def`` line (decorators excluded) to its last line,
docstring and nested functions included: a long function does not become short by defining
its body as an inner function.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("ampsclient", "ampsclient_server_stub")
MAX_FILE_LINES = 1_500
MAX_FUNCTION_LINES = 150


def library_files() -> list[pathlib.Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def file_lengths(files: list[pathlib.Path]) -> dict[str, int]:
    return {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in files
    }


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(qualified name, length) of every function of ``source`` longer than ``limit`` lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        found.append((name, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_scan_sees_both_packages() -> None:
    names = {str(p.relative_to(ROOT)) for p in library_files()}
    assert "ampsclient/__init__.py" in names
    assert "ampsclient_server_stub/engine/broker.py" in names
    assert len(names) > 100


def test_the_function_scan_measures_def_to_last_line() -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(80))  # def line + 80 = 81 lines
    source = "class K:\n    def m(self):\n" + body + "\ndef short():\n    return 1\n"
    assert long_functions(source, 80) == [("K.m", 81)]
    assert long_functions(source, 81) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_library_file_over_the_ceiling(package: str) -> None:
    files = [p for p in library_files() if p.relative_to(ROOT).parts[0] == package]
    over = {name: n for name, n in file_lengths(files).items() if n > MAX_FILE_LINES}
    assert over == {}, f"files over {MAX_FILE_LINES} lines: {over}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_the_ceiling(package: str) -> None:
    over: dict[str, int] = {}
    for path in library_files():
        if path.relative_to(ROOT).parts[0] != package:
            continue
        for name, length in long_functions(path.read_text(encoding="utf-8"), MAX_FUNCTION_LINES):
            over[f"{path.relative_to(ROOT)}:{name}"] = length
    assert over == {}, f"functions over {MAX_FUNCTION_LINES} lines: {over}"
