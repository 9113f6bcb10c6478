"""The exit statuses of the ``ampsclient`` command, one per kind of outcome.

Scripts can test them (``ampsclient ping || alert``); they are listed in ``docs/cli.md``.
"""

from __future__ import annotations

import enum

from ..exceptions import AMPSConnectionError, TimeoutError, UsageError

__all__ = ["ExitCode", "exit_code_for"]


class ExitCode(enum.IntEnum):
    """What ``ampsclient`` returns to the shell."""

    OK = 0
    """Done (for ``subscribe``, ``sow_and_subscribe`` and ``replay --follow``, also a Ctrl-C)."""
    COMMAND_FAILED = 1
    """The server refused a command (bad filter, invalid topic, not entitled...)."""
    USAGE = 2
    """The command line is wrong (unknown option, bad bookmark, bad URI)."""
    CONNECTION = 3
    """No server could be reached or logged on to (every ``--server`` was tried)."""
    TIMEOUT = 4
    """An ack did not come within ``--timeout`` (a logon that times out is retried)."""
    UNPERSISTED = 5
    """``publish`` ended with messages the server had not acknowledged as persisted within
    ``--timeout`` (the summary line says how many)."""
    BAD_INPUT = 6
    """The input (stdin or ``--file``) is not in the ``--format`` given."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT) stopped a command that has an end (``publish``, ``sow``, ...)."""


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit status for an error that ended a command (any other error: 1)."""
    if isinstance(exc, UsageError):
        return ExitCode.USAGE
    if isinstance(exc, TimeoutError):
        return ExitCode.TIMEOUT
    if isinstance(exc, AMPSConnectionError):
        return ExitCode.CONNECTION
    return ExitCode.COMMAND_FAILED
