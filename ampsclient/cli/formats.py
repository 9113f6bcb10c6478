"""Reading messages to publish and writing received ones, in the ``--format`` chosen.

Input (``publish``, from stdin or ``--file``):

- ``raw``: each line is one message body, sent as it is (without its line end); empty lines
  are skipped.
- ``jsonl``: each non-empty line is one JSON document.
- ``json``: the whole input is one JSON document; an array is one message per element.

Without ``--topic``, each JSON document must be an *envelope*, ``{"topic": ..., "data": ...}``
(optionally with ``sow_key``, ``correlation_id``, ``expiration``): what ``--format jsonl``
writes, so ``ampsclient sow ... --format jsonl | ampsclient publish --format jsonl`` copies
records.

Output (every command that receives messages):

- ``raw``: each message body on its own line, as received.
- ``jsonl``: one envelope per line: ``command``, ``topic``, ``data`` (the body decoded as JSON,
  or as text when it is not JSON, or ``data_base64`` when it is not UTF-8), and ``bookmark``,
  ``sow_key``, ``timestamp``, ``correlation_id`` when the message has them.
- ``json``: the same envelopes as one JSON array (closed also after a Ctrl-C).

``--template`` (AMPS ``spark``'s ``-format``) writes each message as a text in which
``{data}``, ``{topic}``, ``{bookmark}``, ``{command}``, ``{sow_key}``, ``{correlation_id}``,
``{timestamp}``, ``{sequence}``, ``{expiration}``, ``{user_id}``, ``{lease_period}`` and
``{message_length}`` are replaced by the message's (empty when it has none).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Iterator
from typing import IO, Any, Literal

from ..exceptions import UsageError
from ..protocol.message import Message

__all__ = [
    "BadInputError",
    "Format",
    "Outgoing",
    "Writer",
    "envelope",
    "read_messages",
    "template_fields",
]

Format = Literal["raw", "json", "jsonl"]
"""The three ``--format`` values."""


class BadInputError(UsageError, ValueError):
    """The input is not in the format given; the message names the line."""


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish."""

    topic: str
    data: bytes
    sow_key: str | None = None
    correlation_id: str | None = None
    expiration: int | None = None
    size: int = 0
    """Bytes of input it came from (for the progress bar)."""


