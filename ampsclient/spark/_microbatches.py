"""The micro-batches ahead of a stream: the messages after its last offset, cut under the
row and byte caps as they are counted, so that each trigger counts only what is new.

:class:`MicroBatches` does no I/O: a replay's raw deliveries are fed to it in log order, a
chunk at a time. :func:`count_into` runs such a replay on the planning client.

Why (issue #26): with ``maxRecordsPerTrigger``, ``latestOffset`` used to replay everything from
the micro-batch's start to the log's end at every trigger, to find the cap's message and to
count the backlog it reports: a stream of N messages in batches of B replayed about N²/2B
messages to the driver. Cut as they are counted, the messages of one replay give every
micro-batch ahead, and the next trigger replays only what came after the last one counted.
The cuts are those one replay from each micro-batch's start would find (the caps are applied
greedily from a batch's first message), so the offsets are the same, whatever replays gave
them: a micro-batch replanned from the checkpoint reads the same messages.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from .. import _accel
from ..exceptions import AMPSError
from ..protocol.header import KEY_ALIASES
from ..protocol.message import Message, body_offset
from ..sync import Client
from ._core import ReplayEnd, counting_replay

__all__ = ["MAX_CUTS", "Cut", "MicroBatches", "count_into", "data_sizes"]

MAX_CUTS: Final = 100_000
"""Full micro-batches remembered ahead at most (a bookmark each); past them the messages are
only counted, and the micro-batches after the last one kept are cut again by a new count from
there (a tiny cap over a huge backlog)."""

_DELIVERY: Final = b'{"c":"p"'
_COLUMNS: Final = _accel.delivery_columns
_LONG_NAMES: Final = tuple(
    a.encode() for a, k in KEY_ALIASES.items() if k in ("t", "bm", "k", "x", "ts")
)


@dataclass(frozen=True, slots=True)
class Cut:
    """The end of one full micro-batch: its last message's bookmark, its messages and the
    bytes of their data."""

    bookmark: str
    messages: int
    size: int


class MicroBatches:
    """The messages after the offset ``start`` (exclusive), as micro-batches under the caps.

    ``limit`` (rows) and ``max_bytes`` (bytes of message data) are applied as a replay from
    a batch's first message applies them: the batch ends at the ``limit``-th message, or when
    its data reaches ``max_bytes``, or before a message that would take it over ``max_bytes``
    (a batch's first message always fits). Without caps there is one open batch: everything.

    Attributes:
        start: the bookmark of the offset the first batch starts after.
        end: the bookmark of the last message counted (``None``: none yet).
        cuts: the full batches, in order.
        messages, size: everything counted after ``start`` (messages, bytes of data).
        exact: every full batch counted is in ``cuts`` (``False`` past :data:`MAX_CUTS`).
        fed: messages fed since this object was made (what the replays sent the driver).
    """

    def __init__(
        self, start: str, limit: int | None, max_bytes: int | None, *, keep: int | None = None
    ) -> None:
        self.start = start
        self.limit = limit
        self.max_bytes = max_bytes
        self.keep = MAX_CUTS if keep is None else keep
        self.sizing = limit is not None or max_bytes is not None
        self.end: str | None = None
        self.cuts: deque[Cut] = deque()
        self.messages = 0
        self.size = 0
        self.exact = True
        self.fed = 0
        self._open = 0
        self._open_size = 0
        self._open_last: bytes | None = None
        self._last: bytes | None = None

    def caps(self) -> tuple[int | None, int | None]:
        """``(limit, max_bytes)``."""
        return self.limit, self.max_bytes

    def feed(self, payloads: Sequence[bytes]) -> None:
        """The next deliveries of the replay after :attr:`end`, in log order (raw frames)."""
        n = len(payloads)
        if not n:
            return
        self.fed += n
        self._last = payloads[-1]
        sums = data_sizes(payloads) if self.sizing else None
        if self.max_bytes is not None:
            assert sums is not None
            for i, raw in enumerate(payloads):
                self._feed_sized(raw, sums[i + 1] - sums[i])
            return
        self.messages += n
        limit = self.limit
        if limit is None:  # no caps: one open batch, no sizes
            self._open += n
            self._open_last = payloads[-1]
            return
        assert sums is not None
        self.size += sums[n]
        i = 0
        while i < n:  # rows only: a cut every ``limit`` messages
            take = min(limit - self._open, n - i)
            self._open += take
            self._open_size += sums[i + take] - sums[i]
            self._open_last = payloads[i + take - 1]
            i += take
            if self._open == limit:
                self._cut()

    def _feed_sized(self, raw: bytes, size: int) -> None:
        self.messages += 1
        self.size += size
        max_bytes = self.max_bytes
        assert max_bytes is not None
        if self._open and self._open_size + size > max_bytes:
            self._cut()  # this one would take the batch over the byte cap
        self._open += 1
        self._open_size += size
        self._open_last = raw
        if self._open == self.limit or self._open_size >= max_bytes:
            self._cut()

    def _cut(self) -> None:
        last = self._open_last
        assert last is not None
        if len(self.cuts) < self.keep and self.exact:
            self.cuts.append(Cut(_bookmark(last), self._open, self._open_size))
        else:
            self.exact = False
        self._open = self._open_size = 0
        self._open_last = None

    def settle(self) -> None:
        """After a replay: :attr:`end` names the last message fed."""
        if self._last is not None:
            self.end = _bookmark(self._last)
            self._last = None

    @property
    def open_messages(self) -> int:
        """Messages after the last full batch (the batch not full yet)."""
        return self._open

    def next_end(self) -> tuple[str, int, int] | None:
        """The next micro-batch: ``(bookmark of its last message, messages, bytes)``, the
        first full batch or else everything counted; ``None`` when nothing was counted or the
        next full batch was not kept (count again from :attr:`start`)."""
        if self.cuts:
            cut = self.cuts[0]
            return cut.bookmark, cut.messages, cut.size
        if not self.exact or self.end is None or self.messages == 0:
            return None
        return self.end, self.messages, self.size

    def advance(self, start: str) -> bool:
        """The stream moved on to the offset ``start``: drop the batches before it.

        Returns:
            ``False`` when ``start`` is neither :attr:`start`, the end of the next batch nor
            the end of everything counted (a restart elsewhere, another plan): count again.
        """
        if start == self.start:
            return True
        if self.cuts and self.cuts[0].bookmark == start:
            cut = self.cuts.popleft()
            self.messages -= cut.messages
            self.size -= cut.size
            self.start = start
            return True
        if not self.cuts and self.exact and self.end == start:
            self.start = start
            self.messages = self.size = 0
            self._open = self._open_size = 0
            self._open_last = None
            return True
        return False


def _bookmark(raw: bytes) -> str:
    bm = Message(raw).bookmark
    if not bm:
        raise AMPSError("the server sent a replayed message without a bookmark")
    return bm


def data_sizes(payloads: Sequence[bytes]) -> Sequence[int]:
    """The running total of the bytes of message data (the bodies, after the headers) of
    the deliveries: ``n + 1`` numbers from 0, the ``i``-th body being ``[i]..[i + 1]``.

    The body offsets of the C speedups' one pass over the headers
    (:func:`~ampsclient.protocol.columns.delivery_columns`, what a read converts with);
    without them, or for a list it finds irregular, each header is measured in Python.
    """
    columns = _COLUMNS(list(payloads), _LONG_NAMES) if _COLUMNS is not None else None
    if columns is not None:
        offsets = array("i")
        offsets.frombytes(columns[16])
        return offsets
    return list(accumulate((len(p) - body_offset(p) for p in payloads), initial=0))


class _Sink:
    """Feeds a replay's deliveries to a :class:`MicroBatches` on the client's thread.

    A payload sink (:meth:`ampsclient.core.routes.Routes.learn`): once the client's fast path
    has learned the subscription's delivery prefix, it appends each delivery's payload bytes to
    :attr:`payload_sink` itself (no message object, no call per delivery) and calls
    :meth:`sink_filled` once per socket read, which feeds them to the plan; the first delivery
    and the acks come as messages (the handler is the sink itself).
    """

    def __init__(self, plan: MicroBatches) -> None:
        self.plan = plan
        self.payloads: list[bytes] = []
        self.end = ReplayEnd()

    @property
    def payload_sink(self) -> list[bytes]:
        """The list the fast path appends to (always the same object)."""
        return self.payloads

    def sink_filled(self) -> None:
        """Feed what the fast path appended."""
        if not self.payloads:
            return
        chunk = self.payloads[:]
        self.payloads.clear()
        if self.end.error is None:
            try:
                self.plan.feed(chunk)
            except Exception as exc:  # a message without a bookmark: the count is wrong
                self.end.fail(exc)

    def __call__(self, message: Message) -> None:
        raw = message.raw_payload
        if raw.startswith(_DELIVERY) or message.command == "publish":
            self.payloads.append(raw)
        elif message.command == "ack":
            self.end.on_ack(message, self.sink_filled)


def count_into(
    client: Client,
    topic: str,
    filter: str | None,
    bookmark: str,
    plan: MicroBatches,
    *,
    options: str,
    wait_ms: int,
) -> int:
    """Replay the range ``bookmark`` (to its end) into ``plan``; returns the messages fed.

    Raises:
        CommandError: the server refused the replay (``invalid bookmark``: its start is gone).
        DisconnectedError: the connection dropped before the replay completed.
        TimeoutError: the replay did not complete within ``wait_ms``.
    """
    sink = _Sink(plan)
    before = plan.fed
    counting_replay(
        client, sink, sink.end, topic=topic, filter=filter, bookmark=bookmark,
        options=options, wait_ms=wait_ms,
    )  # fmt: skip
    sink.sink_filled()  # none expected after the completed ack; the subscription is gone
    if sink.end.error is not None:
        raise sink.end.error
    plan.settle()
    return plan.fed - before
