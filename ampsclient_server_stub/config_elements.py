"""Every configuration element the reference server accepts, and what each one does.

The rule (issue #17): an element the server accepts works as the AMPS guide describes, or
start-up fails with an error that names it. Nothing is accepted and ignored. :data:`ELEMENTS`
is the one table of accepted elements; :func:`check_elements` refuses every element of a
document that the table does not list, naming the element, its parent, its line and what the
parent accepts. ``tests/server/test_config_elements.py`` walks the table and proves the effect
of each entry on a running server, so an element added here without a proof fails that test.

Paths are relative to ``<AMPSConfig>``, segments joined by ``/``. A ``*`` segment matches any
one element name: the options of an authentication, entitlement or authenticator module,
which the module itself validates. Paths listed in :data:`DELEGATED` name subtrees that
another reader validates completely (the queue definitions of ``<SOW>``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Final

from .config_xml import XmlDocument

__all__ = ["DELEGATED", "ELEMENTS", "REFUSED", "check_elements", "element_paths"]

_SOW_TOPIC: Final = {
    "Name": "the SOW topic name",
    "MessageType": "the topic's message type (one SOW per topic and type)",
    "Key": "a key path (repeat for a compound key): records with equal keys replace each other",
    "FileName": "the SOW's file (SQLite): the SOW survives a restart; without it, in memory",
    "KeyDomain": "the seed of the generated SOW keys (equal domains give equal keys)",
    "Expiration": "records expire this long after their last update (oof 'expired')",
    "Durability": "transient (in memory, no FileName) or persistent (needs a FileName)",
    "History/Window": "historical SOW queries reach this far back (needs the topic recorded)",
    "History/Granularity": "historical states are kept at this spacing",
    "Preprocessing/Field": "'expr AS /path': written into a published message before its key",
    "Enrichment/Field": "'expr AS /path': written into a published message after its key",
    "HashIndex/Key": "a field of a hash index (repeat for several): exact-match and IN queries "
    "with literal strings over exactly these fields look records up instead of scanning",
    "Index": "a field AMPS pre-creates a memo index for (records are held parsed: checked, "
    "listed in the admin SOW statistics)",
}

_TRANSPORT_POLICY: Final = {
    "ClientMessageAgeLimit": "a client whose oldest queued message is older is disconnected",
    "ClientMaxCapacity": "the share of the resource pool one client may use",
    "MessageMemoryLimit": "the memory of the resource pool (offlining to disk beyond it)",
    "MessageDiskLimit": "the disk of the resource pool (disconnection beyond it)",
    "MaxFrameSize": "the largest inbound frame; a larger one closes the connection",
    "MaxConnections": "connections beyond this are refused",
    "LogonTimeout": "extension: a connection not logged on within it is closed (0: never)",
    "Authentication/Module": "the authentication module checking logons",
    "Authentication/Options/*": "an option of the authentication module (it validates them)",
    "Entitlement/Module": "the entitlement module checking reads and writes",
    "Entitlement/Options/*": "an option of the entitlement module (it validates them)",
}

_ELEMENTS: dict[str, str] = {
    "Name": "the instance name (logon ack, replication, journal file prefix)",
    "SOWStatsInterval": "publish /AMPS/SOWStats (one message per SOW topic) at this interval",
    "Group": "the replication group (default: the instance name)",
    "DataDirectory": "extension: the directory relative paths resolve against",
    "MessageDiskPath": "where offlined slow clients' messages are written",
    "Authenticator/Module": "the credentials module of outgoing replication links",
    "Authenticator/Options/*": "an option of the authenticator module (it validates them)",
    **_TRANSPORT_POLICY,
    "LogonFailureLimit": "extension: failed logons of a user that lock it out (0: never)",
    "LogonLockout": "extension: how long a lockout lasts (and the window failures count in)",
    "Admin/InetAddr": "the admin interface's address",
    "Admin/Interval": "the statistics sampling period (at least 1s)",
    "Admin/FileName": ":memory: only (statistics are kept in memory); a file is refused",
    "Admin/WWWAuthenticate": "the admin interface's HTTP authentication realm (Basic only)",
    "Admin/AnonymousPaths": "admin paths served without authentication (a regex)",
    "Admin/Certificate": "the admin interface's certificate: it is served over HTTPS",
    "Admin/PrivateKey": "the key of the admin interface's certificate",
    "Admin/AllowedHosts": "extension: host names the admin Host field may carry (DNS rebinding)",
    "Transports/Transport/Name": "the transport's name (unique)",
    "Transports/Transport/Type": "tcp, tcps, ws/websocket, wss, unix or amps-replication",
    "Transports/Transport/InetAddr": "the listening address",
    "Transports/Transport/Path": "unix: the socket file (created 0600)",
    "Transports/Transport/Compression": "tcp/tcps: zlib accepts compression=zlib clients",
    "Transports/Transport/Protocol": "amps, or websocket on a tcp transport",
    "Transports/Transport/MessageType": "the only message type the transport accepts",
    "Transports/Transport/Certificate": "tcps/wss: the server certificate",
    "Transports/Transport/PrivateKey": "tcps/wss: the certificate's key",
    "Transports/Transport/PrivateKeyPassword": "tcps/wss: the key's password",
    "Transports/Transport/CAFile": "tcps/wss: the CAs client certificates are checked against",
    "Transports/Transport/RequireClientCertificate": "tcps/wss: refuse clients without one",
    "Transports/Transport/Secret": "amps-replication: the secret incoming links must prove",
    **{f"Transports/Transport/{key}": text for key, text in _TRANSPORT_POLICY.items()},
    **{f"SOW/Topic/{key}": text for key, text in _SOW_TOPIC.items()},
    **{f"SOW/TopicDefinition/{key}": text for key, text in _SOW_TOPIC.items()},
    "SOW/TopicDefinition/Topic": "pre-5.0 spelling of the SOW topic name",
    **{f"TopicMetaData/TopicDefinition/{key}": text for key, text in _SOW_TOPIC.items()},
    "TopicMetaData/TopicDefinition/Topic": "pre-5.0 spelling of the SOW topic name",
    "TransactionLog/JournalDirectory": "where the journal files are written",
    "TransactionLog/JournalArchiveDirectory": "where amps-action-do-archive-journal moves files",
    "TransactionLog/JournalSize": "the size at which a journal file is sealed",
    "TransactionLog/PreallocatedJournalFiles": "journal files created ahead of need",
    "TransactionLog/FlushInterval": "the group-commit period of the interval fsync policy",
    "TransactionLog/Topic/Name": "a recorded topic (or regex)",
    "TransactionLog/Topic/MessageType": "the recorded topic's message type (default: any)",
    "TransactionLog/Topic/Filter": "only the messages matching this filter are recorded",
    "Replication/Destination/Name": "the destination's name (unique)",
    "Replication/Destination/Group": "the group the destination must be in",
    "Replication/Destination/SyncType": "sync (persisted acks wait for it) or async",
    "Replication/Destination/Topic/Name": "a replicated topic (or regex)",
    "Replication/Destination/Topic/MessageType": "the replicated topic's message type",
    "Replication/Destination/Topic/Filter": "only matching messages are replicated",
    "Replication/Destination/Topic/ExcludeValidation": "validation checks skipped for it",
    "Replication/Destination/PassThrough": "groups whose replicated messages are passed on",
    "Replication/Destination/Compression": "zlib: the stream to the destination is compressed",
    "Replication/Destination/Secret": "the secret this instance proves to the destination",
    "Replication/Destination/Transport/Name": "a label of the link (in logs), as in AMPS",
    "Replication/Destination/Transport/Type": "amps-replication",
    "Replication/Destination/Transport/InetAddr": "the destination's addresses (failover list)",
    "Replication/Destination/Transport/Compression": "as the destination's Compression",
    "Replication/Destination/Transport/Secret": "as the destination's Secret",
    "Replication/Destination/Transport/Authenticator/Module": "the link's credentials module",
    "Replication/Destination/Transport/Authenticator/Options/*": "an authenticator option",
    "Actions/Action/On/Module": "amps-action-on-schedule, amps-action-on-sow-expire-message",
    "Actions/Action/On/Options/Every": "the schedule: a period, a time of day or a weekday",
    "Actions/Action/On/Options/Name": "the schedule's name (in logs)",
    "Actions/Action/On/Options/Topic": "the queue whose expirations run the action",
    "Actions/Action/On/Options/MessageType": "that queue's message type",
    "Actions/Action/On/Options/Reason": "the expiration reasons that run the action (a list)",
    "Actions/Action/Do/Module": "downgrade/upgrade replication, archive/compress/remove journal, "
    "publish a message",
    "Actions/Action/Do/Options/Age": "the age the action applies to",
    "Actions/Action/Do/Options/Topic": "the topic the action publishes to (a template)",
    "Actions/Action/Do/Options/MessageType": "the message type of the action's publish",
    "Actions/Action/Do/Options/Data": "the published data (a template: {{AMPS_DATA}}...)",
    # Queue elements are read by queues.config (DELEGATED below); listed here, each with its
    # proof, as they are built:
    "SOW/Queue/UnderlyingTopic": "the queue's topic, or a regex over several journaled topics",
    "SOW/Queue/DefaultPublishTarget": "where a publish to the queue's name goes (regex queue)",
    "SOW/Queue/ExpirationModel": "how Expiration and a message's own expiration combine",
    "SOW/Queue/TargetQueueDepth": "only this many messages active; the rest wait in order",
    "SOW/Queue/FileBackedMetadata": "enabled: bodies stay in the journal, live set in .queue.cache",
    "SOW/GroupLocalQueue/GroupLocalQueueDomain": "the queue's identity domain (not the group)",
    # Composite message types (AMPS User Guide, "Composite Messages"), read by
    # config_message_types:
    "MessageTypes/MessageType/Name": "the name of a composite message type (what topics, "
    "transports and connection URIs name)",
    "MessageTypes/MessageType/Module": "composite-local (parts addressed /0/..) or "
    "composite-global (the parts' identifiers merged); any other module is refused by name",
    "MessageTypes/MessageType/MessagePart": "the type of each part, in order (a parsed type "
    "or binary)",
}

ELEMENTS: Final[Mapping[str, str]] = MappingProxyType(_ELEMENTS)
"""Accepted leaf element paths and what each does; their ancestors are accepted containers."""

DELEGATED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "SOW/Queue": "a message queue (validated by queues.config)",
        "SOW/QueueDefinition": "a message queue (validated by queues.config)",
        "SOW/LocalQueue": "a local message queue (validated by queues.config)",
        "SOW/GroupLocalQueue": "a group-local message queue (validated by queues.config)",
        "SOW/View": "a view over a queue or SOW topics (queues.view_config, views.config)",
        "SOW/ViewDefinition": "a view over a queue or SOW topics (queues.view_config, "
        "views.config)",
        "SOW/ConflatedTopic": "a conflated copy of a SOW topic (validated by conflated_config)",
        "SOW/ReplicaDefinition": "a conflated topic, old name (validated by conflated_config)",
    }
)
"""Subtrees another reader validates element by element."""

REFUSED: Final[Mapping[str, str]] = MappingProxyType(
    {
        "Tuning/Queue/QueueDeliveryFlushInterval": "the reference server has no queue "
        "delivery thread to wait: a queue's messages are delivered in the same event-loop turn "
        "as the publish or acknowledgement that frees them, so there is no interval to set",
    }
)
"""Documented AMPS elements the reference server refuses by name, with the reason."""


def _containers() -> frozenset[str]:
    out: set[str] = set()
    for path in (*ELEMENTS, *DELEGATED):
        parts = path.split("/")
        out.update("/".join(parts[:n]) for n in range(1, len(parts)))
    return frozenset(out)


_CONTAINERS: Final = _containers()


def _matches(pattern: str, path: str) -> bool:
    want, have = pattern.split("/"), path.split("/")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))


def _accepted(path: str) -> bool:
    if path in ELEMENTS or path in _CONTAINERS or path in DELEGATED:
        return True
    return any("*" in pattern and _matches(pattern, path) for pattern in ELEMENTS)


def _children_of(parent: str) -> list[str]:
    depth = parent.count("/") + 1 if parent else 0
    names = set()
    for path in (*ELEMENTS, *DELEGATED, *_CONTAINERS):
        parts = path.split("/")
        if len(parts) == depth + 1 and "/".join(parts[:depth]) == parent:
            names.add(parts[depth])
    return sorted(names)


def element_paths(root: ET.Element) -> Iterator[tuple[str, ET.Element]]:
    """``(path, element)`` of every element under ``root`` (delegated subtrees not entered)."""

    def walk(elem: ET.Element, prefix: str) -> Iterator[tuple[str, ET.Element]]:
        for child in elem:
            path = f"{prefix}/{child.tag}" if prefix else child.tag
            yield path, child
            if path not in DELEGATED:
                yield from walk(child, path)

    return walk(root, "")


def check_elements(doc: XmlDocument) -> None:
    """Refuse the first element of ``doc`` that :data:`ELEMENTS` does not accept.

    Raises:
        ConfigError: naming the element, its parent, its line and what the parent accepts.
    """
    for path, elem in element_paths(doc.root):
        if path in REFUSED:
            doc.fail(elem, f"<{elem.tag}> ({path}) is not supported: {REFUSED[path]}")
    for path, elem in element_paths(doc.root):
        if _accepted(path):
            continue
        parent = path.rpartition("/")[0]
        where = f"<{parent.rpartition('/')[2]}>" if parent else "<AMPSConfig>"
        choices = ", ".join(_children_of(parent)) or "no child elements"
        doc.fail(
            elem,
            f"<{elem.tag}> in {where} is not supported by the reference server, which refuses "
            f"what it would otherwise ignore (accepted there: {choices})",
        )
