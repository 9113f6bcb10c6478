"""The hot path of a queue acknowledgement: plain acks of leased messages, a run at a time.

:meth:`.Queue.ack` hands a run of an acknowledgement's bookmarks to :func:`ack_run` (C when
built, :mod:`.speedups`); a bookmark that needs more (not in the queue, not leased, ``strict``
leasing and leased to another connection) ends the run and takes the general path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .states import GONE, LEASED

__all__ = ["ack_run", "split_bookmarks"]


def ack_run(
    messages: dict[str, Any],
    bookmarks: Sequence[str],
    pos: int,
    owner: object,
    strict: bool,
    removed: list[str],
) -> tuple[int, int]:
    """Plain acks of ``bookmarks[pos:]`` up to the first that needs the general path:
    ``(its position, leases ended)`` (``len(bookmarks)``: all done).

    A bookmark is done here when ``messages`` holds its message, in state ``LEASED`` with a
    ``lessee`` (with ``strict``: one whose ``owner`` is ``owner``): the lease ends (the
    bookmark leaves ``lessee.leased``), the message leaves the queue (``lessee`` and
    ``lease_deadline`` ``None``, state ``GONE``, out of ``messages``) and the bookmark is
    appended to ``removed``. The twin of the C ``ack_run`` (:mod:`.speedups`).

    Raises:
        ValueError: ``pos`` is negative.
    """
    if pos < 0:
        raise ValueError("ack_run: pos must be >= 0")
    end = len(bookmarks)
    freed = 0
    while pos < end:
        bookmark = bookmarks[pos]
        msg = messages.get(bookmark)
        if msg is None:
            break
        lessee = msg.lessee
        if lessee is None or msg.state != LEASED or (strict and lessee.owner is not owner):
            break
        if lessee.leased.pop(bookmark, None) is not None:
            freed += 1
        msg.lessee = None
        msg.lease_deadline = None
        msg.state = GONE
        del messages[bookmark]
        removed.append(bookmark)
        pos += 1
    return pos, freed


def split_bookmarks(value: object) -> list[str] | None:
    """An acknowledgement's bookmark list in one split: ``value.split(",")`` when ``value``
    is a ``str`` with no whitespace and no empty item (the usual ``1|1|,1|2|``), which is
    then what :func:`.wire.split_list` makes of it; ``None`` otherwise (the caller uses
    ``split_list``). The twin of the C ``split_bookmarks``."""
    if (
        type(value) is str
        and len(value.split(None, 1)) == 1  # (no whitespace inside: strip() is not needed
        and not value[:1].isspace()  # ... nor at either end)
        and not value[-1:].isspace()
        and ",," not in value  # (no empty item)
        and value[:1] != ","
        and value[-1:] != ","
    ):
        return value.split(",")
    return None
