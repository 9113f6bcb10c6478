"""``compression=zlib``: the deflate stream that carries a whole connection (no I/O here).

What the official AMPS clients put on the wire (observed, docs/protocol.md "Transport
compression"): from the very first byte, both directions are one raw DEFLATE stream (RFC 1951,
no zlib header or checksum), and every write ends with a sync flush (``00 00 ff ff``) so the
peer can inflate everything sent so far. There is no negotiation: a transport must be set to
accept compressed connections.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Final

from ..exceptions import CompressionError

__all__ = ["INFLATE_CHUNK", "ZLIB", "ZlibStream", "looks_compressed"]

ZLIB: Final = "zlib"
_WBITS: Final = -15  # raw deflate: what the official client sends and accepts
INFLATE_CHUNK: Final = 256 * 1024
"""The most :meth:`ZlibStream.inflate` hands over at once."""


class ZlibStream:
    """The deflater of one direction and the inflater of the other, for one connection."""

    __slots__ = ("_deflate", "_flush", "_inflate")

    def __init__(self, *, level: int = zlib.Z_DEFAULT_COMPRESSION) -> None:
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, _WBITS)
        self._inflate = zlib.decompressobj(_WBITS)
        self._flush = zlib.Z_SYNC_FLUSH

    def compress(self, data: bytes) -> bytes:
        """``data`` deflated and sync-flushed: the peer can inflate all of it at once."""
        return self._deflate.compress(data) + self._deflate.flush(self._flush)

    def inflate(self, data: bytes, chunk: int = INFLATE_CHUNK) -> Iterator[bytes]:
        """What ``data`` inflates to, ``chunk`` bytes at most at a time: a small input that
        inflates a thousandfold (a "zip bomb") is never held whole (the caller's framer
        refuses an oversized frame after its first chunk).

        Raises:
            CompressionError: as :meth:`decompress`.
        """
        inflater = self._inflate
        pending = data
        while True:
            try:
                out = inflater.decompress(pending, chunk)
            except zlib.error as exc:
                raise CompressionError(
                    f"invalid compressed data (compression=zlib): {exc}"
                ) from None
            if inflater.eof:
                raise CompressionError("the compressed stream ended (compression=zlib)")
            if out:
                yield out
            pending = inflater.unconsumed_tail
            if not pending:
                return

    def decompress(self, data: bytes) -> bytes:
        """The bytes ``data`` inflates to (possibly none yet).

        Raises:
            CompressionError: ``data`` is not the continuation of a raw deflate stream, or the
                stream ended (a compressed AMPS connection never ends its stream).
        """
        try:
            out = self._inflate.decompress(data)
        except zlib.error as exc:
            raise CompressionError(f"invalid compressed data (compression=zlib): {exc}") from None
        if self._inflate.eof:
            raise CompressionError("the compressed stream ended (compression=zlib)")
        return out


def looks_compressed(data: bytes) -> bool:
    """Whether the first bytes of a connection are a compression=zlib stream rather than
    AMPS frames: a frame's 4-byte big-endian length starts with a zero byte (frames are
    under 16 MiB), and the bytes inflate to what starts a frame (a length, then ``{``)."""
    if not data or data[0] == 0:
        return False
    try:
        head = zlib.decompressobj(_WBITS).decompress(data, 64)
    except zlib.error:
        return False
    return len(head) >= 5 and head[0] == 0
