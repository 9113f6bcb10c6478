"""The official AMPS Python client's module-level helpers, for ``import ampsclient as AMPS``.

* :class:`Reason`: the failure reason strings as constants.
* :class:`VersionInfo`: a version string and its numeric forms.
* ``ssl_init``, ``ssl_get_context``, ``ssl_set_verify``, ``ssl_load_verify_locations``: the
  process-wide TLS settings used by ``tcps://`` and ``wss://`` connections made without an
  ``ssl_context`` of their own.
* :class:`FIXBuilder`, :class:`FIXShredder`, :class:`NVFIXBuilder`, :class:`NVFIXShredder`:
  FIX and NV-FIX payloads.
* :class:`CompositeMessageBuilder`, :class:`CompositeMessageParser`: composite payloads
  (each part preceded by its 4-byte big-endian length).
* :class:`CMessageHandler`: a native handler cannot run in a pure-Python client; it refuses.

The Pythonic spelling of the TLS settings is an ``ssl_context`` argument
(:func:`ampsclient.tls.client_context`).
"""

from __future__ import annotations

import os
import ssl
import struct
from typing import Any, ClassVar

from .exceptions import UsageError

__all__ = [
    "VERSION",
    "CMessageHandler",
    "CompositeMessageBuilder",
    "CompositeMessageParser",
    "FIXBuilder",
    "FIXShredder",
    "NVFIXBuilder",
    "NVFIXShredder",
    "Reason",
    "Store",
    "VersionInfo",
    "default_ssl_context",
    "ssl_get_context",
    "ssl_init",
    "ssl_load_verify_locations",
    "ssl_set_verify",
    "version_to_number",
]

VERSION = "0.1.0"
"""This package's version (the official module's ``VERSION`` is its own build string)."""


class Reason:
    """The AMPS failure reason strings (``ack.get_reason()``), as the official constants."""

    AuthDisabled: ClassVar[str] = "authentication disabled"
    AuthFailure: ClassVar[str] = "authentication failure"
    BadFilter: ClassVar[str] = "bad filter"
    BadRegexTopic: ClassVar[str] = "bad regex topic"
    Duplicate: ClassVar[str] = "duplicate"
    NameInUse: ClassVar[str] = "name in use"
    NoTopic: ClassVar[str] = "no topic"
    NotEntitled: ClassVar[str] = "not entitled"
    SubscriptionAlreadyExists: ClassVar[str] = "subscription already exists"


def version_to_number(version: str, *, widths: tuple[int, ...] = (2, 2, 2, 2)) -> int:
    """A dotted version as one number, each part given ``widths[i]`` decimal digits.

    A part too large for its width is capped at all nines; missing parts count as 0; a
    part that is not a number (``"default"``, ``"develop"``) gives the largest number.
    """
    parts = version.split(".")
    number = 0
    for i, width in enumerate(widths):
        cap = 10**width - 1
        text = parts[i] if i < len(parts) else "0"
        value = int(text) if text.isdigit() else cap
        number = number * 10**width + min(value, cap)
    return number


class VersionInfo:
    """A version string (a server's, from its logon ack) and its numeric forms."""

    def __init__(self, version: str = "default") -> None:
        self._version = version

    def set_version(self, version: str) -> None:
        """Represent ``version`` from now on."""
        self._version = version

    def get_version_string(self) -> str:
        """The version string."""
        return self._version

    def get_version_number(self) -> int:
        """Four digits for major and minor, five for maintenance and patch."""
        return version_to_number(self._version, widths=(4, 4, 5, 5))

    def get_old_style_version(self) -> int:
        """Two digits per part (capped at 99), as ``Client.get_server_version()``."""
        return version_to_number(self._version)

    def __repr__(self) -> str:
        return f"VersionInfo({self._version!r})"


# ------------------------------------------------------------------------------ TLS defaults

_ssl: dict[str, Any] = {"context": None, "verify": False, "cafile": None, "capath": None}


def ssl_init(
    dllpath: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    strict_ciphers_only: bool = False,
) -> None:
    """Set the process-wide TLS context of connections made without an ``ssl_context``.

    Args:
        dllpath: refused: Python's :mod:`ssl` is the TLS library; pass ``ssl_context``.
        ssl_context: the context to use (default: one built from :func:`ssl_set_verify` and
            :func:`ssl_load_verify_locations`).
        strict_ciphers_only: keep Python's default (strict) cipher list; ``False`` also
            allows OpenSSL's wider default list, as the official client does.
    """
    if dllpath is not None:
        raise UsageError(
            "ssl_init(dllpath) loads an OpenSSL library into the official C++ client; "
            "ampsclient uses Python's ssl module: call ssl_init(ssl_context=...) or pass "
            "ssl_context to the Client (see ampsclient.tls.client_context)"
        )
    if ssl_context is None:
        ssl_context = _build_context()
        if not strict_ciphers_only:
            ssl_context.set_ciphers("DEFAULT")
    _ssl["context"] = ssl_context


def _build_context() -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=_ssl["cafile"], capath=_ssl["capath"])
    if not _ssl["verify"]:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def ssl_get_context() -> ssl.SSLContext | None:
    """The context set by :func:`ssl_init` (``None`` before it)."""
    ctx: ssl.SSLContext | None = _ssl["context"]
    return ctx


def ssl_set_verify(enabled: bool) -> None:
    """Verify servers' certificates (off by default, as in the official client).

    Applies to the context :func:`ssl_init` builds (and rebuilds it if already built).
    """
    _ssl["verify"] = bool(enabled)
    if _ssl["context"] is not None:
        ssl_init()


