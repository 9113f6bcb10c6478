"""The replication link's wire format: AMPS-style framing, compact headers, msgpack bodies.

A frame is what a client frame is (``shared/protocol.md`` §1): a 4-byte big-endian length,
then a compact header object, then an optional body. On the replication link the body,
when present, is one msgpack value. The header's ``c`` names the frame:

==============  ===========  ============================================================
``c``           direction    meaning
==============  ===========  ============================================================
``rhello``      dialer       ``name``, ``group``, ``addr`` (its replication listener),
                             ``role`` (``replication`` or ``admin``), ``nonce``, ``v``
``rchallenge``  listener     ``name``, ``group``, ``addr``, ``nonce``, ``proof``
``rauth``       dialer       ``proof``
``rlogon``      both         ``user``, ``pw``: the sender's logon to the other side's
                             ``amps-replication`` transport (dialer first; the listener
                             logs on in turn once it accepted the dialer's, unless the
                             dialer is the admin client)
``rlogonack``   both         ``status`` ``success`` or ``retry`` (``pw``: the challenge);
                             the listener refuses a logon with ``rreject`` ``auth
                             failure``, the dialer with ``failure`` (``reason``): the
                             link then carries the dialer's streams only
``rconfig``     both         body: the instance's replication summary (for validation)
``rready``      both         validation passed on this side
``rreject``     both         ``reason``; body: the list of problems found (may be empty)
``ropen``       upstream     ``d`` (the upstream's destination name), ``sync``, ``z``
                             (the stream's compression, when compressed)
``rhave``       downstream   ``d``; body: ``{publisher id: highest sequence}``
``rrec``        upstream     ``d``; body: a list of records (see :func:`pack_records`);
                             with ``z``: the list compressed (see :class:`RecordCompressor`);
                             with ``b``, ``n``, ``rp``: ``n`` journal records from upstream
                             index ``b`` as the journal wrote them, each with path ``rp``
                             (see :mod:`.blocks`)
``rack``        downstream   ``d``, ``u``: every record of stream ``d`` up to upstream
                             index ``u`` is durable downstream
``rhb``         both         heartbeat
``radmin``      admin        ``cmd``; body: arguments
``rresult``     listener     ``ok``; body: the result (or ``error`` in the header)
``rqxfer``      both         replicated queues: ``q`` (queue), ``mt``; body: bookmarks whose
                             transfer the sender asks of their owner (granted by a journaled
                             record, see ``queues.replicated``; no reply frame); relayed
                             to an owner not linked with the sender: ``own``, ``rq``,
                             ``hops`` (``queues.transfer_relay``)
==============  ===========  ============================================================

Authentication has two layers. The shared secret (``<Secret>``, optional): each side proves
it knows it with an HMAC-SHA256 over the other side's random nonce, so the secret itself never
travels and a recorded handshake cannot be replayed. Then the AMPS logon: each side logs on to
the other with the credentials of its ``<Authenticator>``, checked by the receiving
instance's ``<Authentication>`` module (which may answer with a challenge, as for a client).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgpack

from ampsclient.protocol.header import Header, decode_header, encode_header

__all__ = [
    "COMPRESSIONS",
    "PROTOCOL_VERSION",
    "RecordCompressor",
    "RecordDecompressor",
    "WireRecord",
    "decode_frame",
    "encode_frame",
    "make_nonce",
    "pack_records",
    "proof",
    "unpack_records",
    "verify_proof",
]

PROTOCOL_VERSION: Final = 3
"""2: the ``rlogon`` step; ``z`` (compressed ``rrec`` bodies). 3: ``rrec`` journal blocks
(``b``/``n``/``rp``) and the queue-transfer request ``rqxfer``: a peer of an older version is
refused at the handshake instead of failing on a frame it does not know."""

_LEN: Final = struct.Struct(">I")

WireRecord = tuple[int, int, int, str, str, bytes, dict[str, str | int]]
"""``(upstream index, publisher id, sequence, command, topic, payload, fields)``."""


def encode_frame(fields: Mapping[str, Any], body: Any = None) -> bytes:
    """One length-prefixed frame: the header ``fields`` then, unless ``None``, ``body``."""
    payload = encode_header(fields)
    if body is not None:
        payload += msgpack.packb(body, use_bin_type=True)
    return _LEN.pack(len(payload)) + payload


def decode_frame(payload: bytes) -> tuple[Header, Any]:
    """Split a payload (without its length prefix) into ``(header, body or None)``.

    Raises:
        ValueError: the payload is not a header followed by at most one msgpack value.
    """
    header, end = decode_header(payload)
    if end >= len(payload):
        return header, None
    try:
        body = msgpack.unpackb(payload[end:], raw=False, strict_map_key=False)
    except Exception as exc:
        raise ValueError(f"bad replication frame body: {exc}") from exc
    return header, body


def pack_records(records: Sequence[WireRecord]) -> list[WireRecord]:
    """The body of an ``rrec`` frame: the records as msgpack arrays (tuples pack as arrays,
    so nothing is copied record by record)."""
    return list(records)


def unpack_records(body: Any) -> list[WireRecord]:
    """Parse an ``rrec`` body; raises ``ValueError`` on anything malformed."""
    if not isinstance(body, list):
        raise ValueError("rrec body must be a list")
    out: list[WireRecord] = []
    append = out.append
    for item in body:
        try:
            index, pid, seq, command, topic, payload, fields = item
        except (TypeError, ValueError):
            raise ValueError("rrec record must be a 7-item list") from None
        if not (
            type(index) is int
            and type(pid) is int
            and type(seq) is int
            and type(command) is str
            and type(topic) is str
            and type(payload) is bytes
            and type(fields) is dict
        ):
            raise ValueError("rrec record has a field of the wrong type")
        append((index, pid, seq, command, topic, payload, fields))
    return out


COMPRESSIONS: Final = ("zlib",)
"""Compression algorithms of a destination's stream (``<Compression>``)."""

