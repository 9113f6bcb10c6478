"""Which implementation of the per-message loops runs: the C speedups or pure Python.

``ampsclient._speedups`` (C: ``ampsclient/_speedups_src/``) is an optional extension built
at install time (a C compiler is needed; without one the install still succeeds). It has the
client's two per-message loops, splitting the TCP stream into payloads and routing
deliveries to handlers, and the common case of
:class:`~ampsclient.stores.bookmark.MemoryBookmarkStore`'s ``log`` and ``discard_message``,
the publish stores' payload and record building, and the common cases of
``AsyncHAClient.publish`` (``PublishLane``) and ``AsyncClient.publish``
(``PlainPublishLane``), and a queue auto-ack's read of a delivery and batch append
(``autoack_take``, and ``AutoAck``, the handler that does it), a publisher thread's
non-blocking send that keeps the GIL (``send_nowait``), ``LaneMethod``, the method that
hands a call to a lane (:func:`lane_method`), and ``Relay``, a lane whose target its owner
may change (:class:`PyRelay`). The Python code
they replace stays next to them and is the reference, tested with the same cases. The
receive loops look their function up here on each call (tests switch them); the publish
stores bind theirs at import. Set
``AMPSCLIENT_PUREPYTHON=1`` before importing ampsclient to run the pure-Python code (the way
``MSGPACK_PUREPYTHON`` works for msgpack).

The C code names no attribute of ours and reads no other class's slots or instance
``__dict__``: its functions take and return values, and it works on the fields of its own
types. A :class:`~ampsclient.Message` is built on :data:`MessageFields` (the C type, or its
twin :class:`PyMessageFields`), whose public fields the receive loop fills; the bookmark
store's records, the publish stores' index and segment files are built on the C types below
the same way, a client's queue-ack batches are an :data:`AckBatches`, a client writer's
flags a :data:`WriterFields` (``FrameWriter.fields``) and an HA client's publish state (store,
lock, suffix cache, gate) a :data:`StoreForwardFields` (``StoreAndForward.fields``). What the
publish lanes use besides (the write queue, the writer's wake, the stored publish's head...)
is given to their constructors as values. :data:`TWINS` names the pure-Python twin of every
C function, lane method and C-owned type; each pair has a differential test.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Generic, ParamSpec, TypeVar

if TYPE_CHECKING:
    import threading

    from .transport.base import Transport

__all__ = [
    "SPEEDUPS",
    "TWINS",
    "AckBatches",
    "AutoAck",
    "BookmarkLane",
    "BookmarkPublisherFields",
    "BookmarkSubscriptionFields",
    "LaneMethod",
    "MessageFields",
    "PlainPublishLane",
    "PublishIndexFields",
    "PublishLane",
    "PyAckBatches",
    "PyBookmarkPublisherFields",
    "PyBookmarkSubscriptionFields",
    "PyMessageFields",
    "PyPublishIndexFields",
    "PyRelay",
    "PySegmentLogFields",
    "PyStoreForwardFields",
    "PyWriterFields",
    "Relay",
    "SegmentLogFields",
    "StoreForwardFields",
    "StoreLock",
    "WriterFields",
    "autoack_take",
    "deliver",
    "deliver_stream",
    "delivery_columns",
    "join_seq",
    "lane_method",
    "publish_frame",
    "py_lane_method",
    "send_nowait",
    "split_frames",
    "write_record",
    "ws_encode",
]

TWINS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "MessageFields": "ampsclient._accel.PyMessageFields",
        "AckBatches": "ampsclient._accel.PyAckBatches",
        "BookmarkSubscriptionFields": "ampsclient._accel.PyBookmarkSubscriptionFields",
        "BookmarkPublisherFields": "ampsclient._accel.PyBookmarkPublisherFields",
        "SegmentLogFields": "ampsclient._accel.PySegmentLogFields",
        "PublishIndexFields": "ampsclient._accel.PyPublishIndexFields",
        "WriterFields": "ampsclient._accel.PyWriterFields",
        "StoreForwardFields": "ampsclient._accel.PyStoreForwardFields",
        "split_frames": "ampsclient.protocol.framing.split_frames",
        "deliver": "ampsclient.core.routes.deliver",
        "deliver_stream": "ampsclient.core.routes.deliver_stream",
        "join_seq": "ampsclient.stores.publish.base.join_seq",
        "publish_frame": "ampsclient.core.publish.publish_frame",
        "send_nowait": "ampsclient.writer.send_nowait",
        "crc32": "zlib.crc32",
        "delivery_columns": "ampsclient.protocol.columns.delivery_columns",
        "write_record": "ampsclient.stores.publish.record.write_record",
        "ws_encode": "ampsclient.transport.ws.ws_messages",
        "autoack_take": "ampsclient.acks.autoack_take",
        "AutoAck.call": "ampsclient.acks.AutoAckCall.call",
        "BookmarkLane.log": "ampsclient.stores.bookmark.memory.MemoryBookmarkStore.log",
        "BookmarkLane.discard": (
            "ampsclient.stores.bookmark.memory.MemoryBookmarkStore.discard_message"
        ),
        "StoreLock.acquire": "_thread.LockType.acquire",
        "StoreLock.release": "_thread.LockType.release",
        "StoreLock.locked": "_thread.LockType.locked",
        "PublishLane.publish": "ampsclient.ha.client.AsyncHAClient.publish",
        "PlainPublishLane.publish": "ampsclient.writer.FrameWriter.publish",
        "LaneMethod": "ampsclient._accel.py_lane_method",
        "Relay.call": "ampsclient._accel.PyRelay.call",
    }
)
"""Each C function or lane method -> its pure-Python twin (the reference)."""


class PyMessageFields:
    """The storage of a :class:`~ampsclient.Message`: six public fields, which
    :mod:`ampsclient.protocol.message` documents and alone writes, apart from the receive
    loops (``ampsclient.core.routes.deliver`` through :meth:`Message.refill`, and the C
    ``deliver``, which fills the same fields of its twin, the C ``MessageFields``).

    The twin of the C ``MessageFields``: a type the C code owns, so it writes these fields
    through its own struct, not through another class's slots. A new instance has no field
    set (reading one raises :class:`AttributeError`); ``Message.__init__`` sets all six."""

    __slots__ = (
        "body_start",
        "parsed_data",
        "parsed_header",
        "payload_bytes",
        "routed_sub_id",
        "seen_bookmark",
    )

    payload_bytes: bytes
    """The frame's payload, header and body (``b""`` for a message built by the application)."""
    routed_sub_id: str | None
    """The subscription the receive path routed the message to, or ``None``."""
    parsed_header: dict[str, Any] | None
    """The decoded header once parsed (or given), else ``None``."""
    parsed_data: bytes | None
    """The body bytes once cut (or given), else ``None``."""
    seen_bookmark: str | None
    """The ``bm`` value when the receive path read it without parsing the header."""
    body_start: int
    """The offset of the body in :attr:`payload_bytes`, ``-1`` while not known."""