def ssl_load_verify_locations(ca_file: str | None = None, ca_path: str | None = None) -> None:
    """Trust the CAs in ``ca_file`` (PEM) and/or ``ca_path`` (a hashed directory)."""
    if ca_file is not None and not os.path.exists(ca_file):
        raise UsageError(f"ssl_load_verify_locations: no such file {ca_file!r}")
    _ssl["cafile"] = ca_file
    _ssl["capath"] = ca_path
    ctx: ssl.SSLContext | None = _ssl["context"]
    if ctx is not None:
        ctx.load_verify_locations(cafile=ca_file, capath=ca_path)


def default_ssl_context() -> ssl.SSLContext | None:
    """The process-wide context from :func:`ssl_init`, if any (used by ``connect``)."""
    return ssl_get_context()


# ---------------------------------------------------------------------------- FIX payloads


def _sep(separator: bytes | str) -> str:
    text = separator.decode() if isinstance(separator, bytes) else separator
    if len(text) != 1:
        raise UsageError("the FIX separator must be one character")
    return text


class _FieldBuilder:
    _parts: list[str]

    def __init__(self, separator: bytes | str = "\x01") -> None:
        self._sep = _sep(separator)
        self._parts = []

    def _append(self, tag: Any, value: str, offset: int, length: int | None) -> None:
        if length is not None:
            value = value[offset : offset + length]
        self._parts.append(f"{tag}={value}{self._sep}")

    def get_string(self) -> str:
        """The message built so far."""
        return "".join(self._parts)

    def reset(self) -> None:
        """Start a new message."""
        self._parts.clear()


class FIXBuilder(_FieldBuilder):
    """Builds a FIX message: ``tag=value`` fields ended by the separator (default SOH)."""

    def append(self, tag: int, value: str, offset: int = 0, length: int | None = None) -> None:
        """Append ``tag=value`` (``value[offset:offset+length]`` when ``length`` is given)."""
        if not isinstance(tag, int):
            raise TypeError("a FIX tag is an int")
        self._append(tag, value, offset, length)


class NVFIXBuilder(_FieldBuilder):
    """Builds an NV-FIX message: like FIX, with string tags."""

    def append(self, tag: str, value: str, offset: int = 0, length: int | None = None) -> None:
        """Append ``tag=value`` (``value[offset:offset+length]`` when ``length`` is given)."""
        self._append(tag, value, offset, length)


class _Shredder:
    def __init__(self, separator: bytes | str = "\x01") -> None:
        self._sep = _sep(separator)

    def _fields(self, message: str | bytes) -> list[tuple[str, str]]:
        text = message.decode() if isinstance(message, bytes) else message
        out = []
        for field in text.split(self._sep):
            if field:
                tag, _, value = field.partition("=")
                out.append((tag, value))
        return out


class FIXShredder(_Shredder):
    """Parses a FIX message into ``{int tag: value}``."""

    def to_map(self, message: str | bytes) -> dict[int, str]:
        """The fields of ``message``."""
        return {int(tag): value for tag, value in self._fields(message)}


class NVFIXShredder(_Shredder):
    """Parses an NV-FIX message into ``{tag: value}``."""

    def to_map(self, message: str | bytes) -> dict[str, str]:
        """The fields of ``message``."""
        return dict(self._fields(message))


# ----------------------------------------------------------------------- composite payloads

_LEN = struct.Struct(">I")


class CompositeMessageBuilder:
    """Builds a composite payload: each part preceded by its 4-byte big-endian length."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def append(self, value: str | bytes) -> CompositeMessageBuilder:
        """Add a part."""
        data = value.encode() if isinstance(value, str) else bytes(value)
        self._buf += _LEN.pack(len(data))
        self._buf += data
        return self

    def clear(self) -> None:
        """Remove every part."""
        self._buf.clear()

    def get_data(self) -> bytes:
        """The composite payload."""
        return bytes(self._buf)


class CompositeMessageParser:
    """Splits a composite payload (or a message carrying one) into its parts."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def parse(self, data: Any) -> int:
        """Parse a payload (``bytes``/``str``) or a :class:`Message`; the number of parts."""
        if hasattr(data, "get_data_raw"):
            data = data.get_data_raw()
        raw = data.encode() if isinstance(data, str) else bytes(data)
        parts: list[bytes] = []
        pos = 0
        while pos + 4 <= len(raw):
            (n,) = _LEN.unpack_from(raw, pos)
            if pos + 4 + n > len(raw):
                break
            parts.append(raw[pos + 4 : pos + 4 + n])
            pos += 4 + n
        self._parts = parts
        return len(parts)

    def size(self) -> int:
        """How many parts the last :meth:`parse` found."""
        return len(self._parts)

    def get_part(self, index: int) -> str | None:
        """Part ``index`` as text, or ``None``."""
        raw = self.get_part_raw(index)
        return None if raw is None else raw.decode("utf-8", "replace")

    def get_part_raw(self, index: int) -> bytes | None:
        """Part ``index`` as bytes, or ``None``."""
        if 0 <= index < len(self._parts):
            return self._parts[index]
        return None


class Store:
    """The official client's common base of its native stores (no members of its own)."""


class CMessageHandler:
    """Refused: a native (C/C++) handler cannot run in a pure-Python client.

    Pass a Python callable as the handler; for speed, use ``AsyncClient`` or a
    ``MessageStream`` (see ``docs/migration.md``).
    """

    def __init__(self, function: Any = None, userdata: Any = None) -> None:
        raise UsageError(
            "CMessageHandler wraps a native C/C++ function, which ampsclient (pure Python) "
            "cannot call: pass a Python callable as the message handler instead"
        )
