"""``GroupLocalQueueDomain`` (AMPS 5.3.4+): the identity of a ``GroupLocalQueue`` is
``(Name, domain)`` instead of ``(Name, Group)``. On a single instance there is one copy of
the queue whatever its identity: the element is validated and the queue runs as without it
(the replicated behaviour is in ``queues.replicated``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _queue_support import Consumer, publish

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig><Name>a</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>work</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW><{tag}><Name>work</Name><MessageType>json</MessageType>{body}</{tag}></SOW></AMPSConfig>"""


def test_a_group_local_queue_with_a_domain_runs_on_one_instance(tmp_path: Path) -> None:
    body = "<InitialOwner>a</InitialOwner><GroupLocalQueueDomain>east</GroupLocalQueueDomain>"
    cfg = parse_config(CONFIG.format(tag="GroupLocalQueue", body=body), base_dir=tmp_path)
    (queue,) = cfg.queues
    assert (queue.kind, queue.initial_owner, queue.domain) == ("GroupLocalQueue", "a", "east")
    server = ServerThread(cfg, fsync="never").start()
    try:
        publish(server, "work", [{"n": 1}])
        consumer = Consumer(server)
        consumer.subscribe("work")
        ((hdr, body_bytes),) = consumer.sync()
        assert json.loads(body_bytes) == {"n": 1} and "lp" in hdr
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("tag", "body", "message"),
    [
        (
            "Queue",
            "<GroupLocalQueueDomain>east</GroupLocalQueueDomain>",
            "<GroupLocalQueueDomain> is for <GroupLocalQueue> only",
        ),
        (
            "GroupLocalQueue",
            "<InitialOwner>a</InitialOwner><GroupLocalQueueDomain> </GroupLocalQueueDomain>",
            "<GroupLocalQueueDomain> in <GroupLocalQueue> is empty",
        ),
        (
            "GroupLocalQueue",
            "<InitialOwner>a</InitialOwner><GroupLocalQueueDomain>x</GroupLocalQueueDomain>"
            "<GroupLocalQueueDomain>y</GroupLocalQueueDomain>",
            "duplicate <GroupLocalQueueDomain>",
        ),
        (
            "GroupLocalQueue",
            "<GroupLocalQueueDomain>east</GroupLocalQueueDomain>",
            "<GroupLocalQueue> requires <InitialOwner>",
        ),
    ],
)
def test_bad_domains_are_refused(tmp_path: Path, tag: str, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(CONFIG.format(tag=tag, body=body), base_dir=tmp_path)