class PyAckBatches:
    """A client's pending queue-ack batches: three public fields that
    :class:`ampsclient.acks.QueueAcks` holds, documents and alone replaces (under its lock).

    The twin of the C ``AckBatches``, a type the C code owns: the C auto-ack handler
    (``AutoAck``) reads these fields through its own struct. A new instance has no field
    set."""

    __slots__ = ("batch_size", "caps", "pending")

    pending: dict[str, list[str]]
    """topic -> the bookmarks of its open batch."""
    caps: dict[str, int]
    """topic -> the smallest ``max_backlog`` its subscriptions reported."""
    batch_size: int
    """Plain acks per batch (0 or 1: each ack at once)."""


class PyBookmarkSubscriptionFields:
    """The fields of :class:`~ampsclient.stores.MemoryBookmarkStore`'s per-subscription
    record that its lane works on (``ampsclient.stores.bookmark.memory`` documents them and
    builds its record on this type).

    The twin of the C ``BookmarkSubscriptionFields``, a type the C code owns: the C
    ``BookmarkLane`` reads and writes these fields through its own struct. A new instance
    has no field set."""

    __slots__ = ("inflight", "last_pub", "loaded_ts", "next_no", "points", "pubs", "recent")


class PyBookmarkPublisherFields:
    """The fields of :class:`~ampsclient.stores.MemoryBookmarkStore`'s per-publisher record
    that its lane works on; the twin of the C ``BookmarkPublisherFields`` (see
    :class:`PyBookmarkSubscriptionFields`)."""

    __slots__ = ("done", "high", "point", "queue", "slot")


