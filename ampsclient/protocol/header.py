"""The AMPS header codec: a flat, compact, JSON-like object that precedes the body.

Writer rules (what both official clients accept, see ``shared/protocol.md`` §1.1, §12):

* no whitespace anywhere, canonical short keys only;
* ``int`` values are written bare, everything else as a quoted string (only ``"`` and ``\\``
  escaped; control characters and UTF-8 left raw, as the official Python client does);
* ``s`` is never the last key (the JS client reads it with ``"s":(\\d+),``).

Reader rules (lenient): raw control characters in strings, bare values, whitespace, JSON
escapes, and the aliases ``bookmark``/``bm``, ``batch_size``/``bs``, ``f``/``filter``,
``publish``/``p`` and the long key names. Decoded headers use canonical keys; values are
``str`` for quoted strings and the JSON value for bare tokens (``int`` mostly).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from ..exceptions import LocalProtocolError, MalformedFrameError

__all__ = [
    "KEY_ALIASES",
    "Header",
    "decode_header",
    "encode_header",
    "encode_text",
    "escape",
    "unencodable",
]

Header = dict[str, Any]
"""A decoded header: canonical key -> value."""

KEY_ALIASES: Final[Mapping[str, str]] = {
    "bookmark": "bm",
    "batch_size": "bs",
    "f": "filter",
    "cmd_id": "cid",
    "command_id": "cid",
    "command": "c",
    "topic": "t",
    "ack_type": "a",
    "seq": "s",
    "sequence": "s",
    "opts": "o",
    "options": "o",
    "expiration": "e",
    "correlation_id": "x",
    "sow_key": "k",
    "timestamp": "ts",
    "message_length": "l",
    "lease_period": "lp",
    "subscription_id": "sub_id",
    "subscription_ids": "sids",
}
"""Long or alternative key names the reader maps to the canonical short key."""

_COMMAND_ALIASES: Final[Mapping[str, str]] = {"publish": "p"}

_decoder = json.JSONDecoder(strict=False)
_raw_decode = _decoder.raw_decode
_PROBE: Final = 512


def escape(value: str) -> str:
    """Escape a string for a header value (only ``\\`` and ``"``, like the official clients)."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if '"' in value:
        value = value.replace('"', '\\"')
    return value


def unencodable(what: str, exc: UnicodeEncodeError) -> LocalProtocolError:
    """The :class:`LocalProtocolError` for text we were asked to send that UTF-8 cannot
    encode (a lone surrogate, ``'\\ud800'``): ``what`` names the field."""
    bad = exc.object[exc.start : exc.end]
    return LocalProtocolError(
        f"{what} cannot be sent: {bad!r} at position {exc.start} is not encodable as UTF-8 "
        f"({exc.reason}); AMPS headers and text payloads are UTF-8"
    )


def encode_text(text: str, what: str) -> bytes:
    """``text`` in UTF-8, or a :class:`LocalProtocolError` naming ``what`` (nothing sent)."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise unencodable(what, exc) from exc


def encode_header(fields: Mapping[str, Any]) -> bytes:
    """Encode a header.

    Args:
        fields: canonical key -> value; ``None`` values are skipped, ``int`` written bare,
            ``bool`` as ``true``/``false``, anything else quoted via ``str()``.

    Returns:
        The compact header bytes, ``s`` moved off the last position if needed.

    Raises:
        LocalProtocolError: a value (or key) that UTF-8 cannot encode; the message names
            the field.
    """
    parts: list[str] = []
    seq_part: str | None = None
    for key, value in fields.items():
        if value is None:
            continue
        if value is True or value is False:
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = '"' + escape(str(value)) + '"'
        part = '"' + key + '":' + text
        if key == "s":
            seq_part = part
            continue
        parts.append(part)
    if seq_part is not None:
        # never last: right after the first key (normally "c")
        parts.insert(1 if len(parts) > 1 else 0, seq_part)
    try:
        return ("{" + ",".join(parts) + "}").encode()
    except UnicodeEncodeError as exc:
        raise _unencodable_field(fields, exc) from exc


def _unencodable_field(fields: Mapping[str, Any], exc: UnicodeEncodeError) -> LocalProtocolError:
    for key, value in fields.items():
        for text in (key, value):
            if isinstance(text, str):
                try:
                    text.encode()
                except UnicodeEncodeError as inner:
                    return unencodable(f"header field {key!r}", inner)
    return unencodable("the header", exc)


def _fix_text(value: str) -> str:
    # The header was decoded as latin-1 (one char per byte, so offsets are byte offsets);
    # non-ASCII strings are re-read as UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return value


_BARE: Final[Mapping[str, Any]] = {"true": True, "false": False, "null": None}


def _decode_simple(
    payload: bytes | bytearray | memoryview, start: int
) -> tuple[Header, int] | None:
    """The fast path for the compact headers clients and servers actually send.

    Applies when the header has no backslash and no whitespace: then the first ``}`` with an
    even number of quotes before it closes the header, and splitting on ``"`` yields
    key/value tokens. Anything unexpected returns ``None`` (the general JSON path decides).
    """
    if type(payload) is not bytes or payload[start : start + 2] != b'{"':
        return None
    end = payload.find(b"}", start)
    while end > 0 and payload.count(b'"', start, end) % 2:
        end = payload.find(b"}", end + 1)
    if end < 0 or payload.find(b"\\", start, end) >= 0:
        return None
    try:
        text = payload[start + 1 : end].decode()
    except UnicodeDecodeError:
        return None
    parts = text.split('"')
    n = len(parts)
    header: Header = {}
    aliases = KEY_ALIASES
    i = 1
    while i < n:
        if i + 1 >= n:
            return None
        key = parts[i]
        sep = parts[i + 1]
        if sep == ":":
            if i + 3 >= n:
                return None
            value: Any = parts[i + 2]
            tail = parts[i + 3]
            if tail != "," and not (tail == "" and i + 4 == n):
                return None
            i += 4
        else:
            if sep[:1] != ":":
                return None
            token = sep[1:]
            last = i + 2 == n
            if not last:
                if token[-1:] != ",":
                    return None
                token = token[:-1]
            elif token[-1:] == ",":
                return None
            if token.isdigit():
                value = int(token)
            elif token in _BARE:
                value = _BARE[token]
            else:
                try:
                    value = json.loads(token)
                except ValueError:
                    return None
                if isinstance(value, (dict, list, str)):
                    return None
            i += 2
        header[aliases.get(key, key)] = value
    if parts[0] != "":
        return None
    c = header.get("c")
    if c is not None and c in _COMMAND_ALIASES:
        header["c"] = _COMMAND_ALIASES[c]
    return header, end + 1


def decode_header(payload: bytes | bytearray | memoryview, start: int = 0) -> tuple[Header, int]:
    """Decode the header that starts at ``payload[start]``.

    Returns:
        ``(header, end)`` where ``end`` is the offset of the first body byte.

    Raises:
        MalformedFrameError: the bytes are not a flat header object.
    """
    fast = _decode_simple(payload, start)
    if fast is not None:
        return fast
    size = len(payload)
    stop = min(size, start + _PROBE)
    while True:
        text = bytes(payload[start:stop]).decode("latin-1")
        try:
            obj, end = _raw_decode(text)
            break
        except json.JSONDecodeError as exc:
            if stop >= size:
                raise MalformedFrameError(f"malformed header: {exc.msg} at {exc.pos}") from None
            stop = min(size, start + (stop - start) * 4)
        except RecursionError:
            raise MalformedFrameError("malformed header: nested too deeply") from None
    if not isinstance(obj, dict):
        raise MalformedFrameError("malformed header: not an object")
    header: Header = {}
    for key, value in obj.items():
        if isinstance(value, str):
            if not value.isascii():
                value = _fix_text(value)
        elif isinstance(value, (dict, list)):
            raise MalformedFrameError(f"malformed header: nested value for key {key!r}")
        if not key.isascii():
            key = _fix_text(key)
        header[KEY_ALIASES.get(key, key)] = value
    c = header.get("c")
    if c is not None and c in _COMMAND_ALIASES:
        header["c"] = _COMMAND_ALIASES[c]
    return header, start + end
