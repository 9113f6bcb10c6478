"""Connection URIs: ``tcp://[user[:password]@]host:port/amps/<message type>[?options]``.

``ws://`` takes the same form. The message type (``json``, ``msgpack``, ``binary``...) is the
last path segment and is sent in the logon as ``mt``.

``unix://host:port/amps/json?path=/run/amps.sock`` reaches a Unix domain socket, as AMPS'
clients spell it: host and port must be present to form a valid URI but are ignored, the
socket file is the ``path`` option (by convention ``localhost:0``).  ``compression=zlib``
compresses the connection: on tcp/tcps one deflate stream, on ws/wss permessage-deflate
(see docs/protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .exceptions import InvalidURIError

__all__ = ["URI", "parse_uri", "redact"]

_SCHEMES = ("tcp", "ws", "tcps", "wss", "unix", "memory")
_COMPRESSIONS = ("zlib",)


@dataclass(frozen=True, slots=True)
class URI:
    """A parsed connection URI."""

    scheme: str
    host: str
    port: int
    protocol: str = "amps"
    message_type: str = "json"
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    options: dict[str, str] = field(default_factory=dict)
    path: str = "/amps/json"

    @property
    def websocket(self) -> bool:
        """``True`` for ``ws://`` and ``wss://``."""
        return self.scheme in ("ws", "wss")

    @property
    def tls(self) -> bool:
        """``True`` for ``tcps://`` and ``wss://``."""
        return self.scheme in ("tcps", "wss")

    @property
    def unix_path(self) -> str | None:
        """The socket file of a ``unix://`` URI (its ``path`` option), else ``None``."""
        return self.options["path"] if self.scheme == "unix" else None

    @property
    def compression(self) -> str | None:
        """``"zlib"`` when the URI asks for ``compression=zlib``, else ``None``."""
        return self.options.get("compression")

    def redacted(self) -> str:
        """The URI without credentials, safe to log."""
        if self.scheme == "unix":
            return f"unix://{self.host}:{self.port}{self.path}?path={self.options['path']}"
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    def __str__(self) -> str:
        return self.redacted()


def redact(text: str) -> str:
    """``text`` without its ``user:password@`` part, safe to log; any string, valid or not."""
    if "@" in text and "://" in text:
        scheme, rest = text.split("://", 1)
        return scheme + "://" + rest.split("@", 1)[1]
    return text


def parse_uri(text: str) -> URI:
    """Parse a connection URI.

    Raises:
        InvalidURIError: unknown scheme, missing host or port, or no ``/amps/<type>`` path.
    """
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidURIError(f"invalid URI: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise InvalidURIError(
            f"unsupported URI scheme {parts.scheme!r} (use tcp://, tcps://, ws://, wss:// or unix://)"
        )
    if scheme == "memory" and port is None:
        port = 0
    if not parts.hostname or port is None:
        raise InvalidURIError("the URI must name a host and a port")
    segments = [s for s in parts.path.split("/") if s]
    if not segments:
        raise InvalidURIError("the URI path must be /amps/<message type>")
    protocol = segments[0].lower()
    if protocol != "amps":
        raise InvalidURIError(f"unsupported protocol {segments[0]!r} (only 'amps')")
    message_type = segments[1].lower() if len(segments) > 1 else "json"
    options = dict(parse_qsl(parts.query))
    _check_options(scheme, options)
    return URI(
        scheme=scheme,
        host=parts.hostname,
        port=port,
        protocol=protocol,
        message_type=message_type,
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        options=options,
        path="/" + "/".join(segments),
    )


def _check_options(scheme: str, options: dict[str, str]) -> None:
    """``path`` for unix://, ``compression`` a known algorithm on a transport that has it."""
    if scheme == "unix" and not options.get("path"):
        raise InvalidURIError(
            "a unix:// URI needs the socket file in its path option "
            "(unix://localhost:0/amps/json?path=/run/amps.sock)"
        )
    compression = options.get("compression")
    if compression is None:
        return
    if compression.lower() not in _COMPRESSIONS:
        raise InvalidURIError(
            f"unsupported compression {compression!r} (AMPS clients support compression=zlib)"
        )
    options["compression"] = compression.lower()
    if scheme in ("unix", "memory"):
        raise InvalidURIError(f"compression is not supported on {scheme}:// connections")
