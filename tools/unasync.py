"""Generate the synchronous facade's mirrored methods from the asyncio clients' source.

The synchronous :class:`~ampsclient.sync.Client` and :class:`~ampsclient.sync.HAClient` are
the asyncio ones with their ``await`` taken out, in httpcore's way (``scripts/unasync.py``: the
``_sync`` package is generated from ``_async`` and ``scripts/check`` fails when it is stale).
Run::

    python tools/unasync.py            # write the files
    python tools/unasync.py --check    # exit 1 when a file is not what this generates

Two files are generated (:data:`GENERATED`), each formatted by ruff as the rest of the package;
``tests/test_unasync.py`` regenerates them in memory and compares.

``ampsclient/sync_convenience.py`` from ``ampsclient/convenience.py``, line by line: every
public command of ``AsyncCommands`` (from its ``subscribe`` section to the end of the class),
signatures, overloads and docstrings as written there, with

* ``async def`` -> ``def``;
* ``return await self.run_<x>(...)`` -> ``return self._run(self._async.run_<x>(...))``: the
  facade runs the asyncio client's coroutine on its loop thread and blocks until it is done.

Not generated there: the module docstring, the imports and the head of ``SyncCommands``
(below, :data:`HEAD`), and the asyncio side's own machinery (``build_command``,
``run_subscription``, ``run_sow_delete``, which the facade calls on the asyncio client).

``ampsclient/sync_face.py`` from the classes, read with :mod:`ast` (nothing is imported):
``SyncClientFace`` holds a twin of each public name of ``AsyncClient`` (through its bases,
as its MRO finds them) and ``SyncHAClientFace`` one of each name ``AsyncHAClient`` adds or
changes, less the names ``sync.py``'s hand-written classes define (the sync-only parts: the
loop thread, the publish lanes, ``connect`` after ``close``, ``close``, the context managers,
handler threads, the official client's argument names) and :data:`ASYNC_ONLY`. A twin keeps
the asyncio signature (keyword-only options, defaults, return type) and docstring; its body
is ``self._run(self._async.<name>(...))`` for a coroutine, ``self._async.<name>(...)`` for a
method, a forwarding property (and setter) for a property. Any other kind of member (a lane
method, a class attribute, a decorated method) must be written by hand or listed in
:data:`ASYNC_ONLY`: the generator refuses it by name. The annotations' imports are taken from
the asyncio modules' own imports (under ``TYPE_CHECKING``), the defaults' at run time.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "ampsclient" / "convenience.py"
TARGET = ROOT / "ampsclient" / "sync_convenience.py"

START = "    # ------------------------------------------------------------------------ subscribe\n"
"""Where the public commands of ``AsyncCommands`` begin (they run to the end of the file)."""

HEAD = '''\
# Generated from ampsclient/convenience.py by tools/unasync.py: do not edit by hand.
"""The official convenience commands of the synchronous :class:`~ampsclient.sync.Client`.

Generated from :class:`~ampsclient.convenience.AsyncCommands` by ``tools/unasync.py`` (the
same methods, arguments, overloads and docstrings; ``tests/test_unasync.py`` checks the file
is current), blocking until the command is placed: ``subscribe(on_message, topic, ...)``
returns the command id, ``subscribe(topic, ...)`` a :class:`~ampsclient.stream.MessageStream`
to iterate on.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import calls
from .calls import UNSET, Handler, OptionsArg
from .protocol.message import Message
from .stream import MessageStream

if TYPE_CHECKING:
    from .convenience import AsyncCommands

__all__ = ["SyncCommands"]

T = TypeVar("T")


class SyncCommands:
    """The convenience commands, for a class with ``_async`` (the asyncio client it drives)
    and ``_run(coroutine)`` (:class:`~ampsclient.sync.Client`).

    (1) As in :class:`~ampsclient.convenience.AsyncCommands`: the overloads are what callers
    are checked against; the implementation takes the handler form's parameters.
    """

    if TYPE_CHECKING:
        _async: AsyncCommands

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

