"""The proxied-transfer actions (``queues/replicated_actions.py``):
``amps-action-do-enable-proxied-transfer`` / ``amps-action-do-disable-proxied-transfer`` on
``amps-action-on-schedule``, run by a real server process; what cannot run is refused at
start-up by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from _queue_support import Consumer, bodies, publish
from _replicated_support import QUEUE, TOPIC, pair, queue_xml, stats, wait_stat

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config

pytestmark = pytest.mark.integration


def _action(module: str, *, on: str = "amps-action-on-schedule", topic: str = QUEUE) -> str:
    return (
        f"<Actions><Action><On><Module>{on}</Module><Options><Every>100ms</Every></Options></On>"
        f"<Do><Module>{module}</Module><Options><Topic>{topic}</Topic>"
        "<MessageType>json</MessageType></Options></Do></Action></Actions>"
    )


ENABLE = "amps-action-do-enable-proxied-transfer"
DISABLE = "amps-action-do-disable-proxied-transfer"


def test_scheduled_enable_takes_over_the_messages_of_a_dead_owner(tmp_path: Path) -> None:
    cluster = pair(tmp_path, queue_xml(), b_queue=queue_xml() + _action(ENABLE))
    try:
        a, b = cluster.node("A"), cluster.node("B")
        # enabled on B while A is up: nothing is taken (A is reachable)
        publish(a, TOPIC, [{"id": f"a{i}"} for i in range(5)])  # type: ignore[arg-type]
        wait_stat(b, "messages", 5)
        wait_stat(b, "proxied_transfer", True)
        assert (stats(b)["owned"], stats(b)["transferred_in"]) == (0, 0)
        a.kill()
        on_b = Consumer(b)  # type: ignore[arg-type]
        on_b.subscribe(QUEUE, o="max_backlog=10")
        got = on_b.wait_deliveries(5, timeout=20)
        assert sorted(d["id"] for d in bodies(got)) == [f"a{i}" for i in range(5)]
        assert stats(b)["transferred_in"] == 5
        on_b.close()
    finally:
        cluster.stop()


def _start(tmp_path: Path, sow: str, actions: str, *, replicate: bool = True) -> None:
    replication = (
        "<Replication><Destination><Name>B</Name><SyncType>async</SyncType><Transport>"
        "<InetAddr>127.0.0.1:1</InetAddr><Type>amps-replication</Type></Transport>"
        "<Topic><Name>.*</Name><MessageType>json</MessageType></Topic></Destination></Replication>"
        if replicate
        else ""
    )
    xml = f"""<AMPSConfig><Name>A</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory>
<Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
<SOW>{sow}</SOW>{replication}{actions}</AMPSConfig>"""
    server = ServerThread(parse_config(xml, base_dir=tmp_path), fsync="never")
    try:
        server.start()
    finally:
        server.stop()


QUEUE_SOW = queue_xml()[len("<SOW>") : -len("</SOW>")]
LOCAL_SOW = QUEUE_SOW.replace("<Queue>", "<LocalQueue>").replace("</Queue>", "</LocalQueue>")


@pytest.mark.parametrize(
    ("sow", "actions", "replicate", "message"),
    [
        (QUEUE_SOW, _action(ENABLE, topic="nope"), True, "'nope' \\(json\\) is not a replicated"),
        (LOCAL_SOW, _action(DISABLE), False, "proxied transfer needs <Replication>"),
        (
            QUEUE_SOW,
            _action(ENABLE, on="amps-action-on-sow-expire-message"),
            True,
            "amps-action-on-sow-expire-message runs only",
        ),
        (
            QUEUE_SOW,
            _action(ENABLE).replace("<Topic>work</Topic>", ""),
            True,
            "requires <Topic> and <MessageType>",
        ),
    ],
)
def test_what_cannot_run_is_refused(
    tmp_path: Path, sow: str, actions: str, replicate: bool, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _start(tmp_path, sow, actions, replicate=replicate)


def test_a_valid_action_starts(tmp_path: Path) -> None:
    _start(tmp_path, QUEUE_SOW, _action(DISABLE))
