"""``ExpirationModel`` over real sockets: a message published to a SOW underlying topic
carries its own expiration (the publish's ``e``, else the SOW topic's ``Expiration``); the
model decides how it combines with the queue's ``Expiration``. Both are measured from the
publication. A message of a topic without a SOW carries none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _queue_support import Consumer

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import ConfigError, parse_config
from ampsclient_server_stub.testing import RawClient, wait_for

pytestmark = pytest.mark.integration

CONFIG = """<AMPSConfig><Name>t</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>journal</JournalDirectory>
  <Topic><Name>^(jobs|timed|plain)$</Name><MessageType>json</MessageType></Topic>
</TransactionLog>
<SOW>
  <Topic><Name>jobs</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  <Topic><Name>timed</Name><MessageType>json</MessageType><Key>/id</Key>
    <Expiration>100s</Expiration></Topic>
  <Queue><Name>q</Name><MessageType>json</MessageType>
    <UnderlyingTopic>^(jobs|timed|plain)$</UnderlyingTopic>
    <DefaultPublishTarget>plain</DefaultPublishTarget>
    <Expiration>{queue}</Expiration>{model}</Queue>
</SOW></AMPSConfig>"""


def run(tmp_path: Path, *, queue: str = "10s", model: str | None = None) -> ServerThread:
    body = "" if model is None else f"<ExpirationModel>{model}</ExpirationModel>"
    cfg = parse_config(CONFIG.format(queue=queue, model=body), base_dir=tmp_path)
    return ServerThread(cfg, fsync="never").start()


def send(server: ServerThread, topic: str, n: int, e: int | None = None) -> None:
    with RawClient(server.tcp_port) as raw:
        raw.logon(f"pub-{topic}-{n}")
        hdr: dict[str, Any] = {"c": "p", "t": topic}
        if e is not None:
            hdr["e"] = e
        raw.send(hdr, json.dumps({"id": n}).encode())
        raw.send({"c": "flush", "cid": "f", "a": "processed"})
        raw.recv_until(lambda h: h.get("cid") == "f")


def lifetimes(server: ServerThread) -> dict[int, float | None]:
    """Each queued message's lifetime in seconds (expiry minus publication), by id."""

    def read() -> dict[int, float | None]:
        queue = server.broker.queues.queues[("json", "q")]  # type: ignore[union-attr]
        return {
            json.loads(m.data)["id"]: None if m.expires is None else round(m.expires - m.enqueued)
            for m in queue.messages.values()
        }

    return server.call(read)


@pytest.mark.parametrize(
    ("model", "own", "sow_default", "plain"),
    [
        (None, 1000, 100, 10),  # default: the message's own, else the queue's
        ("default", 1000, 100, 10),
        ("queue", 10, 10, 10),
        ("latest", 1000, 100, 10),
        ("earliest", 10, 10, 10),
    ],
)
def test_each_model_combines_the_two_expirations(
    tmp_path: Path, model: str | None, own: int, sow_default: int, plain: int
) -> None:
    server = run(tmp_path, model=model)
    try:
        send(server, "jobs", 1, e=1000)  # its own expiration: the publish's e
        send(server, "timed", 2)  # its own expiration: the SOW topic's Expiration
        send(server, "plain", 3, e=1000)  # no SOW: e means nothing, no own expiration
        send(server, "jobs", 4)  # a SOW topic without Expiration and no e: none
        assert lifetimes(server) == {1: own, 2: sow_default, 3: plain, 4: 10}
    finally:
        server.stop()


def test_latest_and_earliest_with_the_queue_expiration_longer(tmp_path: Path) -> None:
    for model, expected in (("latest", 5000), ("earliest", 1000)):
        server = run(tmp_path / model, queue="5000s", model=model)
        try:
            send(server, "jobs", 1, e=1000)
            assert lifetimes(server) == {1: expected}
        finally:
            server.stop()


def test_a_message_expires_by_its_own_expiration_and_the_lifetime_survives_a_restart(
    tmp_path: Path,
) -> None:
    server = run(tmp_path, queue="1h")
    try:
        send(server, "jobs", 1, e=1)  # expires after a second, not an hour
        send(server, "jobs", 2, e=3000)
        wait_for(lambda: list(lifetimes(server)) == [2], 10, "message 1 expired (time_limit)")
    finally:
        server.stop()
    server = run(tmp_path, queue="1h")  # recovered from the journal: e is journaled with it
    try:
        assert lifetimes(server) == {2: 3000}
        consumer = Consumer(server)
        consumer.subscribe("q")
        ((_hdr, body),) = consumer.sync()
        assert json.loads(body) == {"id": 2}
    finally:
        server.stop()


def test_a_bad_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="<ExpirationModel> must be one of default, queue"):
        parse_config(CONFIG.format(queue="1s", model="<ExpirationModel>never</ExpirationModel>"))
