"""The queue elements of ``<SOW>`` (``shared/queues.md`` §2): parsed with their defaults,
and every documented element either works or is refused at start-up with an error naming it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _queue_support import queue_config

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, ReplicationConfig, parse_config
from ampsclient_server_stub.queues.config import QueueConfig
from ampsclient_server_stub.queues.engine import QueueStartError


def config(body: str, extra: str = "") -> str:
    return f"""<AMPSConfig><Name>q1</Name>
      <TransactionLog><JournalDirectory>j</JournalDirectory>
        <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <SOW>{body}</SOW>{extra}</AMPSConfig>"""


def parse(body: str) -> tuple[QueueConfig, ...]:
    return parse_config(config(body), base_dir=Path("/tmp")).queues


def test_defaults_and_synonym() -> None:
    (q,) = parse(
        "<QueueDefinition><Name>work</Name><MessageType>JSON</MessageType></QueueDefinition>"
    )
    assert q == QueueConfig(name="work", message_type="json", kind="Queue")
    assert q.topics() == ("work",)
    assert (q.semantics, q.lease_period, q.max_per_subscription_backlog, q.fairness) == (
        "at-least-once",
        None,
        1,
        "proportional",
    )
    assert (q.leasing, q.max_deliveries, q.max_cancels, q.deferred_ack_expiration) == (
        "sublet",
        0,
        0,
        86400.0,
    )


def test_every_implemented_element() -> None:
    (q, local, group) = parse("""
      <Queue><Name>work</Name><MessageType>json</MessageType>
        <UnderlyingTopic>orders</UnderlyingTopic><UnderlyingTopic>more</UnderlyingTopic>
        <Semantics>at-least-once</Semantics><LeasePeriod>60s</LeasePeriod>
        <MaxBacklog>100</MaxBacklog><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>
        <Expiration>1h</Expiration><Filter>/kind = 'job'</Filter>
        <RecoveryPoint>now</RecoveryPoint><FairnessModel>fast</FairnessModel>
        <Leasing>strict</Leasing><MaxDeliveries>5</MaxDeliveries><MaxCancels>3</MaxCancels>
        <DeferredAckExpiration>10m</DeferredAckExpiration><Priority>/p</Priority></Queue>
      <LocalQueue><Name>l</Name><MessageType>json</MessageType>
        <Semantics>at-most-once</Semantics></LocalQueue>
      <GroupLocalQueue><Name>g</Name><MessageType>json</MessageType>
        <InitialOwner>q1</InitialOwner></GroupLocalQueue>""")
    assert q.underlying == ("orders", "more") and q.lease_period == 60.0
    assert (q.max_backlog, q.max_per_subscription_backlog, q.expiration) == (100, 10, 3600.0)
    assert (q.filter, q.recovery_point, q.fairness, q.leasing) == (
        "/kind = 'job'",
        "now",
        "fast",
        "strict",
    )
    assert (q.max_deliveries, q.max_cancels, q.deferred_ack_expiration) == (5, 3, 600.0)
    assert q.priority == "/p"
    assert (local.kind, local.semantics, local.fairness) == (
        "LocalQueue",
        "at-most-once",
        "round-robin",
    )
    assert (group.kind, group.initial_owner) == ("GroupLocalQueue", "q1")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<Queue><MessageType>json</MessageType></Queue>", "has no <Name>"),
        ("<Queue><Name>w</Name></Queue>", "has no <MessageType>"),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><LeaseTimeout>1s</LeaseTimeout>"
            "</Queue>",
            "<LeaseTimeout> is not a queue element",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><Priority>/p</Priority>"
            "<BarrierExpression>/b = 1</BarrierExpression></Queue>",
            "<Priority> cannot be combined with <BarrierExpression>",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><Priority>/p</Priority>"
            "<TargetQueueDepth>5000</TargetQueueDepth></Queue>",
            "<Priority> cannot be combined with <TargetQueueDepth>",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType>"
            "<TargetQueueDepth>10</TargetQueueDepth></Queue>",
            "<TargetQueueDepth> must be an integer >= 1000",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><Semantics>at-most-once</Semantics>"
            "<FairnessModel>fast</FairnessModel></Queue>",
            "supports only FairnessModel round-robin",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><Semantics>maybe</Semantics>"
            "</Queue>",
            "<Semantics> must be one of",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><LeasePeriod>soon</LeasePeriod>"
            "</Queue>",
            "<LeasePeriod>: invalid duration",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><MaxCancels>-1</MaxCancels>"
            "</Queue>",
            "<MaxCancels> must be an integer >= 0",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><Filter>/x = </Filter></Queue>",
            "<Filter>",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType>"
            "<Filter>UNIX_TIMESTAMP() > 5</Filter></Queue>",
            "non-deterministic",
        ),
        (
            "<GroupLocalQueue><Name>w</Name><MessageType>json</MessageType></GroupLocalQueue>",
            "requires <InitialOwner>",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType><InitialOwner>a</InitialOwner>"
            "</Queue>",
            "<InitialOwner> is for <GroupLocalQueue> only",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType>"
            "<UnderlyingTopic>orders.*</UnderlyingTopic></Queue>",
            "needs <DefaultPublishTarget>",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType>"
            "<RecoveryPoint>1|2|</RecoveryPoint></Queue>",
            "<RecoveryPoint> '1|2|'",
        ),
        (
            "<Queue><Name>w</Name><MessageType>json</MessageType></Queue>"
            "<LocalQueue><Name>w</Name><MessageType>json</MessageType></LocalQueue>",
            "duplicate queue 'w'",
        ),
        (
            "<Topic><Name>w</Name><MessageType>json</MessageType><Key>/k</Key></Topic>"
            "<Queue><Name>w</Name><MessageType>json</MessageType></Queue>",
            "name of a SOW topic",
        ),
    ],
)
def test_refused(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("|", r"\|")):
        parse(body)


@pytest.mark.integration
def test_underlying_topic_must_be_journaled(tmp_path: Path) -> None:
    xml = config(
        "<Queue><Name>work</Name><MessageType>json</MessageType>"
        "<UnderlyingTopic>elsewhere</UnderlyingTopic></Queue>",
        "<Transports><Transport><Name>t</Name><Type>tcp</Type><Protocol>amps</Protocol>"
        "<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>",
    )
    server = ServerThread(parse_config(xml, base_dir=tmp_path))
    with pytest.raises(
        QueueStartError, match=r"'elsewhere' .* is not recorded in the transaction log"
    ):
        server.start()
    server.stop()


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["Queue", "GroupLocalQueue", "LocalQueue"])
def test_every_queue_kind_runs_on_a_replicating_instance(tmp_path: Path, kind: str) -> None:
    """Queue/GroupLocalQueue are replicated queues there (tests/queues/test_replicated_*.py);
    a LocalQueue delivers its own copy."""
    owner = "q1" if kind == "GroupLocalQueue" else None
    queue = QueueConfig(name="w", message_type="json", kind=kind, initial_owner=owner)  # type: ignore[arg-type]
    config = dataclasses.replace(queue_config(tmp_path, queue), replication=ReplicationConfig())
    server = ServerThread(config)
    server.start()
    try:
        replicated = server.call(lambda: getattr(server.broker.queues, "replica", 0) is not None)
        assert replicated == (kind != "LocalQueue")
    finally:
        server.stop()
