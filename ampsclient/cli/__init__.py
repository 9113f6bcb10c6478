"""The ``ampsclient`` command: publish, subscribe, query and replay from a shell.

``ampsclient publish|subscribe|sow|sow_and_subscribe|sow_delete|ping|replay [options]``, also
``python -m ampsclient``. Every command connects through the HA client, so several
``--server`` options fail over. ``ampsclient spark <command> -flag value ...`` (also the
``amps-spark`` command) takes AMPS' ``spark`` syntax (:mod:`.spark_syntax`). See
``docs/cli.md``; exit statuses are in :class:`ExitCode`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO, TextIO

from . import main as _main_module, spark_syntax
from .exit_codes import ExitCode

__all__ = ["ExitCode", "main"]


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: IO[bytes] | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``ampsclient`` (default argv: ``sys.argv[1:]``); ``spark ...`` takes spark's syntax."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["spark"]:
        return spark_syntax.main(args[1:], stdout=stdout, stderr=stderr)
    return _main_module.main(args, stdout=stdout, stderr=stderr)
