"""Timestamps in recovery points (``MemoryBookmarkStore(use_timestamp=True)``).

Seed 003 lists, among the parts of a recovery point, "A timestamp indicating the last time
the store produced a recovery point", because "some applications may be offline longer than
the retention period for the transaction log. In those cases, none of the bookmarks seen by
the application (discarded or not) will be present in the AMPS instance, and it would be most
helpful to restart at the timestamp, which will be before the beginning of the transaction
log. If no timestamp were provided, no bookmark in the recovery point would be present, and
AMPS would restart the subscription from the end of the transaction log rather than the
beginning of the transaction log." A bookmark list may hold timestamps (seed 000: "a
comma-delimited list of bookmark values ... AMPS begins replay at the oldest bookmark in the
list"; "a timestamp prior to the beginning of the journal will start a replay at EPOCH").

With ``use_timestamp=True`` this store appends, as the last list item, the UTC time (whole
seconds, ``YYYYmmddTHHMMSSZ``) at which it produced the recovery point:
``10620414156524534001|3|,20261122T183421Z``. While the bookmarks are in the journal they are
older than that time, so replay starts at them; once the journal no longer has them, the
timestamp restarts the subscription at the start of what is left. The default is ``False``
because the official ``MemoryBookmarkStore`` returns bare bookmarks (``shared/protocol.md``
§8); the official SOW adapter instead adds the time of its last update when it reads points
back (``use_timestamp`` of :class:`~ampsclient.stores.recovery.SOWRecoveryPointAdapter`).
Timestamps loaded from an adapter are kept until the recovery point next changes.

Caveat: the time is the client's clock when the point was produced, not the journal time of
the next unprocessed message; if the journal was removed only partly (the recovery bookmarks
gone but later messages kept) replay can start after messages produced before that time.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["now_stamp"]

_stamp_cache: list[Any] = [0, ""]  # [second, its YYYYmmddTHHMMSSZ text]


def now_stamp() -> str:
    """The current UTC time as a timestamp bookmark, whole seconds (formatted once a second)."""
    cache = _stamp_cache
    sec = int(time.time())
    if sec != cache[0]:
        cache[1] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(sec))
        cache[0] = sec
    return str(cache[1])
