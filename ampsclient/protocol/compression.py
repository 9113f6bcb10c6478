"""``compression=zlib``: the deflate stream that carries a whole connection (no I/O here).

What the official AMPS clients put on the wire (observed, docs/protocol.md "Transport
compression"): from the very first byte, both directions are one raw DEFLATE stream (RFC 1951,
no zlib header or checksum), and every write ends with a sync flush (``00 00 ff ff``) so the
peer can inflate everything sent so far. There is no negotiation: a transport must be set to
accept compressed connections.
"""

from __future__ import annotations

import zlib
from typing import Final

from ..exceptions import CompressionError

__all__ = ["ZLIB", "ZlibStream", "looks_compressed"]

ZLIB: Final = "zlib"
_WBITS: Final = -15  # raw deflate: what the official client sends and accepts


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
