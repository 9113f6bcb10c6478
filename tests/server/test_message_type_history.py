"""A historical SOW query (a ``sow`` with a timestamp bookmark on a topic with ``<History>``)
on each parsed message type (issue #28: "historical SOW" among the places a document is
used): the SOW as it was, rebuilt from the transaction log by the type's own SOW key, with a
filter in the type's identifiers; the current SOW untouched. Real server, raw socket."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _history_support import pass_time, send_and_flush, sow_query, stamp

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.engine.payload import decode, encode
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration

SOH = "\x01"
PARTS = "th-parts"  # composite-local: json, nvfix


def _parts(oid: int, v: str) -> bytes:
    out = b""
    for part in (f'{{"id":{oid}}}'.encode(), f"v={v}{SOH}".encode()):
        out += len(part).to_bytes(4, "big") + part
    return out


@dataclass(frozen=True)
class Case:
    mt: str
    key: str
    value: str
    """The identifier of ``v``."""
    build: Callable[[int, str], bytes]
    read: Callable[[Any], tuple[str, str]]
    """``(id, v)`` of a decoded record."""


CASES = [
    Case(
        "nvfix",
        "/id",
        "/v",
        lambda i, v: f"id={i}{SOH}v={v}{SOH}".encode(),
        lambda d: (d["id"], d["v"]),
    ),
    Case(
        "xml",
        "/o/id",
        "/o/v",
        lambda i, v: f"<o><id>{i}</id><v>{v}</v></o>".encode(),
        lambda d: (d["o"]["id"], d["o"]["v"]),
    ),
    Case(
        "bson",
        "/id",
        "/v",
        lambda i, v: encode("bson", {"id": str(i), "v": v}),
        lambda d: (d["id"], d["v"]),
    ),
    Case(PARTS, "/0/id", "/1/v", _parts, lambda d: (str(d["0"]["id"]), d["1"]["v"])),
]


def config(case: Case) -> str:
    return f"""<AMPSConfig><Name>hist-types</Name>
  <MessageTypes><MessageType><Name>{PARTS}</Name><Module>composite-local</Module>
    <MessagePart>json</MessagePart><MessagePart>nvfix</MessagePart></MessageType></MessageTypes>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  </Transport></Transports>
  <SOW><Topic><Name>q</Name><MessageType>{case.mt}</MessageType><Key>{case.key}</Key>
    <History><Window>1h</Window></History></Topic></SOW>
  <TransactionLog><Topic><Name>q</Name><MessageType>{case.mt}</MessageType></Topic>
  </TransactionLog>
</AMPSConfig>"""


def query(raw: RawClient, case: Case, **fields: Any) -> dict[str, str]:
    """``{id: v}`` of the records a sow query returns."""
    ack, records = sow_query(raw, {"t": "q"} | fields)
    assert ack.get("status") != "failure", str(ack)
    return dict(case.read(decode(case.mt, record)) for record in records)


@pytest.mark.parametrize("case", CASES, ids=[c.mt for c in CASES])
def test_a_historical_query_on_each_type_returns_the_sow_as_it_was(
    tmp_path: Path, case: Case
) -> None:
    xml = config(case)
    with (
        ServerThread(parse_config(xml, base_dir=tmp_path), record_all_topics=False) as server,
        RawClient.from_uri(server.uri("tcp", case.mt), timeout=10.0) as raw,
    ):
        raw.logon(f"hist-{case.mt}", mt=case.mt)
        send_and_flush(
            raw,
            [
                ({"c": "p", "t": "q", "s": 1}, case.build(1, "a")),
                ({"c": "p", "t": "q", "s": 2}, case.build(2, "a")),
            ],
        )
        then = time.time()
        pass_time(then)  # the next records are received after `then`
        send_and_flush(
            raw,
            [
                ({"c": "p", "t": "q", "s": 3}, case.build(1, "b")),
                ({"c": "sow_delete", "t": "q", "s": 4, "filter": f"{case.key} = 2"}, b""),
                ({"c": "p", "t": "q", "s": 5}, case.build(3, "c")),
            ],
        )
        assert query(raw, case, bm=stamp(then)) == {"1": "a", "2": "a"}
        assert query(raw, case, bm=stamp(then), filter=f"{case.key} = 2") == {"2": "a"}
        assert query(raw, case, bm=stamp(time.time()), filter=f"{case.value} <> 'a'") == {
            "1": "b",
            "3": "c",
        }
        assert query(raw, case) == {"1": "b", "3": "c"}  # the current SOW is untouched