def _compact(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def _from_document(doc: Any, topic: str | None, where: str, size: int) -> Outgoing:
    if topic is not None:
        return Outgoing(topic, _compact(doc), size=size)
    if not isinstance(doc, dict) or "topic" not in doc or "data" not in doc:
        raise BadInputError(
            f"{where}: without --topic each document must be an envelope "
            '{"topic": ..., "data": ...}'
        )
    expiration = doc.get("expiration")
    if expiration is not None and not isinstance(expiration, int):
        raise BadInputError(f"{where}: expiration must be an integer number of seconds")
    return Outgoing(
        str(doc["topic"]),
        _compact(doc["data"]),
        sow_key=doc.get("sow_key"),
        correlation_id=doc.get("correlation_id"),
        expiration=expiration,
        size=size,
    )


def _records(source: IO[bytes], delimiter: bytes) -> Iterator[bytes]:
    """The records of ``source``, each ended by ``delimiter`` (or by the end of the input)."""
    if delimiter == b"\n":
        yield from source
        return
    pending = b""
    while chunk := source.read(65536):
        pending += chunk
        *done, pending = pending.split(delimiter)
        for record in done:
            yield record + delimiter
    if pending:
        yield pending


def read_messages(
    source: IO[bytes], fmt: Format, topic: str | None, *, delimiter: bytes = b"\n"
) -> Iterator[Outgoing]:
    """The messages in ``source``, read lazily (``raw`` and ``jsonl``) or at once (``json``).

    ``raw`` and ``jsonl`` records end with ``delimiter`` (a line end by default).

    Raises:
        BadInputError: a document that is not JSON, or not an envelope without ``--topic``.
    """
    if fmt == "json":
        text = source.read()
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise BadInputError(f"input is not JSON: {exc}") from None
        docs = doc if isinstance(doc, list) else [doc]
        for i, item in enumerate(docs):
            yield _from_document(item, topic, f"element {i}", len(text) // max(1, len(docs)))
        return
    if fmt == "raw" and topic is None:
        raise ValueError("--format raw needs a topic (raw lines carry none)")
    for number, line in enumerate(_records(source, delimiter), 1):
        size = len(line)
        body = line.rstrip(b"\r\n") if delimiter == b"\n" else line.removesuffix(delimiter)
        if not body.strip():
            continue
        if fmt == "raw":
            assert topic is not None
            yield Outgoing(topic, body, size=size)
            continue
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise BadInputError(f"line {number} is not JSON: {exc}") from None
        if topic is not None:  # keep the line as written
            yield Outgoing(topic, body, size=size)
        else:
            yield _from_document(doc, None, f"line {number}", size)


def envelope(message: Message) -> dict[str, Any]:
    """The JSON envelope of a received message (``--format json`` / ``jsonl``)."""
    out: dict[str, Any] = {"command": message.command}
    if message.topic is not None:
        out["topic"] = message.topic
    raw = message.data
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        out["data_base64"] = base64.b64encode(raw).decode()
    else:
        try:
            out["data"] = json.loads(text) if text else text
        except ValueError:
            out["data"] = text
    for key, value in (
        ("bookmark", message.bookmark),
        ("sow_key", message.sow_key),
        ("timestamp", message.timestamp),
        ("correlation_id", message.correlation_id),
    ):
        if value:
            out[key] = value
    return out


_FIELD = re.compile(r"\{([A-Za-z_]+)\}")

_TEMPLATE_FIELDS = frozenset(
    {
        "data",
        "topic",
        "bookmark",
        "command",
        "sow_key",
        "correlation_id",
        "timestamp",
        "sequence",
        "expiration",
        "user_id",
        "lease_period",
        "message_length",
    }
)


def template_fields(template: str) -> list[str]:
    """The placeholders of ``template``; ``ValueError`` names one that is not known."""
    names = _FIELD.findall(template)
    for name in names:
        if name not in _TEMPLATE_FIELDS:
            known = " ".join("{" + n + "}" for n in sorted(_TEMPLATE_FIELDS))
            raise ValueError(f"unknown placeholder {{{name}}} (known: {known})")
    return names


def _field(message: Message, name: str) -> bytes:
    if name == "data":
        return message.data
    if name == "message_length":
        return str(len(message.data)).encode()
    if name == "expiration":
        value: object = message.get_expiration()
    elif name == "user_id":
        value = message.get_user_id()
    else:
        value = getattr(message, name)
    return b"" if value is None else str(value).encode()


def render(template: str, message: Message) -> bytes:
    """``template`` with each placeholder replaced by ``message``'s field."""
    out: list[bytes] = []
    last = 0
    for match in _FIELD.finditer(template):
        out.append(template[last : match.start()].encode())
        out.append(_field(message, match.group(1)))
        last = match.end()
    out.append(template[last:].encode())
    return b"".join(out)


class Writer:
    """Writes received messages to ``out`` in ``fmt``.

    Args:
        out: a binary stream (``sys.stdout.buffer``).
        fmt: the output format.
        live: flush after each message (subscriptions), so that a reader sees it at once.
        template: write each message as this text (placeholders replaced) instead.
        separator: what ends each item (default a newline).
    """

    def __init__(
        self,
        out: IO[bytes],
        fmt: Format,
        *,
        live: bool,
        template: str | None = None,
        separator: bytes = b"\n",
    ) -> None:
        if template is not None:
            template_fields(template)
        self._out = out
        self._fmt = fmt
        self._template = template
        self._separator = separator
        self._live = live
        self._first = True
        self._open = False

    def begin(self) -> None:
        """Start the output (the opening bracket of ``json``)."""
        if self._fmt == "json":
            self._out.write(b"[")
            self._open = True

    def write(self, message: Message) -> None:
        """Write one message."""
        if self._template is not None:
            self._emit(render(self._template, message))
        elif self._fmt == "raw":
            self._emit(message.data)
        else:
            self._emit(json.dumps(envelope(message)).encode())

    def write_document(self, doc: dict[str, Any], text: str) -> None:
        """Write a result that is not a message: ``text`` for ``raw``, ``doc`` otherwise."""
        self._emit(text.encode() if self._fmt == "raw" else json.dumps(doc).encode())

    def _emit(self, item: bytes) -> None:
        if self._fmt == "json":
            self._out.write((b"\n" if self._first else b",\n") + item)
        else:
            self._out.write(item + self._separator)
        self._first = False
        if self._live:
            self._out.flush()

    def end(self) -> None:
        """Finish the output (the closing bracket of ``json``) and flush."""
        if self._open:
            self._out.write(b"\n]\n" if not self._first else b"]\n")
            self._open = False
        self._out.flush()
