"""The options (``o`` header) each command accepts: one table, checked before a command runs.

Taken from the AMPS Command Reference ("subscribe", "delta_subscribe", "sow",
"sow_and_subscribe", "sow_and_delta_subscribe", "sow_delete":
https://docs.crankuptheamps.com/intro-2/commands-to-amps/query-subscribe/subscribe and its
siblings), the AMPS User Guide ("Options for Delta Subscribe":
https://docs.crankuptheamps.com/amps-user-guide/delta-subscribe/options-for-delta-subscribe;
"Managing Result Sets", "Conflated Subscriptions", the transaction log and queue chapters) and
the option builders of the official client (``Message.Options``). The server either does what
AMPS documents for an option of this table or refuses it by name: an option that is not in the
table for its command (a typo, an option of another command, one the guide does not list), and
one AMPS documents that the server does not implement (:data:`NOT_IMPLEMENTED`), fail with
``invalid options`` and a ``reason_detail`` naming it. Nothing is accepted and ignored.

``heartbeat`` is not checked here: its ``o`` is positional (``start,<seconds>``, ``beat``) and
read by its handler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from .wire import CommandFailure

__all__ = [
    "COMMAND_OPTIONS",
    "NOT_IMPLEMENTED",
    "OPTION_EFFECTS",
    "QUEUE_OPTIONS",
    "QUEUE_VIEW_OPTIONS",
    "check_command_options",
    "check_queue_only_options",
    "check_queue_options",
]

OPTION_EFFECTS: Final[Mapping[str, str]] = {
    "oof": "out-of-focus notices (`oof`) for records the subscription had and no longer matches",
    "replace": "replaces the subscription named by `sub_id` in place",
    "timestamp": "each delivery (and SOW result) carries `ts`, when AMPS processed the message",
    "conflation": "deliveries are conflated per key for the given interval",
    "conflation_key": "the key conflation uses (default: the SOW key)",
    "max_backlog": (
        "queue subscriptions: at most N unacknowledged messages (refused on any other subscription)"
    ),
    "live": "bookmark subscriptions: deliver before the message is persisted",
    "fully_durable": "bookmark subscriptions: deliver only what every sync destination holds",
    "rate": "bookmark subscriptions: pace the replay",
    "rate_max_gap": "bookmark subscriptions: longest idle gap of a paced replay",
    "bookmark_not_found": "bookmark subscriptions: `now`, `epoch` or `fail` (unknown bookmark)",
    "pause": "bookmark subscriptions: enter (or hold) the subscription paused",
    "resume": "bookmark subscriptions: resume paused subscriptions",
    "no_empties": "delta subscriptions: no message when no field changed",
    "send_keys": "delta subscriptions: deltas carry the SOW key fields (always, as AMPS 4.0+)",
    "top_n": "at most N results (with `skip_n` on `sow_and_subscribe`: a paginated subscription)",
    "skip_n": "skip the first N results",
    "orderby": "result order (as the `orderby` header)",
    "select": "only the selected fields of each result",
    "projection": "an aggregated query: the fields computed per group",
    "grouping": "an aggregated query: the fields that make a group",
    "no_sowkey": "results carry no SOW key (`k`)",
    "cancel": "queue acknowledgement: return the message to the queue now",
    "expire": "queue acknowledgement: expire the message now",
    "ack_conflation": "how long persisted acks are conflated for this connection",
}
"""What each option of :data:`COMMAND_OPTIONS` does here (one line each, for the docs)."""

_SUBSCRIPTION: Final = frozenset({"oof", "replace", "timestamp", "conflation", "conflation_key"})
_BOOKMARK: Final = frozenset(
    {"live", "fully_durable", "rate", "rate_max_gap", "bookmark_not_found", "pause", "resume"}
)
_DELTA: Final = frozenset({"no_empties", "send_keys"})
_QUERY: Final = frozenset(
    {"top_n", "skip_n", "orderby", "select", "timestamp", "projection", "grouping"}
)
_QUEUE: Final = frozenset({"max_backlog"})

COMMAND_OPTIONS: Final[Mapping[str, frozenset[str]]] = {
    "subscribe": _SUBSCRIPTION | _BOOKMARK | _QUEUE,
    "delta_subscribe": _SUBSCRIPTION | _BOOKMARK | _QUEUE | _DELTA,
    "sow": _QUERY | {"no_sowkey"},
    "sow_and_subscribe": (_QUERY - {"select"}) | _SUBSCRIPTION | _QUEUE,
    "sow_and_delta_subscribe": (_QUERY - {"select"}) | _SUBSCRIPTION | _QUEUE | _DELTA,
    "sow_delete": frozenset({"cancel", "expire"}),
    "logon": frozenset({"ack_conflation"}),
    "p": frozenset(),
    "publish": frozenset(),
    "delta_publish": frozenset(),
    "unsubscribe": frozenset(),
    "flush": frozenset(),
}
"""The options each command accepts (a command not listed here is not checked)."""

_SUBSCRIBE_COMMANDS: Final = (
    "subscribe",
    "delta_subscribe",
    "sow_and_subscribe",
    "sow_and_delta_subscribe",
)

NOT_IMPLEMENTED: Final[Mapping[tuple[str, str], str]] = {
    **{
        (command, "select"): (
            "select on a subscription is not implemented: the server applies select to sow "
            "queries only (query, then subscribe without select)"
        )
        for command in _SUBSCRIBE_COMMANDS
    },
    **{
        (command, "no_sowkey"): (
            "no_sowkey on a subscription is not implemented: the server applies it to sow "
            "queries only"
        )
        for command in _SUBSCRIBE_COMMANDS
    },
    ("logon", "pretty"): (
        "pretty is not implemented: the server sends headers in the compact form only"
    ),
}
"""Options AMPS documents for a command that the server does not implement there, with why
(refused by name rather than accepted and ignored)."""


_AGGREGATED: Final = (
    "projection and grouping (an aggregated subscription) need a sow, sow_and_subscribe or "
    "sow_and_delta_subscribe"
)
_HINTS: Final[Mapping[tuple[str, str], str]] = {
    (command, name): _AGGREGATED
    for command in ("subscribe", "delta_subscribe")
    for name in ("projection", "grouping")
}
"""Why an option of another command is not one of this command, where a hint helps."""


def check_command_options(command: str, options: Mapping[str, str]) -> None:
    """Refuse an option ``command`` does not accept (see :data:`COMMAND_OPTIONS`).

    ``options`` is the command's parsed ``o`` field. A command the table does not list is
    not checked (``heartbeat``).

    Raises:
        CommandFailure: ``invalid options``, the detail naming the first refused option.
    """
    accepted = COMMAND_OPTIONS.get(command)
    if accepted is None:
        return
    for name in options:
        if name in accepted:
            continue
        why = NOT_IMPLEMENTED.get((command, name)) or _HINTS.get((command, name))
        if why is None:
            shown = "publish" if command == "p" else command
            known = ", ".join(sorted(accepted)) or "none"
            why = f"{name!r} is not an option of {shown} (its options: {known})"
        raise CommandFailure("invalid options", f"option {name!r}: {why}")


QUEUE_OPTIONS: Final = frozenset({"replace", "max_backlog", "top_n", "skip_n", "orderby"})
"""What a subscription to a queue takes here (``top_n``/``skip_n``/``orderby`` for the query
part of a ``sow_and_subscribe``): a queue delivers each message to one subscriber under a
lease, so ``oof``, ``timestamp``, conflation, the bookmark options and the delta options are
not implemented for it."""

QUEUE_VIEW_OPTIONS: Final = frozenset({"replace", "oof", "top_n", "skip_n", "orderby"})
"""What a subscription to a view over a queue takes here."""


def check_queue_options(options: Mapping[str, str], *, view: bool) -> None:
    """Refuse what a subscription to a queue (``view``: to a view over a queue) does not
    implement, though its command accepts it elsewhere.

    Raises:
        CommandFailure: ``invalid options``, naming the first such option.
    """
    accepted = QUEUE_VIEW_OPTIONS if view else QUEUE_OPTIONS
    what = "a view over a queue" if view else "a queue"
    for name in options:
        if name not in accepted:
            known = ", ".join(sorted(accepted))
            raise CommandFailure(
                "invalid options",
                f"option {name!r}: not implemented for a subscription to {what} (its options "
                f"here: {known})",
            )


_QUEUE_ONLY_WHY: Final = (
    "a queue subscription option (AMPS developer guides, Using Queues, 'Backlog and Smart "
    "Pipelining': the most unacknowledged queue messages a subscription takes), and {topic!r} "
    "is not a queue subscribed without a bookmark"
)


def check_queue_only_options(options: Mapping[str, str], *, topic: str) -> None:
    """Refuse an option only a subscription to a queue has (``max_backlog``) on a subscription
    that is not one (a topic, a regular expression, a bookmark replay of a queue's topics): it
    would be accepted and ignored.

    Raises:
        CommandFailure: ``invalid options``, naming the option.
    """
    for name in options:
        if name in _QUEUE:
            raise CommandFailure(
                "invalid options", f"option {name!r}: " + _QUEUE_ONLY_WHY.format(topic=topic)
            )
