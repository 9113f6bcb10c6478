"""Command correlation: what the core remembers of a command in flight, and which ack ends it.

Every command that waits for acks has a :class:`Pending` entry in
:attr:`ClientCore.pending <ampsclient.core.connection.ClientCore.pending>`, keyed by its
command id. :func:`track` fills in what a command sends and makes its entry;
:func:`terminal_ack` holds the terminal-ack rules (the ack after which the entry goes);
:func:`ack_outcome` says, for one ack of an entry, what the core does with it. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..calls import Handler
from ..command import Command
from ..protocol.acks import AckType, format_ack_types
from ..protocol.message import Message

__all__ = [
    "PUBLISH_COMMANDS",
    "QUERY_COMMANDS",
    "SUBSCRIBE_COMMANDS",
    "AckOutcome",
    "Pending",
    "Sink",
    "ack_outcome",
    "terminal_ack",
    "track",
]

SUBSCRIBE_COMMANDS: Final = frozenset(
    {"subscribe", "delta_subscribe", "sow_and_subscribe", "sow_and_delta_subscribe"}
)
"""Commands that place a subscription (it lives until unsubscribed)."""
QUERY_COMMANDS: Final = frozenset({"sow", "sow_and_subscribe", "sow_and_delta_subscribe"})
"""Commands that run a query (records and group markers carry its ``query_id``)."""


class Sink(Protocol):
    """Where a command's messages go when read as a stream (:class:`~ampsclient.MessageStream`)."""

    command_id: str | None
    sub_id: str | None
    query_id: str | None

    def put(self, message: Message) -> None:
        """Take one of the command's messages."""

    def finish(self, error: BaseException | None = None) -> None:
        """End the stream: normally (``error`` is ``None``) or with ``error``."""


@dataclass(slots=True)
class Pending:
    """A command waiting for acks."""

    cid: str
    """Its command id."""
    name: str
    """The command (``""`` for a handler added with ``add_message_handler``)."""
    wants_ack: bool
    """Its processed ack is awaited: the core queues a ``CommandAcked`` when it comes and a
    ``CommandFailed`` if the connection goes first."""
    handler: Handler | None
    """Receives the command's messages and the acks it asked for."""
    user_acks: AckType
    """The acks the application asked for (they go to :attr:`handler`)."""
    terminal: AckType
    """The ack that ends the command (:func:`terminal_ack`)."""
    stream: Sink | None = None
    """The stream its messages go to, if read as one."""
    sub_id: str | None = None
    """The subscription it placed."""
    query_id: str | None = None
    """The query it runs."""
    awaited: AckType = AckType.PROCESSED
    """The ack the wing waits for (``persisted`` for a ``flush`` asking for it)."""
    seen: AckType = AckType.NONE
    """The terminal acks that arrived (a ``sow`` asking for ``stats`` ends after both its
    ``completed`` and its ``stats`` ack, in whichever order they come)."""


PUBLISH_COMMANDS: Final = frozenset({"p", "delta_publish"})
"""Publishes: their ``persisted`` ack is conflated by AMPS and names the client's sequence
number, never the command id (user guide, *Acknowledgment Conflation and Publish
Acknowledgements*), so it cannot end or reach the command."""


def terminal_ack(name: str, acks: AckType) -> AckType:
    """The acks that end a command (all of them must arrive): ``completed``, and ``stats``
    when asked, for a ``sow``; ``stats`` (if asked) or ``processed`` for a ``sow_delete``;
    none for a subscription (it lives until unsubscribed); otherwise the last of the
    requested acks in stats, completed, persisted, processed order (never ``persisted`` for a
    publish: see :data:`PUBLISH_COMMANDS`)."""
    if name == "sow":
        return AckType.COMPLETED | (acks & AckType.STATS)
    if name == "sow_delete":
        return AckType.STATS if acks & AckType.STATS else AckType.PROCESSED
    if name in SUBSCRIBE_COMMANDS:
        return AckType.NONE
    if name in PUBLISH_COMMANDS:
        acks &= ~AckType.PERSISTED
    for flag in (AckType.STATS, AckType.COMPLETED, AckType.PERSISTED, AckType.PROCESSED):
        if acks & flag:
            return flag
    return AckType.NONE


def track(
    command: Command, cid: str, handler: Handler | None, stream: Sink | None
) -> tuple[dict[str, Any], Pending | None]:
    """The header of ``command`` as sent and the entry that tracks it.

    ``cid`` and, for a subscription or a query, ``sub_id`` and ``query_id`` (default: the
    ``cid``) are filled in, and the acks: ``processed`` for every command but a publish,
    ``completed`` for a ``sow``. A publish that asks for no ack that could reach it (none,
    or only ``persisted``: :data:`PUBLISH_COMMANDS`) is sent without ``cid`` and has no entry
    (``None``), as the official client sends it.
    """
    name = command.name
    fields: dict[str, Any] = {"c": name}
    fields.update(command.fields)
    user_acks = acks = command.ack_types
    if name in PUBLISH_COMMANDS and not acks & ~AckType.PERSISTED:
        fields.pop("cid", None)
        if acks:
            fields["a"] = format_ack_types(acks)
        else:
            fields.pop("a", None)
        return fields, None
    fields["cid"] = cid
    if name not in ("p", "delta_publish"):
        acks |= AckType.PROCESSED
    sub_id = query_id = None
    if name in SUBSCRIBE_COMMANDS:
        sub_id = fields["sub_id"] = str(fields.get("sub_id") or cid)
    if name in QUERY_COMMANDS:
        query_id = fields["query_id"] = str(fields.get("query_id") or cid)
    if name == "sow":
        acks |= AckType.COMPLETED
    fields["a"] = format_ack_types(acks)
    # nothing to wait for without a processed ack (e.g. a publish asking for persisted)
    wants_ack = bool(acks & AckType.PROCESSED)
    terminal = terminal_ack(name, acks)
    return fields, Pending(
        cid, name, wants_ack, handler, user_acks, terminal, stream, sub_id, query_id
    )


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """What one ack of a :class:`Pending` entry does (see :func:`ack_outcome`)."""

    resolves: bool
    """It is the processed ack the wing awaits."""
    to_handler: bool
    """The application asked for it: it goes to the entry's handler."""
    unrouted: bool
    """The application asked for it but nobody takes it: it goes to the last-chance handler."""
    to_stream: bool
    """A ``sow_delete``'s stats ack read as a stream: it goes to the stream."""
    ends: bool
    """It is the entry's terminal ack: the entry goes (and its stream ends)."""


def ack_outcome(pending: Pending, flag: AckType) -> AckOutcome:
    """The terminal-ack and routing rules for an ack of type ``flag`` of ``pending``."""
    asked = bool(flag & pending.user_acks)
    return AckOutcome(
        resolves=bool(flag & pending.awaited) and pending.wants_ack,
        to_handler=asked and pending.handler is not None,
        unrouted=asked and pending.handler is None and pending.stream is None,
        to_stream=(
            not asked
            and bool(flag & AckType.STATS)
            and pending.stream is not None
            and pending.name == "sow_delete"
        ),
        ends=bool(flag & pending.terminal) and not pending.terminal & ~(pending.seen | flag),
    )
