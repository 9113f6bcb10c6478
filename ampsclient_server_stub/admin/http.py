"""A small, strict HTTP/1.1 server core for the admin interface (stdlib asyncio only).

:func:`parse_head` is pure: it turns the bytes of a request head (request line and header
fields, up to the blank line) into a :class:`Request`, or raises :class:`HttpError` with the
status to answer (400 malformed, 405 is the router's, 413 body too large, 431 head too large,
501 transfer codings, 505 version). :func:`serve_connection` runs one connection: keep-alive,
bounded head and body sizes, a deadline for each request head and another for its body (a
client that sends half a request and stops, or trickles it byte by byte, is answered 408 and
closed), a deadline for each response to be taken by the client, and one :data:`Handler` call
per request. A :class:`Slot` tells the listener whether the connection is running a request
(``busy``) or only waiting for the client, so that a new connection can take the place of the
connection that has waited longest when every place is taken.

Nothing here touches the messaging ports: the admin listener is its own ``asyncio.Server``,
and every wait is bounded, so a hostile or slow HTTP client costs one idle coroutine.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import RequestError

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "Handler",
    "HttpError",
    "Request",
    "Response",
    "Slot",
    "parse_head",
    "serve_connection",
]

logger = logging.getLogger(__name__)

MAX_HEAD_BYTES: Final = 16 * 1024
"""Largest request head (request line plus header fields); larger is answered 431."""

MAX_BODY_BYTES: Final = 64 * 1024
"""Largest request body; a larger ``Content-Length`` is answered 413 without reading it."""

MAX_HEADER_FIELDS: Final = 100
"""Most header fields in one request (more: 431)."""

HEAD_TIMEOUT: Final = 10.0
"""Seconds a client has to send a whole request head once it started one."""

BODY_TIMEOUT: Final = 10.0
"""Seconds a client has to send a request's body once its head arrived."""

IDLE_TIMEOUT: Final = 30.0
"""Seconds an idle keep-alive connection (or a new one that sends nothing) is kept open."""

WRITE_TIMEOUT: Final = 10.0
"""Seconds a client has to take a response (a client that does not read is dropped)."""


@dataclass(slots=True)
class Slot:
    """The state of one admin connection, as the listener sees it.

    Attributes:
        busy: a request is being answered (the connection is not waiting for the client).
        since: event-loop time the connection started waiting for the client.
    """

    busy: bool = False
    since: float = 0.0


REASONS: Final[Mapping[int, str]] = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}

_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET: Final = re.compile(rb"/[\x21-\x7e]*")
_VERSION: Final = re.compile(rb"HTTP/(\d)\.(\d)")
_FIELD_VALUE: Final = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


class HttpError(RequestError):
    """A request the admin interface refuses, with the HTTP status to answer.

    Attributes:
        status: the HTTP status code (4xx or 5xx).
        reason: a one-line explanation, sent as the body.
        headers: extra response header fields (``Allow``, ``WWW-Authenticate``...).
    """

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.headers: dict[str, str] = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request.

    Attributes:
        method: ``GET``, ``POST``, ... (case-sensitive, as HTTP says).
        target: the request target as sent.
        path: the decoded path segments (``/amps/instance/clients`` ->
            ``("amps", "instance", "clients")``; empty segments dropped).
        query: the decoded query parameters.
        version: ``(1, 1)`` or ``(1, 0)``.
        headers: header fields, names lower-cased (repeated fields joined with ``", "``).
        body: the request body (``Content-Length`` bytes).
    """

    method: str
    target: str
    path: tuple[str, ...]
    query: Mapping[str, list[str]]
    version: tuple[int, int]
    headers: Mapping[str, str]
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        """Whether the client lets the connection stay open after the response."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version >= (1, 1):
            return "close" not in tokens
        return "keep-alive" in tokens

    @property
    def content_length(self) -> int:
        """The declared body length (0 without ``Content-Length``)."""
        return int(self.headers.get("content-length", "0") or 0)


