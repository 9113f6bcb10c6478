"""A payload that is not valid for its message type, published to a SOW topic keyed on a field
(issue #28: "a filter, key or select on a payload that is not valid for its type: the AMPS
reason where the guide gives one, counted in the statistics, the connection kept"): refused
with ``bad sow key`` (the key cannot be computed), counted once in the failures, nothing
stored, and the next command on the same connection answered. Real server, raw socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.payload import encode
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

SOH = "\x01"

CASES = {
    # type: (SOW key, a malformed payload, a valid one with key 1)
    "json": ("/id", b'{"id": 1', b'{"id":1}'),
    "msgpack": ("/id", b"\xc1", encode("msgpack", {"id": 1})),
    "fix": ("/55", f"55=1{SOH}tag=x{SOH}".encode(), f"55=1{SOH}38=5{SOH}".encode()),
    "nvfix": ("/id", f"id=1{SOH}no-equals{SOH}".encode(), f"id=1{SOH}".encode()),
    "xml": ("/o/id", b"<o><id>1</id>", b"<o><id>1</id></o>"),
    "bson": ("/id", b"\x05\x00\x00", encode("bson", {"id": 1})),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    topics = "".join(
        f"<Topic><Name>t-{mt}</Name><MessageType>{mt}</MessageType><Key>{key}</Key></Topic>"
        for mt, (key, _bad, _good) in CASES.items()
    )
    xml = f"""<AMPSConfig><Name>malformed</Name><Transports><Transport><Name>t</Name>
      <Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
      <SOW>{topics}</SOW></AMPSConfig>"""
    base = tmp_path_factory.mktemp("malformed")
    with ServerThread(parse_config(xml, base_dir=base), record_all_topics=False) as thread:
        yield thread


def failures(server: ServerThread) -> int:
    return int(server.call(lambda: server.server.broker.counters["failures"]))  # type: ignore[union-attr]


@pytest.mark.parametrize("mt", sorted(CASES))
def test_a_malformed_payload_is_refused_once_counted_and_the_connection_kept(
    server: ServerThread, mt: str
) -> None:
    key, bad, good = CASES[mt]
    with RawClient(server.tcp_port, timeout=10.0) as raw:
        raw.logon(f"malformed-{mt}", mt=mt)
        before = failures(server)
        raw.send({"c": "p", "t": f"t-{mt}", "cid": "bad", "a": "processed"}, bad)
        ack, _ = raw.recv_until(lambda h: h.get("cid") == "bad", 10)
        assert (ack.get("status"), ack.get("reason")) == ("failure", "bad sow key")
        assert failures(server) == before + 1
        raw.send({"c": "p", "t": f"t-{mt}", "cid": "good", "a": "processed"}, good)
        ack, _ = raw.recv_until(lambda h: h.get("cid") == "good", 10)
        assert ack.get("status") == "success"
        raw.send({"c": "sow", "t": f"t-{mt}", "cid": "q", "a": "completed", "filter": f"{key} = 1"})
        frames = []
        while True:
            hdr, body = raw.recv(10)
            if hdr.get("cid") == "q" and hdr.get("c") == "ack":
                break
            if hdr.get("c") == "sow":
                frames.append(body)
        assert len(frames) == 1 and frames[0].endswith(good)  # only the valid one stored
        assert failures(server) == before + 1  # counted once
