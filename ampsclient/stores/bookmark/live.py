"""The recovery point of a ``live`` bookmark subscription: capped at the server's persisted point.

With the ``live`` option AMPS delivers messages *before* it has persisted them to the
transaction log. A message the application received and discarded may therefore be lost by
the server when it fails (``kill -9`` of an instance before its group commit, a failover to a
replica that never got it). Resuming from the last *discarded* bookmark would then name a
bookmark the server does not have (AMPS falls back to ``bookmark_not_found``, NOW by default)
or, once the publisher's sequence numbers are reused, one that now stands for a later message
that nobody has seen: either way messages the server did persist are skipped.

So, as seed 004 says ("AMPS periodically sends persisted acknowledgements on the
subscription, which indicates the most recent point at which messages in the topic have been
persisted ... the most recent method for those stores returns the latest persisted message
rather than the latest discarded message"), the store keeps, for a ``live`` subscription, the
last persisted point the server acknowledged, and the recovery point never lies after it:
:func:`capped` adds that point to the recovery list whenever it is not provably at or after
the discarded point. AMPS "begins replay at the oldest bookmark in the list" (seed 000) and
ignores list items it does not hold, so the replay starts at the older of the two: at the
persisted point when the application is ahead of the server's disk, at the discarded point
when the application is behind it.

Until the first persisted ack arrives the cap is the recovery point the subscription started
from (EPOCH for a subscription from EPOCH).
"""

from __future__ import annotations

from ...protocol.bookmarks import EPOCH

__all__ = ["capped"]


def _publisher_seq(item: str) -> tuple[str, int] | None:
    parts = item.split("|")
    if len(parts) == 3 and not parts[2] and parts[0].isdigit() and parts[1].isdigit():
        return parts[0], int(parts[1])
    return None


def capped(recovery: str, persisted: str) -> str:
    """The recovery point of a ``live`` subscription.

    Args:
        recovery: the discarded-based recovery point (a bookmark, a comma list, or EPOCH).
        persisted: the last persisted point (a bookmark, timestamp or list; EPOCH before any
            persisted ack of a subscription that started from EPOCH).

    Returns:
        ``recovery`` where ``persisted`` is provably at or after it (same publisher, sequence
        ``>=``); a publisher's item replaced by the persisted one that is older; a persisted
        item of a publisher ``recovery`` does not name appended (the server starts at the
        older); EPOCH when either is EPOCH.

    >>> capped("7|10|", "7|6|")
    '7|6|'
    >>> capped("7|10|,8|4|", "7|6|")
    '8|4|,7|6|'
    >>> capped("7|10|", "9|6|")
    '7|10|,9|6|'
    >>> capped("7|3|", "7|6|")
    '7|3|'
    >>> capped("0", "7|6|")
    '0'
    """
    if not persisted:
        return recovery
    if recovery == EPOCH or persisted == EPOCH:
        return EPOCH
    items = recovery.split(",")
    lowest: dict[str, int] = {}
    for item in items:
        ps = _publisher_seq(item)
        if ps is not None:
            lowest[ps[0]] = min(lowest.get(ps[0], ps[1]), ps[1])
    for item in persisted.split(","):
        if item in items:
            continue
        ps = _publisher_seq(item)
        if ps is None or ps[0] not in lowest:
            items.append(item)  # not comparable: the server starts at the older of the two
        elif ps[1] < lowest[ps[0]]:  # the application is ahead of the server's disk
            items = [i for i in items if (_publisher_seq(i) or ("",))[0] != ps[0]] + [item]
            lowest[ps[0]] = ps[1]
    return ",".join(items)