@dataclass(slots=True)
class Response:
    """A response to send: status, content type, body and extra header fields."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self, *, head_only: bool = False, keep_alive: bool = True) -> bytes:
        """The bytes on the wire (``head_only``: the head of a ``HEAD`` response)."""
        lines = [f"HTTP/1.1 {self.status} {REASONS.get(self.status, 'Unknown')}"]
        fields = {
            "Content-Type": self.content_type,
            "Content-Length": str(len(self.body)),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Connection": "keep-alive" if keep_alive else "close",
        }
        fields.update(self.headers)
        lines += [f"{name}: {value}" for name, value in fields.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def error_response(exc: HttpError) -> Response:
    """The plain-text response of a refused request."""
    return Response(
        exc.status,
        (exc.reason + "\n").encode(),
        "text/plain; charset=utf-8",
        dict(exc.headers),
    )


def parse_head(head: bytes) -> Request:
    """Parse a request head (everything before the blank line, without it).

    Raises:
        HttpError: 400 for a malformed request line, header field or ``Content-Length``,
            or a missing ``Host`` in HTTP/1.1; 413 for a body above :data:`MAX_BODY_BYTES`;
            431 for too many fields; 501 for a ``Transfer-Encoding``; 505 for a version other
            than HTTP/1.0 or 1.1.
    """
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(400, "malformed method")
    match = _VERSION.fullmatch(version)
    if match is None:
        raise HttpError(400, "malformed HTTP version")
    if (int(match[1]), int(match[2])) not in ((1, 0), (1, 1)):
        raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are served")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "the request target must be an absolute path")
    if len(lines) - 1 > MAX_HEADER_FIELDS:
        raise HttpError(431, f"more than {MAX_HEADER_FIELDS} header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "malformed header field")
        value = value.strip(b" \t")
        if not _FIELD_VALUE.fullmatch(value):
            raise HttpError(400, "control characters in a header field")
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        if key in headers:
            if key == "content-length" and headers[key] != text:
                raise HttpError(400, "conflicting Content-Length fields")
            if key in ("content-length", "host", "authorization"):
                continue
            text = headers[key] + ", " + text
        headers[key] = text
    http_version = (int(match[1]), int(match[2]))
    if http_version == (1, 1) and "host" not in headers:
        raise HttpError(400, "HTTP/1.1 requests need a Host field")
    if "transfer-encoding" in headers:
        raise HttpError(501, "transfer codings are not supported; send a Content-Length")
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit() or len(length) > 18:
            raise HttpError(400, "malformed Content-Length")
        if int(length) > MAX_BODY_BYTES:
            raise HttpError(413, f"request body above {MAX_BODY_BYTES} bytes")
    raw_target = target.decode("ascii")
    split = urlsplit(raw_target)
    segments = tuple(unquote(s) for s in split.path.split("/") if s)
    return Request(
        method=method.decode("ascii"),
        target=raw_target,
        path=segments,
        query=parse_qs(split.query, keep_blank_values=True),
        version=http_version,
        headers=headers,
    )


Handler = Callable[[Request], Awaitable[Response]]
"""Answers one request (raise :class:`HttpError` to refuse it)."""


async def _read_request(
    reader: asyncio.StreamReader, idle: float, head_timeout: float, body_timeout: float
) -> Request | None:
    """The next request, or ``None`` when the client closed or stayed idle."""
    try:
        first = await asyncio.wait_for(reader.read(1), idle)
    except TimeoutError:
        return None
    if not first:
        return None
    if not first.isalpha():  # every method is a word; an AMPS frame starts with its length
        raise HttpError(400, "not an HTTP request (an AMPS client connected to the admin port?)")
    try:
        head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), head_timeout)
    except TimeoutError:
        raise HttpError(408, f"request head not complete within {head_timeout:g} s") from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"request head above {MAX_HEAD_BYTES} bytes") from None
    except asyncio.IncompleteReadError:
        raise HttpError(400, "connection closed inside the request head") from None
    request = parse_head(head[:-4])
    length = request.content_length
    if not length:
        return request
    try:
        body = await asyncio.wait_for(reader.readexactly(length), body_timeout)
    except TimeoutError:
        raise HttpError(408, f"request body not complete within {body_timeout:g} s") from None
    except asyncio.IncompleteReadError:
        raise HttpError(400, "connection closed inside the request body") from None
    return Request(
        request.method,
        request.target,
        request.path,
        request.query,
        request.version,
        request.headers,
        body,
    )


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    *,
    idle_timeout: float | None = None,
    head_timeout: float | None = None,
    body_timeout: float | None = None,
    write_timeout: float | None = None,
    slot: Slot | None = None,
) -> None:
    """Serve requests on one connection until the client closes, asks to close, idles, or
    sends something that cannot be answered on the same connection; ``slot`` (if given) is
    kept up to date. A timeout left out is the module's constant of that name at call time."""
    idle_timeout = IDLE_TIMEOUT if idle_timeout is None else idle_timeout
    head_timeout = HEAD_TIMEOUT if head_timeout is None else head_timeout
    body_timeout = BODY_TIMEOUT if body_timeout is None else body_timeout
    write_timeout = WRITE_TIMEOUT if write_timeout is None else write_timeout
    slot = slot if slot is not None else Slot()
    loop = asyncio.get_running_loop()
    try:
        while True:
            slot.busy = False
            slot.since = loop.time()
            try:
                request = await _read_request(reader, idle_timeout, head_timeout, body_timeout)
            except HttpError as exc:
                writer.write(error_response(exc).encode(keep_alive=False))
                await asyncio.wait_for(writer.drain(), write_timeout)
                return
            if request is None:
                return
            slot.busy = True
            try:
                response = await handler(request)
            except HttpError as exc:
                response = error_response(exc)
            except Exception:
                logger.exception("admin request %s %s failed", request.method, request.target)
                response = Response(500, b"internal error\n", "text/plain; charset=utf-8")
            keep = request.keep_alive
            writer.write(response.encode(head_only=request.method == "HEAD", keep_alive=keep))
            await asyncio.wait_for(writer.drain(), write_timeout)
            if not keep:
                return
    except (ConnectionError, OSError, TimeoutError):
        return
    finally:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 2)
        except (TimeoutError, ConnectionError, OSError):
            pass