class PySegmentLogFields:
    """The fields of a file publish store's segment files
    (:class:`ampsclient.stores.publish.segments.SegmentLog`, built on this type, documents
    them) that the HA publish lane reads and writes: ``broken``, ``mm``, ``active_size``,
    ``map_size``, ``segment_size``, ``write_gen``.

    The twin of the C ``SegmentLogFields``, a type the C code owns: the C ``PublishLane``
    works on these fields through its own struct. A new instance has no field set."""

    __slots__ = ("active_size", "broken", "map_size", "mm", "segment_size", "write_gen")


class PyPublishIndexFields:
    """The index fields of the bundled publish stores
    (:class:`ampsclient.stores.publish.base.IndexedPublishStore`, built on this type,
    documents them) that the HA publish lane reads and writes.

    The twin of the C ``PublishIndexFields``, a type the C code owns: the C ``PublishLane``
    works on these fields through its own struct. A new instance has no field set."""

    __slots__ = (
        "index_buf",
        "index_closed",
        "index_count",
        "index_first",
        "index_lock",
        "index_log",
        "index_next",
        "index_pad",
    )


class PyWriterFields:
    """A client writer's flags: five public fields that
    :class:`ampsclient.writer.FrameWriter` holds (its ``fields``), documents and alone
    writes.

    The twin of the C ``WriterFields``, a type the C code owns: the C publish lanes
    (``PublishLane``, ``PlainPublishLane``) read these fields through its own struct. A new
    instance has no field set."""

    __slots__ = ("blocked", "caller_writes", "transport", "wake_pending")

    transport: Transport | None
    """The open transport, or ``None`` while disconnected."""
    wake_pending: bool
    """``True`` while the writer is scheduled (a frame queued now goes out without a wake)."""
    blocked: bool
    """``True`` while the socket's write buffer is over its high-water mark."""
    caller_writes: bool
    """Whether a publish that leaves ``CALLER_WRITE_FRAMES`` frames queued writes them."""


class PyStoreForwardFields:
    """An HA client's publish state: four public fields that
    :class:`ampsclient.ha.store_forward.StoreAndForward` holds (its ``fields``), documents
    and alone writes.

    The twin of the C ``StoreForwardFields``, a type the C code owns: the C ``PublishLane``
    is built on it (it takes the store, the lock and the suffix cache once, and reads the
    gate on each publish). A new instance has no field set."""

    __slots__ = ("can_send", "lock", "store", "suffixes")

    store: Any
    """The publish store (a :class:`~ampsclient.stores.publish.base.PublishStore`; not named
    here: the stores import this module): its index gives each publish its sequence number."""
    lock: threading.Lock
    """Held while a publish is stored and queued, while the gate moves and while replaying."""
    suffixes: dict[str, bytes]
    """topic -> the tail of a stored publish of that topic (after its sequence number)."""
    can_send: bool
    """The publish gate: ``False`` while publishes are stored, not sent (disconnected,
    reconnecting, replaying)."""


