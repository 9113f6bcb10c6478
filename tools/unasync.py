"""Generate ``ampsclient/sync_convenience.py`` from ``ampsclient/convenience.py``.

The synchronous facade's convenience commands are the asyncio ones with their ``await``
taken out, in httpcore's way (``scripts/unasync.py``: the ``_sync`` package is generated
from ``_async`` by token replacements and ``scripts/check`` fails when it is stale). Run::

    python tools/unasync.py            # write the file
    python tools/unasync.py --check    # exit 1 when the file is not what this generates

What is generated: every public command of ``AsyncCommands`` (from its ``subscribe`` section
to the end of the class), signatures, overloads and docstrings as written there, with

* ``async def`` -> ``def``;
* ``return await self.run_<x>(...)`` -> ``return self._run(self._async.run_<x>(...))``: the
  facade runs the asyncio client's coroutine on its loop thread and blocks until it is done.

What is not: the module docstring, the imports and the head of ``SyncCommands`` (below,
:data:`HEAD`), and the asyncio side's own machinery (``build_command``,
``run_subscription``, ``run_sow_delete``, which the facade calls on the asyncio client rather
than copying). The result is formatted by ruff, as the rest of the package;
``tests/test_unasync.py`` regenerates it in memory and compares.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import subprocess
import sys

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


def ruff_format(text: str) -> str:
    """``text`` as ``ruff format`` writes it (the project's configuration)."""
    ruff = pathlib.Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return result.stdout


def generate() -> str:
    """The text ``sync_convenience.py`` must have."""
    return ruff_format(HEAD + unasync_lines(SOURCE.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python tools/unasync.py")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
