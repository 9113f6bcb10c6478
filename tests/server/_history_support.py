"""Helpers of the historical SOW query tests (``test_config_history``,
``test_message_type_history``, ``test_clock_step_history``): a configuration with a
``<History>`` topic, timestamps as AMPS spells them, publishing up to a persisted flush, and a
``sow`` query read to its end, over a :class:`~ampsclient_server_stub.testing.RawClient`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from ampsclient.protocol.header import decode_header
from ampsclient_server_stub.testing import RawClient


def history_config(history: str, *, recorded: str = "q") -> str:
    """SOW topics ``q`` (with ``history``) and ``plain``, json keyed by ``/id``; the
    transaction log records ``recorded``."""
    return f"""<AMPSConfig><Name>hist</Name>
  <Transports><Transport><Name>t</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr>
  </Transport></Transports>
  <SOW>
    <Topic><Name>q</Name><MessageType>json</MessageType><Key>/id</Key>{history}</Topic>
    <Topic><Name>plain</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  </SOW>
  <TransactionLog><JournalSize>1MB</JournalSize>
    <PreallocatedJournalFiles>1</PreallocatedJournalFiles>
    <Topic><Name>{recorded}</Name><MessageType>json</MessageType></Topic>
  </TransactionLog>
</AMPSConfig>"""


def stamp(when: float) -> str:
    """``when`` (seconds since the epoch) as an AMPS timestamp bookmark."""
    moment = datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y%m%dT%H%M%S") + f".{moment.microsecond:06d}Z"


def pass_time(then: float) -> None:
    """Return once the wall clock is past ``then``: what is sent next is received after it."""
    while time.time() <= then:
        time.sleep(0.001)


def send_and_flush(raw: RawClient, commands: list[tuple[dict[str, Any], bytes]]) -> None:
    for hdr, body in commands:
        raw.send(hdr, body)
    raw.send({"c": "flush", "cid": "F", "a": "persisted"})
    raw.recv_until(lambda h: h.get("cid") == "F", 10)


def sow_query(raw: RawClient, header: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """Send the ``sow`` query ``header`` (``cid`` ``Q``, acks ``processed,completed``); its last
    ack (``completed``, or the failure) and the data of the records it returned, in order."""
    raw.send({"c": "sow", "cid": "Q", "a": "processed,completed"} | header)
    records: list[bytes] = []
    while True:
        head, body = raw.recv(10)
        if head.get("c") == "ack" and head.get("cid") == "Q":
            if head.get("status") == "failure" or head.get("a") == "completed":
                return head, records
        elif head.get("c") == "sow":
            pos = 0
            while pos < len(body):
                rec, end = decode_header(body[pos:])
                length = int(rec["l"])
                records.append(body[pos + end : pos + end + length])
                pos += end + length


def query(raw: RawClient, topic: str, bookmark: str | None = None) -> dict[Any, Any]:
    """The json records of a sow query, ``{id: v}``, or the failure ack (``{"failure": ack}``)."""
    ack, records = sow_query(
        raw, {"t": topic} if bookmark is None else {"t": topic, "bm": bookmark}
    )
    if ack.get("status") == "failure":
        return {"failure": ack}
    docs = [json.loads(record) for record in records]
    return {doc["id"]: doc["v"] for doc in docs}
