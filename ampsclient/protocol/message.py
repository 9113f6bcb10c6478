"""Messages: a lazily parsed AMPS payload with the official client's accessors.

A :class:`Message` wraps the payload bytes of one frame. Nothing is parsed until asked:
routing needs only ``sids`` (found with one ``bytes.find``), the body offset is found with a
cheap scan in the common case, and the header dict is decoded on first use of any other field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from .._accel import MessageFields
from .acks import AckType, parse_ack_types
from .header import Header, decode_header
from .options import Options
from .queue_ack import HANDED_OVER, AckHandedOver, AckSink, Processing

__all__ = ["Message", "body_offset", "find_sids", "split_sow_batch"]

_SIDS: Final = b'"sids":"'
_QUOTE: Final = b'"'
_BACKSLASH: Final = b"\\"


class _Built(dict[str, Any]):
    """The header of a message built by the application (``Message()`` + setters): absent
    fields read as ``""``, as in the official client."""


def find_sids(payload: bytes) -> str | None:
    """The ``sids`` value of a delivery without parsing the header, or ``None``."""
    i = payload.find(_SIDS)
    if i < 0:
        return None
    i += 8
    j = payload.find(_QUOTE, i)
    if j < 0:
        return None
    return payload[i:j].decode()


def body_offset(payload: bytes) -> int:
    """Offset of the first body byte (the byte after the header's closing brace)."""
    i = payload.find(b"}")
    # fast path: no escapes before the brace, and an even number of quotes = not in a string
    while i >= 0:
        if payload.find(_BACKSLASH, 0, i) >= 0:
            break
        if payload.count(_QUOTE, 0, i) % 2 == 0:
            return i + 1
        i = payload.find(b"}", i + 1)
    return decode_header(payload)[1]


class Message(MessageFields):
    """One message received from (or built for) an AMPS server.

    Accessors follow the official client (``get_data()``, ``get_topic()``, ...); properties
    (``data``, ``topic``, ...) are the Pythonic spelling. ``data`` is bytes; ``get_data()``
    decodes it as UTF-8 text like the official client does for text message types.

    Its storage is its base class, ``ampsclient._accel.MessageFields`` (the C speedups' own
    type, else its Python twin :class:`~ampsclient._accel.PyMessageFields`), six public
    fields: ``payload_bytes`` (the payload as received), ``routed_sub_id`` (the subscription
    the receive path routed it to), ``parsed_header`` and ``parsed_data`` (``None`` until
    parsed or given), ``seen_bookmark`` (the ``bm`` value read without parsing the header)
    and ``body_start`` (the body's offset, ``-1`` until known). This module alone writes
    them; other code builds a message with the constructor or :meth:`refill` and reads it
    through the properties (``bookmark``, ``sub_id``, ``raw_payload``...). The C receive loop
    (``deliver`` in ``_speedups_src/deliver.c``) is :meth:`refill`'s twin: it fills the fields
    of its own type, so it reaches into no slot of this class.
    """

    __slots__ = ()

    _ack_to: ClassVar[Callable[[str, str, str | None], None] | None] = None
    """Where :meth:`ack` sends a queue acknowledgement: set on the per-client subclass of
    the messages a client delivers (:func:`ampsclient.acks.bound_message_type`)."""

    _ack_sink: ClassVar[AckSink | None] = None
    """The client's ack state, for :meth:`processing` (set beside :attr:`_ack_to`)."""

    def __init__(
        self,
        payload: bytes = b"",
        sub_id: str | None = None,
        *,
        header: Header | None = None,
        data: bytes | None = None,
        bookmark: str | None = None,
    ) -> None:
        """A message of ``payload`` (header and body, as one frame carries them).

        Args:
            payload: the frame's payload; ``b""`` builds an empty message for the setters.
            sub_id: the subscription the message was routed to (:attr:`sub_id` reads it
                before the header's ``sub_id``/``sids``).
            header: the decoded header, when the caller has it (else parsed on first use).
            data: the body, when the caller has it (else cut from ``payload``).
            bookmark: the ``bm`` value, when the caller read it without parsing the header
                (:attr:`bookmark` reads it first).
        """
        self.payload_bytes = payload
        self.routed_sub_id = sub_id
        self.parsed_header = header
        self.parsed_data = data
        self.body_start = -1
        self.seen_bookmark = bookmark

    def refill(self, payload: bytes, sub_id: str | None, bookmark: str | None = None) -> None:
        """Make this instance the message of another ``payload``, as the constructor would
        (no header or body known yet): what the receive loop does with the instance a
        handler did not keep (:func:`ampsclient.core.routes.deliver`; its C twin writes the
        same slots)."""
        self.payload_bytes = payload
        self.routed_sub_id = sub_id
        self.parsed_header = self.parsed_data = None
        self.body_start = -1
        self.seen_bookmark = bookmark

    if TYPE_CHECKING:  # the official spellings installed by message_api, for type checkers

        def set_ack_type(self, value: Any) -> Message: ...
        def setAckType(self, value: Any) -> Message: ...
        def getAckType(self) -> Any: ...
        def set_batch_size(self, value: Any) -> Message: ...
        def setBatchSize(self, value: Any) -> Message: ...
        def getBatchSize(self) -> Any: ...
        def set_bookmark(self, value: Any) -> Message: ...
        def setBookmark(self, value: Any) -> Message: ...
        def getBookmark(self) -> Any: ...
        def set_client_name(self, value: Any) -> Message: ...
        def setClientName(self, value: Any) -> Message: ...
        def getClientName(self) -> Any: ...
        def set_command(self, value: Any) -> Message: ...
        def setCommand(self, value: Any) -> Message: ...
        def getCommand(self) -> Any: ...
        def set_command_id(self, value: Any) -> Message: ...
        def setCommandId(self, value: Any) -> Message: ...
        def getCommandId(self) -> Any: ...
        def set_correlation_id(self, value: Any) -> Message: ...
        def setCorrelationId(self, value: Any) -> Message: ...
        def getCorrelationId(self) -> Any: ...
        def set_expiration(self, value: Any) -> Message: ...
        def setExpiration(self, value: Any) -> Message: ...
        def getExpiration(self) -> Any: ...
        def set_filter(self, value: Any) -> Message: ...
        def setFilter(self, value: Any) -> Message: ...
        def getFilter(self) -> Any: ...
        def set_group_seq_no(self, value: Any) -> Message: ...
        def setGroupSequenceNumber(self, value: Any) -> Message: ...
        def getGroupSequenceNumber(self) -> Any: ...
        def set_heartbeat(self, value: Any) -> Message: ...
        def setHeartbeat(self, value: Any) -> Message: ...
        def getHeartbeat(self) -> Any: ...
        def set_lease_period(self, value: Any) -> Message: ...
        def setLeasePeriod(self, value: Any) -> Message: ...
        def getLeasePeriod(self) -> Any: ...
        def set_matches(self, value: Any) -> Message: ...
        def setMatches(self, value: Any) -> Message: ...
        def getMatches(self) -> Any: ...
        def set_message_size(self, value: Any) -> Message: ...
        def setMessageLength(self, value: Any) -> Message: ...
        def getMessageLength(self) -> Any: ...
        def set_message_type(self, value: Any) -> Message: ...
        def setMessageType(self, value: Any) -> Message: ...
        def getMessageType(self) -> Any: ...
        def set_options(self, value: Any) -> Message: ...
        def setOptions(self, value: Any) -> Message: ...
        def getOptions(self) -> Any: ...
        def set_order_by(self, value: Any) -> Message: ...
        def setOrderBy(self, value: Any) -> Message: ...
        def getOrderBy(self) -> Any: ...
        def set_password(self, value: Any) -> Message: ...
        def setPassword(self, value: Any) -> Message: ...
        def getPassword(self) -> Any: ...
        def set_query_id(self, value: Any) -> Message: ...
        def setQueryID(self, value: Any) -> Message: ...
        def getQueryID(self) -> Any: ...
        def set_reason(self, value: Any) -> Message: ...
        def setReason(self, value: Any) -> Message: ...
        def getReason(self) -> Any: ...
        def set_records_inserted(self, value: Any) -> Message: ...
        def setRecordsInserted(self, value: Any) -> Message: ...
        def getRecordsInserted(self) -> Any: ...
        def set_records_returned(self, value: Any) -> Message: ...
        def setRecordsReturned(self, value: Any) -> Message: ...
        def getRecordsReturned(self) -> Any: ...
        def set_records_updated(self, value: Any) -> Message: ...
        def setRecordsUpdated(self, value: Any) -> Message: ...
        def getRecordsUpdated(self) -> Any: ...
        def set_sequence(self, value: Any) -> Message: ...
        def setSequence(self, value: Any) -> Message: ...
        def getSequence(self) -> Any: ...
        def set_sow_deleted(self, value: Any) -> Message: ...
        def setSowDelete(self, value: Any) -> Message: ...
        def getSowDelete(self) -> Any: ...
        def set_sow_key(self, value: Any) -> Message: ...
        def setSowKey(self, value: Any) -> Message: ...
        def getSowKey(self) -> Any: ...
        def set_sow_keys(self, value: Any) -> Message: ...
        def setSowKeys(self, value: Any) -> Message: ...
        def getSowKeys(self) -> Any: ...
        def set_status(self, value: Any) -> Message: ...
        def setStatus(self, value: Any) -> Message: ...
        def getStatus(self) -> Any: ...
        def set_sub_id(self, value: Any) -> Message: ...
        def setSubscriptionId(self, value: Any) -> Message: ...
        def getSubscriptionId(self) -> Any: ...
        def set_sub_ids(self, value: Any) -> Message: ...
        def setSubscriptionIds(self, value: Any) -> Message: ...
        def getSubscriptionIds(self) -> Any: ...
        def set_timeout_interval(self, value: Any) -> Message: ...
        def setTimeoutInterval(self, value: Any) -> Message: ...
        def getTimeoutInterval(self) -> Any: ...
        def set_timestamp(self, value: Any) -> Message: ...
        def setTimestamp(self, value: Any) -> Message: ...
        def getTimestamp(self) -> Any: ...
        def set_top_n(self, value: Any) -> Message: ...
        def setTopNRecordsReturned(self, value: Any) -> Message: ...
        def getTopNRecordsReturned(self) -> Any: ...
        def set_topic(self, value: Any) -> Message: ...
        def setTopic(self, value: Any) -> Message: ...
        def getTopic(self) -> Any: ...
        def set_topic_matches(self, value: Any) -> Message: ...
        def setTopicMatches(self, value: Any) -> Message: ...
        def getTopicMatches(self) -> Any: ...
        def set_user_id(self, value: Any) -> Message: ...
        def setUserId(self, value: Any) -> Message: ...
        def getUserId(self) -> Any: ...
        def set_version(self, value: Any) -> Message: ...
        def setVersion(self, value: Any) -> Message: ...
        def getVersion(self) -> Any: ...

        client_name: Any
        expiration: Any

        def get_group_seq_no(self) -> Any: ...

        group_seq_no: Any

        def get_heartbeat(self) -> Any: ...

        heartbeat: Any
        matches: Any

        def get_message_size(self) -> Any: ...

        message_size: Any

        def get_message_type(self) -> Any: ...

        message_type: Any

        def get_order_by(self) -> Any: ...

        order_by: Any
        password: Any
        records_inserted: Any
        records_returned: Any
        records_updated: Any

        def get_sow_deleted(self) -> Any: ...

        sow_deleted: Any

        def get_sow_keys(self) -> Any: ...

        sow_keys: Any

        def get_timeout_interval(self) -> Any: ...

        timeout_interval: Any

        def get_top_n(self) -> Any: ...

        top_n: Any
        topic_matches: Any
        user_id: Any
        version: Any

        def getData(self) -> str: ...
        def setData(self, data: str | bytes) -> Message: ...
        def get_bookmark_seq_no(self) -> int: ...

        Options: Any
        Command: Any
        AckType: Any

    # -- parsing ---------------------------------------------------------------------------

    @property
    def header(self) -> Header:
        """The decoded header (canonical keys)."""
        hdr = self.parsed_header
        if hdr is None:
            if not self.payload_bytes:  # built by the application: Message()
                hdr = self.parsed_header = _Built()
                self.body_start = 0
                return hdr
            hdr, self.body_start = decode_header(self.payload_bytes)
            self.parsed_header = hdr
        return hdr

    @property
    def data(self) -> bytes:
        """The body bytes."""
        data = self.parsed_data
        if data is None:
            if self.body_start < 0:
                self.body_start = body_offset(self.payload_bytes)
            data = self.parsed_data = self.payload_bytes[self.body_start :]
        return data

    @property
    def raw_payload(self) -> bytes:
        """The frame's payload as received: header then body (``b""`` for a built message).

        A handler that keeps it instead of the message keeps plain bytes (delivered messages
        are recycled), and can decode many of them at once later.
        """
        return self.payload_bytes

    def get(self, key: str, default: Any = None) -> Any:
        """A header field by canonical key."""
        return self.header.get(key, default)

    def _str(self, key: str) -> str | None:
        hdr = self.header
        v = hdr.get(key)
        if v is None:
            return "" if type(hdr) is _Built else None
        return str(v)

    def _int(self, key: str) -> int | None:
        hdr = self.header
        v = hdr.get(key)
        if v is None or v == "":
            return "" if type(hdr) is _Built else None  # type: ignore[return-value]
        try:
            return int(v)
        except (TypeError, ValueError):
            return None

    # -- payload helpers -------------------------------------------------------------------

    def get_data(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.data.decode("utf-8", "replace")

    def get_data_raw(self) -> bytes:
        """The body as bytes."""
        return self.data

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.data)

    def unpack(self) -> Any:
        """The body parsed as msgpack."""
        import msgpack

        return msgpack.unpackb(self.data, raw=False)

    # -- fields ----------------------------------------------------------------------------

    @property
    def command(self) -> str:
        """The command: ``publish``, ``ack``, ``sow``, ``oof``, ``group_begin``, ``heartbeat``...

        Like the official client, a delivery (``"c":"p"`` on the wire) reports ``publish``.
        """
        c = str(self.header.get("c", ""))
        return "publish" if c == "p" else c

    def _set(self, key: str, value: Any) -> Message:
        hdr = self.header
        if value is None or value == "":
            hdr.pop(key, None)
        else:
            hdr[key] = value
        return self

    def set_data(self, data: str | bytes) -> Message:
        """Set the body (text is encoded as UTF-8)."""
        self.parsed_data = data.encode() if isinstance(data, str) else bytes(data)
        return self

    def reset(self) -> Message:
        """Clear every field and the body (the official ``Message.reset``)."""
        self.payload_bytes = b""
        self.parsed_header = _Built()
        self.parsed_data = b""
        self.body_start = 0
        self.seen_bookmark = None
        self.routed_sub_id = None
        return self

    def ack(self, options: str | None = None) -> AckHandedOver:
        """Acknowledge this queue message to the server that delivered it.

        Args:
            options: e.g. ``"cancel"`` (return the message to the queue) or ``"expire"``.

        Returns:
            An object that may be awaited (``await message.ack()`` in async code) and
            returns at once: the ack is already handed to the client's batch.

        Raises:
            UsageError: the message was not delivered by a client (build the ack with
                ``Client.ack(topic, bookmark)`` instead), or it carries no bookmark.
        """
        from ..exceptions import UsageError

        ack_to = type(self)._ack_to
        topic, bookmark = self.topic, self.bookmark
        if ack_to is None:
            raise UsageError(
                "Message.ack(): this message was not delivered by a client; "
                "use client.ack(topic, bookmark, options)"
            )
        if not topic or not bookmark:
            raise UsageError("Message.ack(): the message has no topic or no bookmark")
        ack_to(topic, bookmark, options)
        return HANDED_OVER

    def processing(self) -> Processing[Self]:
        """A context manager (``with`` or ``async with``) that acks this queue message when
        the block ends normally and cancels it (returns it to the queue) when it raises.

        Example::

            async for message in await client.subscribe("orders", max_backlog=10):
                async with message.processing():
                    await handle(message)
        """
        return Processing(self, type(self)._ack_sink)

    @property
    def topic(self) -> str | None:
        """``t``."""
        return self._str("t")

    @property
    def sub_id(self) -> str | None:
        """The subscription this message was routed to (or the ``sub_id`` header)."""
        if self.routed_sub_id is not None:
            return self.routed_sub_id
        sid = self._str("sub_id")
        if sid is None:
            sid = self._str("sids")
        return sid

    @property
    def sub_ids(self) -> str | None:
        """``sids``: every subscription of this connection the message matched."""
        return self._str("sids")

    @property
    def command_id(self) -> str | None:
        """``cid``."""
        return self._str("cid")

    @property
    def query_id(self) -> str | None:
        """``query_id``."""
        return self._str("query_id")

    @property
    def bookmark(self) -> str | None:
        """``bm`` (known without parsing the header when the client's fast path saw it)."""
        bm = self.seen_bookmark
        if bm is None:
            bm = self._str("bm")
        return bm

    @property
    def sow_key(self) -> str | None:
        """``k``."""
        return self._str("k")

    @property
    def correlation_id(self) -> str | None:
        """``x``."""
        return self._str("x")

    @property
    def sequence(self) -> int | None:
        """``s``."""
        return self._int("s")

    @property
    def timestamp(self) -> str | None:
        """``ts``."""
        return self._str("ts")

    @property
    def status(self) -> str | None:
        """``status`` of an ack."""
        return self._str("status")

    @property
    def reason(self) -> str | None:
        """``reason`` of an ack."""
        return self._str("reason")

    @property
    def ack_type(self) -> AckType:
        """``a`` as flags."""
        return parse_ack_types(self._str("a"))

    @property
    def options(self) -> str | None:
        """``o``."""
        return self._str("o")

    @property
    def filter(self) -> str | None:
        """``filter``."""
        return self._str("filter")

    @property
    def batch_size(self) -> int | None:
        """``bs``."""
        return self._int("bs")

    @property
    def lease_period(self) -> str | None:
        """``lp`` (present on queue messages)."""
        return self._str("lp")

    # official accessors -------------------------------------------------------------------

    def get_command(self) -> str:
        """Official accessor for :attr:`command`."""
        return self.command

    def get_topic(self) -> str | None:
        """Official accessor for :attr:`topic`."""
        return self.topic

    def get_sub_id(self) -> str | None:
        """Official accessor for :attr:`sub_id`."""
        return self.sub_id

    def get_sub_ids(self) -> str | None:
        """Official accessor for :attr:`sub_ids`."""
        return self.sub_ids

    def get_command_id(self) -> str | None:
        """Official accessor for :attr:`command_id`."""
        return self.command_id

    def get_query_id(self) -> str | None:
        """Official accessor for :attr:`query_id`."""
        return self.query_id

    def get_bookmark(self) -> str | None:
        """Official accessor for :attr:`bookmark`."""
        return self.bookmark

    def get_sow_key(self) -> str | None:
        """Official accessor for :attr:`sow_key`."""
        return self.sow_key

    def get_correlation_id(self) -> str | None:
        """Official accessor for :attr:`correlation_id`."""
        return self.correlation_id

    def get_sequence(self) -> int | None:
        """Official accessor for :attr:`sequence`."""
        return self.sequence

    def get_timestamp(self) -> str | None:
        """Official accessor for :attr:`timestamp`."""
        return self.timestamp

    def get_status(self) -> str | None:
        """Official accessor for :attr:`status`."""
        return self.status

    def get_reason(self) -> str | None:
        """Official accessor for :attr:`reason`."""
        return self.reason

    def get_ack_type(self) -> str | None:
        """The ``a`` header as the wire's text."""
        return self._str("a")

    def get_options(self) -> str | None:
        """Official accessor for :attr:`options`."""
        return self.options

    def get_filter(self) -> str | None:
        """Official accessor for :attr:`filter`."""
        return self.filter

    def get_batch_size(self) -> int | None:
        """Official accessor for :attr:`batch_size`."""
        return self.batch_size

    def get_lease_period(self) -> str | None:
        """Official accessor for :attr:`lease_period`."""
        return self.lease_period

    def get_matches(self) -> int | None:
        """``matches`` of a stats/completed ack."""
        return self._int("matches")

    def get_topic_matches(self) -> int | None:
        """``topic_matches`` of a stats/completed ack."""
        return self._int("topic_matches")

    def get_records_returned(self) -> int | None:
        """``records_returned`` of a completed ack."""
        return self._int("records_returned")

    def get_records_deleted(self) -> int | None:
        """``records_deleted`` of a stats ack."""
        return self._int("records_deleted")

    def get_records_inserted(self) -> int | None:
        """``records_inserted`` of a stats ack."""
        return self._int("records_inserted")

    def get_records_updated(self) -> int | None:
        """``records_updated`` of a stats ack."""
        return self._int("records_updated")

    def get_client_name(self) -> str | None:
        """``client_name`` (logon acks)."""
        return self._str("client_name")

    def get_version(self) -> str | None:
        """``version`` (logon acks: the server's version)."""
        return self._str("version")

    def get_user_id(self) -> str | None:
        """``user_id``."""
        return self._str("user_id")

    def get_password(self) -> str | None:
        """``pw``."""
        return self._str("pw")

    def get_expiration(self) -> str | None:
        """``e``."""
        return self._str("e")

    def __repr__(self) -> str:
        try:
            hdr = self.header
        except Exception:  # pragma: no cover - repr of a broken payload
            return f"Message(<unparsable {len(self.payload_bytes)} bytes>)"
        data = self.data
        shown = data[:80] + (b"..." if len(data) > 80 else b"")
        return f"Message({hdr!r}, data={shown!r})"

    def __copy__(self) -> Message:
        # the same class: a delivered message's copy still acks through its client
        hdr = self.parsed_header
        copy = type(self)(
            self.payload_bytes,
            header=None if hdr is None else type(hdr)(hdr),
            data=self.parsed_data,
            sub_id=self.routed_sub_id,
        )
        copy.body_start = self.body_start
        copy.seen_bookmark = self.seen_bookmark
        return copy

    def __deepcopy__(self, memo: dict[int, Any]) -> Message:
        return self.__copy__()


from .message_api import install_official_api  # noqa: E402 - needs Message defined

install_official_api(Message, Options, AckType)


def split_sow_batch(payload: bytes) -> tuple[Header, list[Message]]:
    """Split a ``sow`` batch frame into its records (``shared/protocol.md`` §4.4).

    Each record is a record header carrying ``l`` (data length) followed by that many bytes.
    Outer-header fields apply to every record; record-header fields override them.

    Returns:
        The outer header and one :class:`Message` per record (command ``sow``).
    """
    outer, pos = decode_header(payload)
    size = len(payload)
    records: list[Message] = []
    while pos < size:
        rh, rend = decode_header(payload, pos)
        try:
            n = int(rh.get("l", 0))
        except (TypeError, ValueError):
            from ..exceptions import MalformedFrameError

            raise MalformedFrameError("sow record header with a non-integer l") from None
        hdr = dict(outer)
        hdr.pop("bs", None)
        hdr.pop("l", None)
        hdr.update(rh)
        records.append(Message(header=hdr, data=payload[rend : rend + n]))
        pos = rend + n
    return outer, records
