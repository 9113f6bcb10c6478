"""``main()``: parse the command line, run the sub-command, turn errors into one line."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import IO, TextIO

from ..exceptions import AMPSError
from .commands import COMMANDS, STREAMING
from .exit_codes import ExitCode, exit_code_for
from .formats import BadInputError
from .parser import build_parser
from .session import Session

__all__ = ["main"]

_NO_SUMMARY = frozenset({"ping", "sow_delete"})
"""Commands whose output is their summary."""


def _logging(verbosity: int, stderr: TextIO) -> None:
    logger = logging.getLogger("ampsclient")
    if verbosity <= 0:
        logger.addHandler(logging.NullHandler())  # errors are reported as one line instead
        logger.propagate = False
        return
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)


def _publish_outcome(session: Session, code: ExitCode) -> ExitCode:
    """``publish``'s summary facts and exit status: what the server refused (each reason once,
    exit 1), what was not persisted in time (exit 5), the rest persisted."""
    left = session.unpersisted
    refused = dict(session.refused)
    failed = sum(refused.values())
    session.extra = f"{session.progress.count - left - failed:,} persisted"
    if failed:
        session.extra += f", {failed:,} refused"
        for reason, count in refused.items():
            session.stderr.write(
                f"ampsclient publish: the server refused {count:,} message(s): {reason}\n"
            )
        session.stderr.flush()
        if code == ExitCode.OK:
            code = ExitCode.COMMAND_FAILED
    if left:
        session.extra += f", {left:,} NOT persisted"
        if code == ExitCode.OK:
            code = ExitCode.UNPERSISTED
    return code


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: IO[bytes] | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``ampsclient`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Ctrl-C (``KeyboardInterrupt``) ends the command cleanly: the output is finished, the
    client closed (``publish`` first flushes what it sent), and the summary written.
    """
    err = stderr if stderr is not None else sys.stderr
    out = stdout if stdout is not None else sys.stdout.buffer
    args = build_parser().parse_args(argv)
    _logging(args.verbose, err)
    if threading.current_thread() is threading.main_thread():
        # a shell starts background jobs with SIGINT ignored; the command wants it
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        session = Session(args, stdout=out, stderr=err)
    except AMPSError as exc:
        err.write(f"ampsclient {args.command}: {type(exc).__name__}: {exc}\n")
        return int(exit_code_for(exc))
    streaming = args.command in STREAMING or (args.command == "replay" and args.follow)
    code = ExitCode.OK
    interrupted = failed = False
    try:
        try:
            code = COMMANDS[args.command](session)
        except KeyboardInterrupt:
            interrupted = True
            code = ExitCode.OK if streaming else ExitCode.INTERRUPTED
        except BadInputError as exc:
            session.error(exc)
            code, failed = ExitCode.BAD_INPUT, True
        except AMPSError as exc:
            session.error(exc)
            code, failed = exit_code_for(exc), True
        except BrokenPipeError:  # the reader went away (``| head``): a normal end
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            code = ExitCode.OK
        finally:
            try:
                session.close()
            except AMPSError as exc:
                session.error(exc)
                code = code or exit_code_for(exc)
            except BrokenPipeError:
                pass
    except KeyboardInterrupt:  # a second Ctrl-C while closing
        interrupted = True
        code = ExitCode.INTERRUPTED
    if args.command == "publish" and session.connected:
        code = _publish_outcome(session, code)
    if (not failed and args.command not in _NO_SUMMARY) or (
        args.command == "publish" and session.connected
    ):
        session.progress.summary(session.extra, interrupted=interrupted)
    return int(code)