_ZLIB_LEVEL: Final = 1
"""Fastest zlib level: on JSON order flow about 7.7x fewer bytes at half the CPU of level 6
(9.1x); see benchmarks/replication_compression_bench.py."""


class RecordCompressor:
    """Compresses the ``rrec`` bodies of one stream (one connection): a single zlib stream,
    flushed (``Z_SYNC_FLUSH``) at the end of every frame, so that each frame decodes as soon
    as it arrives and later frames reuse what earlier ones taught the compressor (repeated
    field names, topics, values)."""

    def __init__(self, algorithm: str) -> None:
        if algorithm not in COMPRESSIONS:
            raise ValueError(f"unsupported replication compression {algorithm!r}")
        self.algorithm = algorithm
        self._z = zlib.compressobj(_ZLIB_LEVEL)
        self.raw_bytes = 0
        """msgpack bytes given to the compressor."""
        self.compressed_bytes = 0
        """Bytes it produced."""

    def compress(self, records: Sequence[WireRecord]) -> bytes:
        """The compressed body of one ``rrec`` frame carrying ``records``."""
        raw = msgpack.packb(pack_records(records), use_bin_type=True)
        chunk = self._z.compress(raw) + self._z.flush(zlib.Z_SYNC_FLUSH)
        self.raw_bytes += len(raw)
        self.compressed_bytes += len(chunk)
        return chunk


class RecordDecompressor:
    """The receiving end of a :class:`RecordCompressor` (one per stream and connection).

    Args:
        algorithm: the ``z`` of the stream's frames.
        max_size: the largest decompressed body accepted (a frame that would inflate beyond it
            is refused, so a small frame cannot exhaust memory).
    """

    def __init__(self, algorithm: str, *, max_size: int) -> None:
        if algorithm not in COMPRESSIONS:
            raise ValueError(f"unsupported replication compression {algorithm!r}")
        self.algorithm = algorithm
        self._z = zlib.decompressobj()
        self._max = max_size

    def records(self, chunk: Any) -> list[WireRecord]:
        """The records of one compressed ``rrec`` body.

        Raises:
            ValueError: not a compressed body of this stream, or too large once inflated.
        """
        if not isinstance(chunk, bytes):
            raise ValueError("compressed rrec body must be bytes")
        try:
            raw = self._z.decompress(chunk, self._max)
        except zlib.error as exc:
            raise ValueError(f"bad compressed rrec body: {exc}") from exc
        if self._z.unconsumed_tail:
            raise ValueError(f"compressed rrec body inflates beyond {self._max} bytes")
        try:
            body = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception as exc:
            raise ValueError(f"bad compressed rrec body: {exc}") from exc
        return unpack_records(body)


def make_nonce() -> str:
    """A fresh random challenge (hex)."""
    return os.urandom(16).hex()


def proof(secret: str, role: str, nonce: str, name: str) -> str:
    """HMAC-SHA256 of ``role|nonce|name`` under ``secret`` (hex)."""
    message = f"{role}|{nonce}|{name}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_proof(secret: str, role: str, nonce: str, name: str, given: object) -> bool:
    """Constant-time check of a peer's :func:`proof`."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(proof(secret, role, nonce, name), given)
