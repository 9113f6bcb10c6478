"""Conversions of values the connection sends or reports (no I/O)."""

from __future__ import annotations

import json
from typing import Any

from ..exceptions import LocalProtocolError
from ..protocol.header import encode_text

__all__ = ["encode_data", "version_number"]


def encode_data(data: Any, message_type: str) -> bytes:
    """``data`` as bytes: bytes as they are, ``str`` in UTF-8, other objects in the
    connection's message type (msgpack for ``msgpack``, else JSON).

    Raises:
        LocalProtocolError: a ``str`` UTF-8 cannot encode, or an object the message type
            cannot encode (``TypeError``/``ValueError`` of ``json``/``msgpack``, chained).
    """
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return encode_text(data, "the data")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    try:
        if message_type == "msgpack":
            import msgpack

            return msgpack.packb(data, use_bin_type=True)  # type: ignore[no-any-return]
        return json.dumps(data, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        kind = "msgpack" if message_type == "msgpack" else "JSON"
        raise LocalProtocolError(
            f"the data ({type(data).__name__}) cannot be encoded as {kind}: {exc}"
        ) from exc


def version_number(version: str | None) -> int:
    """A server version as the official client reports it (a·10⁶+b·10⁴+c·10²+d; the digits
    of each dotted part); 99999999 when unknown."""
    if not version:
        return 99999999
    nums = []
    for part in version.split(".")[:4]:
        digits = "".join(ch for ch in part if ch.isdigit())
        nums.append(int(digits) if digits else 0)
    while len(nums) < 4:
        nums.append(0)
    return nums[0] * 1_000_000 + nums[1] * 10_000 + nums[2] * 100 + nums[3]
