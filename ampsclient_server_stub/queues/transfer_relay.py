"""Ownership transfer requests between replicated-queue instances that have no replication
link with each other (``shared/queues.md`` §9, §11).

AMPS lets any instance that hosts a distributed queue ask the owner of a message for it; the
instances need not be linked directly (a chain ``A - B - C`` with ``B`` passing records
through is a valid topology for a queue). The grant is a journaled record, so ordinary
replication (with ``PassThrough``) already carries it to every instance; the request is a
point-to-point frame (``rqxfer``), and this module routes it:

* an instance asks the owner directly when it has a link with it, else it sends the request
  to every instance it is linked with, marked with the owner (``own``), itself as the
  requester (``rq``) and a hop count (``hops``);
* an instance that receives a request marked for another owner forwards it: to the owner
  when it is linked with it, else on to its other linked instances while the hop count is
  below :data:`MAX_HOPS`; it counts ``transfer_relayed``;
* the owner grants to the requester named in the request (not to the relay it came from).

A request that reaches the owner twice (two relays) is harmless: the first is granted, the
second finds the message owned elsewhere and is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

__all__ = ["MAX_HOPS", "OWNER_FIELD", "REQUESTER_FIELD", "forward", "requester", "routes"]

OWNER_FIELD: Final = "own"
"""Request header field: the owner a relayed request is for."""

REQUESTER_FIELD: Final = "rq"
"""Request header field: the instance that asked (the one to grant to)."""

HOPS_FIELD: Final = "hops"
"""Request header field: relays passed so far."""

MAX_HOPS: Final = 4
"""A relayed request goes no further than this many relays (loops in a mesh end)."""


def routes(
    owner: str, header: dict[str, Any], up: Iterable[str], instance: str
) -> list[tuple[str, dict[str, Any]]]:
    """Where a request of ``instance`` for messages ``owner`` owns goes, with each frame's
    header: the owner itself when linked (in ``up``), else every linked instance (relays)."""
    linked = set(up)
    if owner in linked:
        return [(owner, header)]
    relayed = {**header, OWNER_FIELD: owner, REQUESTER_FIELD: instance, HOPS_FIELD: 1}
    return [(peer, relayed) for peer in sorted(linked)]


def requester(peer: str, header: dict[str, Any]) -> str:
    """The instance a request received from ``peer`` is for (a relay names it)."""
    named = header.get(REQUESTER_FIELD)
    return str(named) if named else peer


def forward(
    peer: str, header: dict[str, Any], up: Iterable[str], instance: str
) -> list[tuple[str, dict[str, Any]]] | None:
    """A request received from ``peer``: ``None`` when it is for this instance (grant it),
    else where to forward it (possibly nowhere: the owner is out of reach)."""
    owner = header.get(OWNER_FIELD)
    if owner is None or str(owner) == instance:
        return None
    owner = str(owner)
    linked = set(up)
    try:
        hops = int(header.get(HOPS_FIELD, 1))
    except (TypeError, ValueError):
        hops = MAX_HOPS
    onward = {**header, HOPS_FIELD: hops + 1}
    if owner in linked:
        return [(owner, onward)]
    if hops >= MAX_HOPS:
        return []
    asked = requester(peer, header)
    return [(p, onward) for p in sorted(linked) if p not in (peer, asked, instance)]