split_frames: Callable[[bytes, int, int, list[bytes]], int] | None = None
deliver: Callable[..., None] | None = None
deliver_stream: Callable[..., tuple[int, int]] | None = None
BookmarkLane: Callable[..., Any] | None = None
StoreLock: Callable[[], Any] | None = None
PublishLane: Callable[..., Any] | None = None
PlainPublishLane: Callable[..., Any] | None = None
LaneMethod: Callable[[str, Callable[..., Any]], Any] | None = None
_c_relay: Callable[[Callable[..., Any]], Any] | None = None
_c_fields: type[Any] | None = None
_c_batches: type[Any] | None = None
_c_sub_fields: type[Any] | None = None
_c_pub_fields: type[Any] | None = None
_c_seg_fields: type[Any] | None = None
_c_index_fields: type[Any] | None = None
_c_writer_fields: type[Any] | None = None
_c_sf_fields: type[Any] | None = None
AutoAck: Callable[..., Any] | None = None
join_seq: Callable[[bytes, int, bytes], bytes] | None = None
publish_frame: Callable[[bytes, int | None, bytes, bytes], bytes] | None = None
send_nowait: Callable[[int, bytes], int] | None = None
write_record: Callable[[Any, int, int, bytes], int] | None = None
ws_encode: Callable[[bytes, bool], bytes | None] | None = None
autoack_take: Callable[[dict[str, list[str]], dict[str, int], int, bytes], Any] | None = None
delivery_columns: Callable[[list[bytes], tuple[bytes, ...]], tuple[Any, ...] | None] | None = None

if not os.environ.get("AMPSCLIENT_PUREPYTHON"):
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - built without a compiler
        _speedups = None
    if _speedups is not None and not hasattr(_speedups, "MessageFields"):
        _speedups = None  # pragma: no cover - a build older than its Python (rebuild it)
    if _speedups is not None:
        _c_fields = _speedups.MessageFields
        split_frames = _speedups.split_frames
        deliver = _speedups.deliver
        deliver_stream = _speedups.deliver_stream
        BookmarkLane = getattr(_speedups, "BookmarkLane", None)  # not on free-threaded builds
        _c_sub_fields = getattr(_speedups, "BookmarkSubscriptionFields", None)  # (with the lane)
        _c_pub_fields = getattr(_speedups, "BookmarkPublisherFields", None)
        StoreLock = getattr(_speedups, "StoreLock", None)  # (the lane's lock)
        PublishLane = getattr(_speedups, "PublishLane", None)  # nor these
        PlainPublishLane = getattr(_speedups, "PlainPublishLane", None)
        _c_seg_fields = getattr(_speedups, "SegmentLogFields", None)  # (with PublishLane)
        _c_index_fields = getattr(_speedups, "PublishIndexFields", None)
        _c_writer_fields = getattr(_speedups, "WriterFields", None)
        _c_sf_fields = getattr(_speedups, "StoreForwardFields", None)
        AutoAck = getattr(_speedups, "AutoAck", None)
        _c_batches = getattr(_speedups, "AckBatches", None)  # (with AutoAck)
        LaneMethod = getattr(_speedups, "LaneMethod", None)  # (an older build has none)
        _c_relay = getattr(_speedups, "Relay", None)
        join_seq = _speedups.join_seq
        publish_frame = getattr(_speedups, "publish_frame", None)  # (an older build has none)
        send_nowait = _speedups.send_nowait
        write_record = _speedups.write_record
        ws_encode = _speedups.ws_encode
        autoack_take = _speedups.autoack_take
        delivery_columns = getattr(_speedups, "delivery_columns", None)  # (an older build)

SPEEDUPS: bool = deliver is not None
"""``True`` when the C speedups are in use."""

if TYPE_CHECKING:
    MessageFields = PyMessageFields
    AckBatches = PyAckBatches
    BookmarkSubscriptionFields = PyBookmarkSubscriptionFields
    BookmarkPublisherFields = PyBookmarkPublisherFields
    SegmentLogFields = PySegmentLogFields
    PublishIndexFields = PyPublishIndexFields
    WriterFields = PyWriterFields
    StoreForwardFields = PyStoreForwardFields
