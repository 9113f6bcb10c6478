"""Inspect and manage a journal directory: ``info``, ``dump``, ``prune``, ``compress``,
``archive``.

Command line::

    python -m ampsclient_server_stub.journal_tool info DIR [--verify] [--json]
    python -m ampsclient_server_stub.journal_tool dump DIR [--from N] [--limit N] [--json]
    python -m ampsclient_server_stub.journal_tool prune DIR [--older-than 1d]
    python -m ampsclient_server_stub.journal_tool compress DIR [--older-than 1d]
    python -m ampsclient_server_stub.journal_tool archive DIR --archive-dir DIR2 [--older-than 1d]

Every command takes ``--name`` (the instance name, the journal files' prefix; default: the one
prefix the directory's files have) and ``--archive-dir`` (the ``<JournalArchiveDirectory>``:
archived files are part of the log).

``info`` and ``dump`` open the journal read-only (no lock, nothing repaired), so they also work
beside a running server. ``prune`` and ``compress`` take the directory lock: while a server has
the journal open they fail with exit status 1; use the server's admin, which calls
:func:`prune_journal` / :func:`compress_journal` on its open :class:`Journal`.

Exit status: 0 done, 1 journal error (damaged, in use, missing), 2 bad arguments.

The functions are importable: they take an open :class:`Journal` or a directory.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from ampsclient.protocol.bookmarks import format_timestamp

from .config import ConfigError, parse_duration
from .engine.journal import (
    CorruptJournalError,
    Journal,
    JournalError,
    JournalRecord,
)

__all__ = [
    "DEFAULT_OLDER_THAN",
    "archive_journal",
    "compress_journal",
    "dump_records",
    "format_info",
    "format_record",
    "journal_info",
    "main",
    "prune_journal",
    "record_to_json",
]

DEFAULT_OLDER_THAN = "1d"
"""Age threshold of ``prune`` and ``compress`` when ``--older-than`` is not given."""

JournalLike = Journal | str | os.PathLike[str]


@contextlib.contextmanager
def _opened(target: JournalLike, *, read_only: bool) -> Iterator[Journal]:
    if isinstance(target, Journal):
        yield target
        return
    journal = Journal(target, read_only=read_only)
    try:
        yield journal
    finally:
        journal.close()


def _when(micros: int) -> str:
    if micros <= 0:
        return "-"
    return format_timestamp(datetime.fromtimestamp(micros / 1_000_000, UTC))


def journal_info(target: JournalLike, *, verify: bool = False) -> dict[str, Any]:
    """Summary of a journal: totals, statistics and one entry per segment.

    Args:
        target: an open journal or a directory (opened read-only).
        verify: also read every record and sidecar, checking CRCs (raises on damage).

    Returns:
        A JSON-serialisable dict: ``directory``, ``first_index``, ``last_index``, ``records``,
        ``bytes``, ``publishers``, ``statistics``, ``segments`` (dicts), and ``verified``
        (record count) when ``verify`` is true.
    """
    with _opened(target, read_only=True) as journal:
        stats = journal.statistics()
        segments = [
            {
                "file": info.path.name,
                "state": info.state,
                "first_index": info.first_index,
                "last_index": info.last_index,
                "records": info.records,
                "data_bytes": info.data_bytes,
                "file_bytes": info.file_bytes,
                "first_time": _when(info.first_timestamp),
                "last_time": _when(info.last_timestamp),
                "archived": info.archived,
            }
            for info in journal.segments()
        ]
        result: dict[str, Any] = {
            "directory": str(journal.directory),
            "first_index": stats["first_index"],
            "last_index": stats["last_index"],
            "records": stats["records"],
            "bytes": stats["bytes"],
            "publishers": stats["publishers"],
            "statistics": stats,
            "segments": segments,
        }
        if verify:
            result["verified"] = journal.verify()
        return result


def format_info(info: dict[str, Any]) -> str:
    """Human-readable text for :func:`journal_info`'s result."""
    lines = [
        f"journal    {info['directory']}",
        f"records    {info['records']} (indexes {info['first_index']}..{info['last_index']})",
        f"bytes      {info['bytes']} on disk in {len(info['segments'])} segment(s)",
        f"publishers {info['publishers']}",
    ]
    if "verified" in info:
        lines.append(f"verified   {info['verified']} records, all CRCs good")
    lines.append("")
    lines.append(
        f"{'file':<42} {'state':<10} {'first':>10} {'last':>10} {'records':>9} "
        f"{'bytes':>11}  newest record"
    )
    for seg in info["segments"]:
        lines.append(
            f"{seg['file']:<42} {seg['state']:<10} {seg['first_index']:>10} "
            f"{seg['last_index']:>10} {seg['records']:>9} {seg['file_bytes']:>11}  "
            f"{seg['last_time']}"
        )
    return "\n".join(lines)


def record_to_json(record: JournalRecord) -> dict[str, Any]:
    """A JSON-serialisable dict of a record (payload as text when it is UTF-8, else base64)."""
    try:
        payload: str = record.payload.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        payload = base64.b64encode(record.payload).decode("ascii")
        encoding = "base64"
    return {
        "index": record.index,
        "bookmark": record.bookmark,
        "timestamp": _when(record.timestamp),
        "timestamp_us": record.timestamp,
        "command": record.command,
        "topic": record.topic,
        "fields": dict(record.fields),
        "payload": payload,
        "payload_encoding": encoding,
    }


