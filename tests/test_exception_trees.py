"""One exception tree per package, drawn completely in its errors module's docstring.

For ``ampsclient`` (``ampsclient/exceptions.py``) and ``ampsclient_server_stub``
(``ampsclient_server_stub/errors.py``): every module of the package is imported and every
exception class it defines is collected. Each must derive from the package's root and be drawn
in the docstring's tree, under the class it derives from; the drawing names no class that does
not exist, its ``(alias X)`` notes are true, and a builtin base a caller may catch
(``ValueError``, ``AssertionError``...) is written on the class's line.

The drawing's grammar: one class per line, ``├──``/``└──`` branches four columns per level;
the first word is the class's name (its Pythonic name, looked up in the errors module, else
the one class of that name in the package); a ``path/module.py`` on the line names the module
that defines (or exports) it, needed where two classes share a name.

Unit test: imports only; no sockets.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from types import ModuleType

import pytest

PACKAGES = {
    "ampsclient": ("ampsclient.exceptions", "AMPSError"),
    "ampsclient_server_stub": ("ampsclient_server_stub.errors", "ServerError"),
}

_LINE = re.compile(r"^(?P<lead>(?:│   |    )*)(?:├── |└── )?(?P<name>_?[A-Za-z]\w*)(?P<rest>.*)$")
_MODULE = re.compile(r"(?<![\w/.])((?:\w+/)*\w+\.py)\b")
_ALIAS = re.compile(r"alias (\w+)")


@dataclass(frozen=True)
class Drawn:
    name: str
    depth: int
    parent: str | None
    module: str | None
    rest: str


def defined_exceptions(package: str) -> dict[str, type[BaseException]]:
    """``module.qualname`` -> class, for every exception class the package's modules define."""
    root = importlib.import_module(package)
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{obj.__qualname__}"] = obj
    return found


def drawing(errors: ModuleType) -> list[Drawn]:
    """The tree in the docstring: the indented block after the first ``::``."""
    doc = errors.__doc__ or ""
    assert "::" in doc, f"{errors.__name__}'s docstring draws no tree"
    block = doc.split("::", 1)[1].strip("\n").split("\n\n", 1)[0]
    lines = [line[4:] for line in block.splitlines()]
    drawn: list[Drawn] = []
    stack: list[str] = []
    for line in lines:
        match = _LINE.match(line)
        assert match, f"cannot read the drawing's line {line!r}"
        depth = len(match["lead"]) // 4 + (1 if line[len(match["lead"]) :][:1] in "├└" else 0)
        del stack[depth:]
        assert len(stack) == depth, f"{line!r} is indented past its parent"
        module = _MODULE.search(match["rest"])
        drawn.append(
            Drawn(
                match["name"],
                depth,
                stack[-1] if stack else None,
                module[1] if module else None,
                match["rest"],
            )
        )
        stack.append(match["name"])
    return drawn


def resolve(
    package: str,
    errors: ModuleType,
    found: dict[str, type[BaseException]],
    item: Drawn,
) -> type[BaseException]:
    if item.module is not None:
        name = package + "." + item.module[: -len(".py")].replace("/", ".")
        module = importlib.import_module(name.removesuffix(".__init__"))
        cls = getattr(module, item.name, None)
        assert inspect.isclass(cls), f"{item.name}: not in {item.module}"
        return cls
    cls = getattr(errors, item.name, None)
    if inspect.isclass(cls):
        return cls
    hits = [c for c in found.values() if c.__name__ == item.name]
    assert len(hits) == 1, f"{item.name}: {len(hits)} classes of that name; name the module"
    return hits[0]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_exception_class_is_drawn_under_its_base(package: str) -> None:
    errors_name, root_name = PACKAGES[package]
    errors = importlib.import_module(errors_name)
    root = getattr(errors, root_name)
    found = defined_exceptions(package)
    assert len(found) > 20  # the scan sees the package

    outside = sorted(q for q, cls in found.items() if not issubclass(cls, root))
    assert outside == [], f"not under {root_name}: {outside}"

    drawn = drawing(errors)
    assert drawn[0].name == root_name and drawn[0].depth == 0
    classes: dict[str, type[BaseException]] = {}  # the last class drawn by each name
    seen: list[type[BaseException]] = []
    for item in drawn:
        cls = resolve(package, errors, found, item)
        if item.parent is None:
            assert cls is root
        else:
            parent = classes[item.parent]
            assert parent in cls.__bases__, (
                f"{item.name} is drawn under {item.parent}, derives from "
                f"{[b.__name__ for b in cls.__bases__]}"
            )
        for alias in _ALIAS.findall(item.rest):
            assert getattr(errors, alias) is cls, f"{item.name}: alias {alias} is another class"
        for base in cls.__bases__:
            if base.__module__ == "builtins" and base is not Exception:
                assert base.__name__ in item.name + item.rest, (
                    f"{item.name}'s line does not say it is also a {base.__name__}"
                )
        assert cls not in seen, f"{item.name} drawn twice"
        seen.append(cls)
        classes[item.name] = cls

    missing = sorted(q for q, cls in found.items() if cls not in seen)
    assert missing == [], f"defined but not drawn in {errors_name}'s docstring: {missing}"
