"""The publish frame: one pure encoder for every publish the client sends.

A publish is the client's most frequent frame, and every path that sends one spells it here:
:meth:`ClientCore.publish <ampsclient.core.connection.ClientCore.publish>` (the sans-I/O
core), the plain client's writer (:meth:`ampsclient.writer.FrameWriter.publish`), the HA
client (:meth:`ampsclient.ha.client.AsyncHAClient.publish`, through its publish store) and
the C speedups' two publish lanes (their ``publish_frame``, the twin of :func:`publish_frame`).

A payload is ``head`` + the sequence number in decimal (only for a stored publish) + ``tail``
+ the data. :func:`publish_header` returns ``(head, tail)``: for a stored publish, ``head``
ends at ``"s":`` so that a publish store splices in the sequence it allocates
(:func:`ampsclient.stores.publish.base.join_seq`: ``head + b"%d" % sequence + tail + data``);
otherwise ``head`` is the whole header and ``tail`` is empty. The hot paths cache the pair per
topic. The header is what the official Python client sends (docs: ``/work/shared/protocol.md``
§4.1): ``{"c":"p","t":"T"}`` for a plain publish, with ``"e"`` (quoted seconds), ``"x"``
(correlation id) and ``"k"`` (SOW key) after the topic when given; a stored publish carries
``"s"`` as a bare integer, then ``"a":"persisted"``; ``delta_publish`` is spelled in full.
On TCP a frame is a 4-byte big-endian length and the payload; the WebSocket transport sends
the payload as one binary message (``ampsclient.transport.ws.ws_messages``).

No I/O, no state: values in, bytes out.
"""

from __future__ import annotations

import struct
from typing import Final

from ..exceptions import UsageError
from ..protocol.header import encode_text, escape

__all__ = [
    "PUBLISH_COMMANDS",
    "encode_publish",
    "publish_frame",
    "publish_header",
]

PUBLISH_COMMANDS: Final = {"p": b"p", "publish": b"p", "delta_publish": b"delta_publish"}
"""The publish commands the encoder spells, by the names a caller may give, -> ``c``
(``publish`` is sent as ``p``, as the official Python client sends it)."""

_pack_len = struct.Struct(">I").pack


def publish_header(
    command: str,
    topic: str,
    *,
    sequenced: bool = False,
    ack_type: str | None = None,
    expiration: int | None = None,
    correlation_id: str | None = None,
    sow_key: str | None = None,
) -> tuple[bytes, bytes]:
    """The header of a publish as ``(head, tail)``.

    Args:
        command: ``"p"``/``"publish"`` or ``"delta_publish"``.
        topic: ``t``.
        sequenced: a stored publish: ``head`` ends with ``"s":`` and the caller puts the
            sequence number between ``head`` and ``tail``; else ``head`` is the whole header
            and ``tail`` is ``b""``.
        ack_type: ``a`` (a stored publish asks for ``"persisted"``), after ``s``.
        expiration: ``e``, in seconds (sent quoted).
        correlation_id: ``x``.
        sow_key: ``k``.

    Raises:
        UsageError: ``command`` is not a publish command.
        LocalProtocolError: text UTF-8 cannot encode (the message names the field).
    """
    c = PUBLISH_COMMANDS.get(command)
    if c is None:
        raise UsageError(f"not a publish command: {command!r}")
    fields = b',"t":"' + encode_text(escape(topic), "the topic") + b'"'
    if expiration is not None:
        fields += b',"e":"' + encode_text(escape(str(expiration)), "the expiration") + b'"'
    if correlation_id is not None:
        fields += b',"x":"' + encode_text(escape(correlation_id), "the correlation id") + b'"'
    if sow_key is not None:
        fields += b',"k":"' + encode_text(escape(sow_key), "the SOW key") + b'"'
    if ack_type is not None:
        fields = b',"a":"' + encode_text(escape(ack_type), "the ack type") + b'"' + fields
    if sequenced:
        return b'{"c":"' + c + b'","s":', fields + b"}"
    return b'{"c":"' + c + b'"' + fields + b"}", b""


def publish_frame(head: bytes, sequence: int | None, tail: bytes, data: bytes) -> bytes:
    """One publish as a TCP frame: the 4-byte big-endian length, then the payload ``head``,
    ``sequence`` in decimal (``None``: none), ``tail``, ``data``.

    The twin of the C speedups' ``publish_frame``, which the C publish lanes spell their
    frames with (``ampsclient._accel.TWINS``)."""
    payload = head + tail + data if sequence is None else head + b"%d" % sequence + tail + data
    return _pack_len(len(payload)) + payload


def encode_publish(
    command: str,
    topic: str,
    data: bytes,
    *,
    sequence: int | None = None,
    ack_type: str | None = None,
    expiration: int | None = None,
    correlation_id: str | None = None,
    sow_key: str | None = None,
) -> bytes:
    """One publish as a TCP frame (:func:`publish_header`, then :func:`publish_frame`).

    Args:
        data: the body, already encoded (:func:`ampsclient.core.values.encode_data`
            encodes a ``str`` or an object in the connection's message type).
        sequence: the publish store's sequence number (``s``), or ``None``.

    The other arguments are :func:`publish_header`'s.
    """
    head, tail = publish_header(
        command,
        topic,
        sequenced=sequence is not None,
        ack_type=ack_type,
        expiration=expiration,
        correlation_id=correlation_id,
        sow_key=sow_key,
    )
    return publish_frame(head, sequence, tail, data)