'''

SUBS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(\s*)async def "), r"\1def "),
    (
        re.compile(r"^(\s*)return await self\.(run_\w+)\((.*)\)$"),
        r"\1return self._run(self._async.\2(\3))",
    ),
]
"""Token replacements, line by line (httpcore's ``SUBS``)."""


def unasync_lines(source: str) -> str:
    """The public commands of ``source`` (``convenience.py``'s text), made synchronous."""
    start = source.index(START)
    out = []
    for line in source[start:].splitlines(keepends=True):
        text, newline = line.rstrip("\n"), line[len(line.rstrip("\n")) :]
        for pattern, repl in SUBS:
            text = pattern.sub(repl, text)
        if "await " in text or "async " in text:
            raise ValueError(f"tools/unasync.py cannot translate: {text.strip()!r}")
        out.append(text + newline)
    return "".join(out)


def ruff_format(text: str, target: pathlib.Path = TARGET) -> str:
    """``text`` as ``ruff format`` writes it (the project's configuration), its imports
    sorted as ``ruff check`` wants them."""
    ruff = pathlib.Path(sys.executable).parent / "ruff"
    for command in (["check", "--fix", "--select", "I", "--quiet"], ["format"]):
        result = subprocess.run(
            [str(ruff), *command, "--stdin-filename", str(target), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        text = result.stdout
    return text


def generate() -> str:
    """The text ``sync_convenience.py`` must have."""
    return ruff_format(HEAD + unasync_lines(SOURCE.read_text()))


# ------------------------------------------------------------------------ the sync face

FACE_TARGET = ROOT / "ampsclient" / "sync_face.py"
PACKAGE = ROOT / "ampsclient"

ASYNC_ONLY: dict[str, str] = {
    "core": "the asyncio client's sans-I/O core: driven on the loop thread only (reach it "
    "through ``async_client.core``)",
    "publish_path": "the publish callable the facade holds as its own publish lane",
    "run_subscription": "the step under the convenience commands: the facade's (generated) "
    "commands call it on the asyncio client",
    "run_sow_delete": "likewise, under ``sow_delete*``",
    "client": "the AsyncClient an AsyncHAClient holds: the facade's ``async_client`` is the "
    "AsyncHAClient itself",
}
"""Public names of the asyncio clients that the synchronous facade does not mirror, and why
(``tests/test_unasync.py`` checks every other public name has its sync twin)."""

FACES: tuple[tuple[str, str, str, str, str], ...] = (
    # (generated class, async module, async class, attribute driven, hand-written sync class)
    ("SyncClientFace", "client.py", "AsyncClient", "_async", "Client"),
    ("SyncHAClientFace", "ha/client.py", "AsyncHAClient", "_ha", "HAClient"),
)
"""The generated classes: each mirrors the public face of an asyncio class, less the names the
hand-written class of ``sync.py`` (or its hand-written bases) defines."""

FACE_HEAD = '''\
# Generated from ampsclient/client.py and ampsclient/ha/client.py by tools/unasync.py: do not
# edit by hand.
"""The synchronous twins of the asyncio clients' public methods.

:class:`SyncClientFace` mirrors :class:`~ampsclient.client.AsyncClient`'s public face and
:class:`SyncHAClientFace` what :class:`~ampsclient.ha.client.AsyncHAClient` adds or changes:
the same names, arguments, return types and docstrings, generated from the asyncio classes'
source by ``tools/unasync.py`` (``tests/test_unasync.py`` checks this file is current and
that every public asyncio name has its sync twin). A coroutine's twin runs it on the
client's loop thread and blocks until it is done (``self._run``); a plain method's or a
property's forwards in the caller's thread, as the asyncio client allows.

What is not here is written by hand in :mod:`ampsclient.sync`: the loop thread, the publish
lanes, connecting again after ``close``, closing, the context managers, handlers that run on
threads of their own, and the official client's argument names where they differ.
"""
'''


@dataclass
class Member:
    """One class-level name of a class, as written in its module."""

    name: str
    kind: str  # "async", "def", "property", "other"
    node: ast.AST
    module: pathlib.Path
    setter: ast.FunctionDef | None = None


@dataclass
class Module:
    path: pathlib.Path
    source: str
    tree: ast.Module
    imports: dict[str, str]  # name -> import statement (relative to the ampsclient package)
    classes: dict[str, ast.ClassDef]
    top: set[str]  # names defined at top level


_MODULES: dict[pathlib.Path, Module] = {}


def _relative(path: pathlib.Path, level: int, module: str | None) -> str:
    """``from <level dots><module>`` of ``path``, as seen from the ``ampsclient`` package."""
    base = path.parent
    for _ in range(level - 1):
        base = base.parent
    target = base.relative_to(PACKAGE).parts + tuple((module or "").split(".") if module else ())
    return "." + ".".join(target)


def load(path: pathlib.Path) -> Module:
    if path in _MODULES:
        return _MODULES[path]
    source = path.read_text()
    tree = ast.parse(source, str(path))
    imports: dict[str, str] = {}
    classes: dict[str, ast.ClassDef] = {}
    top: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            where = _relative(path, node.level, node.module) if node.level else node.module
            for alias in node.names:
                name = alias.asname or alias.name
                imports.setdefault(
                    name,
                    f"from {where} import {alias.name}"
                    + (f" as {alias.asname}" if alias.asname else ""),
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports.setdefault(alias.asname or alias.name, f"import {alias.name}")
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = node
            top.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top.add(node.name)
        elif isinstance(node, ast.Assign):
            top.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
    module = Module(path, source, tree, imports, classes, top)
    _MODULES[path] = module
    return module


def _module_of(module: Module, name: str) -> pathlib.Path:
    """The file that defines class ``name`` as ``module`` imports it."""
    if name in module.classes:
        return module.path
    statement = module.imports[name]
    where = statement.split()[1]
    if not where.startswith("."):
        raise ValueError(f"{name} is not a class of the package")
    parts = where[1:].split(".")
    path = PACKAGE.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def mro(path: pathlib.Path, class_name: str) -> list[tuple[Module, ast.ClassDef]]:
    """The class and its package bases, depth first, left to right (C3 for these trees)."""
    module = load(path)
    cls = module.classes[class_name]
    out = [(module, cls)]
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in ("object", "Generic", "Protocol"):
            where = _module_of(module, base.id)
            if where == FACE_TARGET:
                continue  # the generated faces: not hand-written, maybe not written yet
            for item in mro(where, base.id):
                if all(item[1] is not seen for _, seen in out):
                    out.append(item)
    return out


def own_members(module: Module, cls: ast.ClassDef) -> dict[str, Member]:
    """The names ``cls``'s body defines (not those under ``if TYPE_CHECKING:``)."""
    members: dict[str, Member] = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if decorators == [f"{node.name}.setter"] and node.name in members:
                members[node.name].setter = node  # type: ignore[assignment]
                continue
            if isinstance(node, ast.AsyncFunctionDef):
                kind = "async" if not decorators else "other"
            elif decorators == ["property"]:
                kind = "property"
            else:
                kind = "def" if not decorators else "other"
            members[node.name] = Member(node.name, kind, node, module.path)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    members[target.id] = Member(target.id, "other", node, module.path)
    return members


def face(path: pathlib.Path, class_name: str) -> dict[str, Member]:
    """The public class-level names of a class, each where the MRO finds it first."""
    found: dict[str, Member] = {}
    for module, cls in mro(path, class_name):
        for name, member in own_members(module, cls).items():
            if not name.startswith("_"):
                found.setdefault(name, member)
    return found


def hand_written(class_name: str, *, with_bases: bool) -> set[str]:
    """The names ``sync.py``'s ``class_name`` defines by hand (with its bases: all of them
    but the generated faces)."""
    sync = PACKAGE / "sync.py"
    if not with_bases:
        return set(own_members(load(sync), load(sync).classes[class_name]))
    names: set[str] = set()
    for module, cls in mro(sync, class_name):
        if module.path != FACE_TARGET:
            names.update(own_members(module, cls))
    return names


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``(self, ...) -> R`` as written (annotations quoted by ``from __future__`` stay bare)."""
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"({ast.unparse(node.args)}){returns}"


def _call_arguments(args: ast.arguments) -> str:
    out = [a.arg for a in (*args.posonlyargs, *args.args)][1:]  # without self
    if args.vararg is not None:
        out.append(f"*{args.vararg.arg}")
    out.extend(f"{a.arg}={a.arg}" for a in args.kwonlyargs)
    if args.kwarg is not None:
        out.append(f"**{args.kwarg.arg}")
    return ", ".join(out)


def _docstring(module: Module, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    first = node.body[0] if node.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        raise ValueError(f"{node.name} has no docstring to mirror")
    segment = ast.get_source_segment(module.source, first)
    assert segment is not None
    return f"        {segment}\n"


def _names(node: ast.AST | None) -> set[str]:
    """The top names an annotation or a default reads (a string annotation parsed)."""
    if node is None:
        return set()
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                found |= _names(ast.parse(sub.value, mode="eval"))
            except SyntaxError:
                pass
    return found


def _canonical(statement: str) -> str:
    """``from .a import N`` where ``.a`` imports ``N`` from ``.b``: ``from .b import N``."""
    parts = statement.split()
    if parts[0] != "from" or not parts[1].startswith(".") or len(parts) != 4:
        return statement
    name = parts[3]
    where = PACKAGE.joinpath(*parts[1][1:].split(".")) if parts[1] != "." else PACKAGE
    path = where / "__init__.py" if where.is_dir() else where.with_suffix(".py")
    if not path.exists():
        return statement
    module = load(path)
    if name in module.imports and name not in module.top:
        return _canonical(module.imports[name])
    return statement


class Imports:
    """The imports the twins' annotations (``TYPE_CHECKING`` only) and defaults need."""

    def __init__(self) -> None:
        self.runtime: dict[str, str] = {
            "Coroutine": "from collections.abc import Coroutine",
            "TYPE_CHECKING": "from typing import TYPE_CHECKING",
            "Any": "from typing import Any",
            "TypeVar": "from typing import TypeVar",
        }
        self.typing: dict[str, str] = {
            "AsyncClient": "from .client import AsyncClient",
            "AsyncHAClient": "from .ha.client import AsyncHAClient",
        }

    def need(self, module: Module, names: set[str], *, runtime: bool) -> None:
        for name in sorted(names):
            if name in dir(builtins) or name == "self":
                continue
            if name in module.imports:
                statement = _canonical(module.imports[name])
            elif name in module.top:
                where = "." + ".".join(module.path.relative_to(PACKAGE).with_suffix("").parts)
                statement = f"from {where} import {name}"
            else:
                raise ValueError(f"cannot find where {name} comes from in {module.path.name}")
            table = self.runtime if runtime else self.typing
            if table.setdefault(name, statement) != statement:
                raise ValueError(f"{name}: {table[name]!r} or {statement!r}?")

    def text(self) -> str:
        """The import statements (ruff sorts and merges them)."""
        runtime = sorted(set(self.runtime.values()))
        typing = sorted({s for n, s in self.typing.items() if n not in self.runtime})
        out = "\n".join(runtime) + "\n"
        if typing:
            out += "\nif TYPE_CHECKING:\n" + "".join(f"    {s}\n" for s in typing)
        return out


def twin(member: Member, target: str, imports: Imports) -> str:
    """The synchronous twin of ``member``, driving ``self.<target>``."""
    module = load(member.module)
    node = member.node
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    doc = _docstring(module, node)
    annotations = (
        {node.returns}
        | {a.annotation for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        | {a.annotation for a in (node.args.vararg, node.args.kwarg) if a is not None}
    )
    for annotation in annotations:
        imports.need(module, _names(annotation), runtime=False)
    for default in (*node.args.defaults, *node.args.kw_defaults):
        imports.need(module, _names(default), runtime=True)
    name = member.name
    if member.kind == "property":
        text = f"    @property\n    def {name}{_signature(node)}:\n{doc}"
        text += f"        return self.{target}.{name}\n"
        setter = member.setter
        if setter is not None:
            value = setter.args.args[1].arg
            text += f"\n    @{name}.setter\n    def {name}{_signature(setter)}:\n"
            text += _docstring(module, setter) if _has_doc(setter) else ""
            text += f"        self.{target}.{name} = {value}\n"
            for a in setter.args.args[1:]:
                imports.need(module, _names(a.annotation), runtime=False)
        return text
    call = f"self.{target}.{name}({_call_arguments(node.args)})"
    if member.kind == "async":
        call = f"self._run({call})"
    returns_none = node.returns is None or ast.unparse(node.returns) in ("None", "'None'")
    body = f"        {call}\n" if returns_none else f"        return {call}\n"
    return f"    def {name}{_signature(node)}:\n{doc}{body}"


def _has_doc(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = node.body[0] if node.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)


def face_members() -> dict[str, dict[str, Member]]:
    """Generated class -> the asyncio members it mirrors (in the asyncio source's order)."""
    client_face = face(PACKAGE / "client.py", "AsyncClient")
    ha_path = PACKAGE / "ha" / "client.py"
    ha_face = face(ha_path, "AsyncHAClient")
    ha_own = own_members(load(ha_path), load(ha_path).classes["AsyncHAClient"])
    client_hand = hand_written("Client", with_bases=True)
    client_own = hand_written("Client", with_bases=False)
    ha_hand = hand_written("HAClient", with_bases=False)
    out: dict[str, dict[str, Member]] = {"SyncClientFace": {}, "SyncHAClientFace": {}}
    for name, member in client_face.items():
        if name not in client_hand and name not in ASYNC_ONLY:
            out["SyncClientFace"][name] = member
    for name, member in ha_face.items():
        if name in ha_hand or name in client_own or name in ASYNC_ONLY:
            continue  # written by hand for both clients, or not mirrored
        if name in client_face:
            if name not in ha_own or name in client_hand:
                continue  # the plain face's twin (or its hand-written one) drives it too
            mine, theirs = member.node, client_face[name].node
            if (
                isinstance(mine, (ast.FunctionDef, ast.AsyncFunctionDef))
                and isinstance(theirs, (ast.FunctionDef, ast.AsyncFunctionDef))
                and _signature(mine) == _signature(theirs)
                and member.kind == client_face[name].kind
            ):
                continue  # the same signature: the plain twin serves
        out["SyncHAClientFace"][name] = member
    for members in out.values():
        for name, member in members.items():
            if member.kind not in ("async", "def", "property"):
                raise ValueError(
                    f"tools/unasync.py cannot translate {name} ({member.kind}): write its "
                    "twin by hand in ampsclient/sync.py or list it in ASYNC_ONLY"
                )
    return out


def _key(member: Member) -> tuple[str, int]:
    return (str(member.module), getattr(member.node, "lineno", 0))


def unasync_face() -> str:
    """``sync_face.py``'s text before formatting."""
    imports = Imports()
    classes = []
    members = face_members()
    for class_name, _module, async_class, target, sync_class in FACES:
        body = []
        for member in sorted(members[class_name].values(), key=_key):
            body.append(twin(member, target, imports))
        driven = "AsyncClient | AsyncHAClient" if target == "_async" else "AsyncHAClient"
        head = (
            f"class {class_name}:\n"
            f'    """The generated twins of :class:`{async_class}`\'s public methods, for\n'
            f"    :class:`~ampsclient.sync.{sync_class}` (which drives ``self.{target}`` and "
            f'runs\n    coroutines with ``self._run``)."""\n\n'
            f"    if TYPE_CHECKING:\n        {target}: {driven}\n\n"
            "        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...\n\n"
        )
        classes.append(head + "\n".join(body))
    return (
        FACE_HEAD
        + "\nfrom __future__ import annotations\n\n"
        + imports.text()
        + '\n__all__ = ["SyncClientFace", "SyncHAClientFace"]\n\nT = TypeVar("T")\n\n\n'
        + "\n\n".join(classes)
    )


def generate_face() -> str:
    """The text ``sync_face.py`` must have."""
    _MODULES.clear()
    return ruff_format(unasync_face(), FACE_TARGET)


GENERATED = {TARGET: generate, FACE_TARGET: generate_face}
"""Each generated file and its generator."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = parser.parse_args(argv)
    stale = 0
    for target, make in GENERATED.items():
        text = make()
        if not args.check:
            target.write_text(text)
        elif not target.exists() or target.read_text() != text:
            print(f"{target.relative_to(ROOT)} is stale: run python tools/unasync.py")
            stale = 1
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
