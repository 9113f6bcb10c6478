"""Inspect a FilePublishStore directory: ``python -m ampsclient.stores.publish <dir>``.

Read-only: it never truncates a torn tail or deletes a segment, and may run while a store
has the directory open. Exit status: 0 on success, 1 if the store is corrupt, 2 on a usage
error or a missing directory.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from typing import Any

from ...exceptions import CorruptStoreError
from .file import StoreInspection, inspect_store

__all__ = ["main"]


def _as_json(info: StoreInspection, dump: bool) -> dict[str, Any]:
    messages = info.messages
    result: dict[str, Any] = {
        "directory": str(info.directory),
        "count": len(messages),
        "first_sequence": messages[0].sequence if messages else None,
        "last_sequence": messages[-1].sequence if messages else None,
        "last_persisted": info.last_persisted,
        "next_sequence": info.next_sequence,
        "holes": info.holes,
        "state": (
            None
            if info.state is None
            else {"last_persisted": info.state[0], "last_sequence": info.state[1]}
        ),
        "segments": [
            {
                "file": s.path.name,
                "first_sequence": s.first_sequence,
                "bytes": s.size,
                "records": s.records,
            }
            for s in info.segments
        ],
        "torn_tail": (
            None
            if info.torn_tail is None
            else {
                "file": info.torn_tail.path.name,
                "offset": info.torn_tail.offset,
                "bytes": info.torn_tail.length,
            }
        ),
        "unknown_files": info.unknown_files,
    }
    if dump:
        result["messages"] = [
            {
                "sequence": m.sequence,
                "size": len(m.payload),
                "payload_base64": base64.b64encode(m.payload).decode("ascii"),
            }
            for m in messages
        ]
    return result


def _print_text(info: StoreInspection, dump: bool) -> None:
    messages = info.messages
    print(f"directory:       {info.directory}")
    print(f"unpersisted:     {len(messages)}")
    if messages:
        print(f"sequence range:  {messages[0].sequence} .. {messages[-1].sequence}")
    else:
        print("sequence range:  (empty)")
    if info.holes:
        print(f"holes:           {len(info.holes)} single discard(s) inside the range")
    print(f"last persisted:  {info.last_persisted}")
    nxt = "(new store: seeded from the clock)" if info.next_sequence is None else info.next_sequence
    print(f"next sequence:   {nxt}")
    if info.state is None:
        print("state file:      (none)")
    else:
        print(f"state file:      last persisted {info.state[0]}, last sequence {info.state[1]}")
    print(f"segments:        {len(info.segments)}")
    for s in info.segments:
        print(f"  {s.path.name}  {s.size} bytes  {s.records} records")
    if info.torn_tail is not None:
        t = info.torn_tail
        print(
            f"torn tail:       {t.path.name} at offset {t.offset} ({t.length} bytes); "
            "dropped when the store is next opened"
        )
    if info.unknown_files:
        print(f"unknown files:   {', '.join(info.unknown_files)}")
    if dump:
        for m in messages:
            print(f"{m.sequence} {m.payload!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the inspector; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m ampsclient.stores.publish",
        description="Inspect a FilePublishStore directory (read-only).",
    )
    parser.add_argument("directory", help="the store directory")
    parser.add_argument("--dump", action="store_true", help="also list every pending message")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        info = inspect_store(args.directory)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CorruptStoreError as exc:
        if args.json:
            print(json.dumps({"directory": args.directory, "error": str(exc)}))
        print(f"error: corrupt store: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(_as_json(info, args.dump), indent=2))
    else:
        _print_text(info, args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