else:
    StoreForwardFields = _c_sf_fields or PyStoreForwardFields
    """What an HA client's publish state is: the C type with the publish lane."""
    WriterFields = _c_writer_fields or PyWriterFields
    """What a client writer's flags are: the C type with the publish lanes."""
    PublishIndexFields = _c_index_fields or PyPublishIndexFields
    """The base of the publish stores' index: the C type with the lane."""
    SegmentLogFields = _c_seg_fields or PySegmentLogFields
    """The base of a file publish store's ``SegmentLog``: the C type with the lane."""
    BookmarkSubscriptionFields = _c_sub_fields or PyBookmarkSubscriptionFields
    """The base of the bookmark store's subscription record: the C type with the lane."""
    BookmarkPublisherFields = _c_pub_fields or PyBookmarkPublisherFields
    """The base of the bookmark store's publisher record: the C type with the lane."""
    AckBatches = _c_batches or PyAckBatches
    """The C ``AckBatches`` when built, else :class:`PyAckBatches`."""
    MessageFields = _c_fields or PyMessageFields
    """The C ``MessageFields`` when built, else :class:`PyMessageFields`: the base of
    :class:`~ampsclient.Message` (the C receive loop fills only this type's fields)."""

_F = TypeVar("_F", bound=Callable[..., Any])
_P = ParamSpec("_P")
_R = TypeVar("_R")


def py_lane_method(attr: str, method: _F) -> _F:
    """``method``, handing each call to the lane the instance holds in ``attr`` when set.

    The twin of the C ``LaneMethod``: ``obj.m(*args)`` calls ``obj.<attr>(*args)`` when that
    attribute (a slot of the class, or an entry of ``obj.__dict__``) is set and not ``None``,
    else ``method(obj, *args)``."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        lane = getattr(self, attr, None)
        if lane is None:
            return method(self, *args, **kwargs)
        return lane(*args, **kwargs)

    return call  # type: ignore[return-value]


class PyRelay(Generic[_P, _R]):
    """``call(*args, **kwargs)`` calls :attr:`target`, which the relay's owner may change.

    The twin of the C ``Relay``. An object that hands out a lane which must follow a later
    change (the HA client's ``discard``: its bookmark store may be replaced) hands out
    ``relay.call`` and changes ``target`` (it alone writes it); whoever holds ``call`` reaches
    the new target. With the C speedups ``call`` is a C function the interpreter calls
    directly, and it calls a C target's function directly."""

    __slots__ = ("target",)

    def __init__(self, target: Callable[_P, _R]) -> None:
        self.target = target
        """What :meth:`call` calls."""

    def call(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Call the target with these arguments (the target's own signature)."""
        return self.target(*args, **kwargs)


Relay: Callable[[Callable[..., Any]], Any] = _c_relay or PyRelay
"""The C ``Relay`` when built, else :class:`PyRelay`."""


def lane_method(attr: str) -> Callable[[_F], _F]:
    """Decorate a method whose common case a lane may take (a C lane's method, or another
    object's method the instance forwards to without a Python frame of its own).

    The class declares the method once, with its Python body; an instance chooses its lane
    by setting the attribute ``attr`` (``None``: the body runs), best a ``__slots__`` entry
    of the class: the C dispatch then reads it at its offset instead of looking it up in
    the instance's ``__dict__``. Nothing is ever assigned to
    the method's own name on an instance, so the method a reader sees is the one that runs.
    With the C speedups the dispatch is the C ``LaneMethod`` (a method descriptor: no bound
    method, no Python frame before the lane), else :func:`py_lane_method`. The C one also
    answers ``obj.method`` with the lane itself when that is a C function (followed through
    lane methods, as a call follows them): a caller who holds it calls the lane with no
    dispatch at all. So a C lane is never replaced under a holder: a replaced one is disabled
    (a publish lane then calls the Python body) or is a :data:`Relay`'s ``call``."""

    def decorate(method: _F) -> _F:
        if LaneMethod is None:
            return py_lane_method(attr, method)
        return LaneMethod(attr, method)  # type: ignore[no-any-return]

    return decorate


def implementations() -> dict[str, Any]:
    """The C module when built (for tests that run both implementations), else ``{}``."""
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover
        return {}
    return {"c": _speedups}