def format_record(record: JournalRecord, *, width: int = 120) -> str:
    """One line of text for a record (the payload shortened to fit ``width`` roughly)."""
    fields = json.dumps(dict(record.fields), separators=(",", ":")) if record.fields else ""
    try:
        payload = record.payload.decode("utf-8")
    except UnicodeDecodeError:
        payload = repr(record.payload)
    head = (
        f"{record.index} {record.bookmark} {_when(record.timestamp)} {record.command} "
        f"{record.topic} {fields}".rstrip()
    )
    room = max(20, width - len(head) - 1)
    if len(payload) > room:
        payload = payload[: room - 3] + "..."
    return f"{head} {payload}"


def dump_records(
    target: JournalLike,
    out: TextIO,
    *,
    from_index: int = 1,
    limit: int | None = None,
    as_json: bool = False,
) -> int:
    """Write records from ``from_index`` to ``out``, one per line; return how many.

    Args:
        target: an open journal or a directory (opened read-only).
        out: where to write.
        from_index: first index (clamped to the oldest retained record).
        limit: at most this many records (all when ``None``).
        as_json: JSON lines (:func:`record_to_json`) instead of text (:func:`format_record`).
    """
    written = 0
    with _opened(target, read_only=True) as journal:
        index = from_index
        while limit is None or written < limit:
            want = 1000 if limit is None else min(1000, limit - written)
            batch = journal.read(index, max_records=want)
            if not batch:
                break
            for record in batch:
                if as_json:
                    out.write(json.dumps(record_to_json(record), separators=(",", ":")) + "\n")
                else:
                    out.write(format_record(record) + "\n")
            written += len(batch)
            index = batch[-1].index + 1
    return written


def prune_journal(target: JournalLike, older_than_seconds: float) -> list[Path]:
    """Remove sealed segments whose newest record is older than the threshold.

    See :meth:`Journal.prune`; a directory is opened read-write (and must not be in use).
    """
    with _opened(target, read_only=False) as journal:
        return journal.prune(older_than_seconds)


def compress_journal(target: JournalLike, older_than_seconds: float) -> list[Path]:
    """Compress sealed segments whose newest record is older than the threshold.

    See :meth:`Journal.compress`; a directory is opened read-write (and must not be in use).
    """
    with _opened(target, read_only=False) as journal:
        return journal.compress(older_than_seconds)


def archive_journal(target: JournalLike, older_than_seconds: float) -> list[Path]:
    """Move sealed segments whose newest record is older than the threshold to the archive
    directory the :class:`Journal` was opened with (see :meth:`Journal.archive`)."""
    with _opened(target, read_only=False) as journal:
        return journal.archive(older_than_seconds)


# --------------------------------------------------------------------------------------------
# command line


def _age(text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ampsclient_server_stub.journal_tool",
        description="Inspect and manage an ampsclient_server_stub journal directory.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="summary and segment list")
    info.add_argument("directory", type=Path)
    info.add_argument("--verify", action="store_true", help="read and check every record")
    info.add_argument("--json", action="store_true", help="print JSON")
    dump = sub.add_parser("dump", help="print records")
    dump.add_argument("directory", type=Path)
    dump.add_argument("--from", dest="from_index", type=int, default=1, metavar="INDEX")
    dump.add_argument("--limit", type=int, default=None, metavar="N")
    dump.add_argument("--json", action="store_true", help="JSON lines")
    for name, text in (
        ("prune", "remove old sealed segments"),
        ("compress", "gzip old sealed segments"),
        ("archive", "move old sealed segments to --archive-dir"),
    ):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("directory", type=Path)
        cmd.add_argument(
            "--older-than",
            type=_age,
            default=parse_duration(DEFAULT_OLDER_THAN),
            metavar="AGE",
            help=f"age of the newest record in a segment, e.g. 30m, 12h, 7d "
            f"(default {DEFAULT_OLDER_THAN})",
        )
    for cmd in sub.choices.values():
        cmd.add_argument("--name", default=None, help="the journal files' prefix (instance name)")
        cmd.add_argument(
            "--archive-dir", type=Path, default=None, help="the journal archive directory"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    directory: Path = args.directory
    if not directory.is_dir():
        print(f"error: no journal directory {directory}", file=sys.stderr)
        return 1
    read_only = args.command in ("info", "dump")
    try:
        with Journal(
            directory, read_only=read_only, name=args.name, archive_directory=args.archive_dir
        ) as journal:
            return _run(args, journal)
    except BrokenPipeError:  # pragma: no cover - e.g. `dump | head`
        return 0
    except (CorruptJournalError, JournalError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, journal: Journal) -> int:
    """Run one command on the opened journal."""
    if args.command == "info":
        info = journal_info(journal, verify=args.verify)
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            print(format_info(info))
    elif args.command == "dump":
        count = dump_records(
            journal,
            sys.stdout,
            from_index=args.from_index,
            limit=args.limit,
            as_json=args.json,
        )
        if not args.json:
            print(f"# {count} record(s)", file=sys.stderr)
    elif args.command == "prune":
        removed = prune_journal(journal, args.older_than)
        for path in removed:
            print(f"removed {path.name}")
        print(f"pruned {len(removed)} segment(s)")
    elif args.command == "archive":
        moved = archive_journal(journal, args.older_than)
        for path in moved:
            print(f"archived {path.name}")
        print(f"archived {len(moved)} segment(s)")
    else:
        made = compress_journal(journal, args.older_than)
        for path in made:
            print(f"compressed {path.name}")
        print(f"compressed {len(made)} segment(s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
