"""``Replication/Destination/Transport/Name`` (issue 28: it was parsed and never read): as in
AMPS, it names the link in the logs. A real server dials a destination nobody listens on and
reports it unreachable, naming the destination and its transport.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.harness import free_port
from ampsclient_server_stub.testing import wait_for

pytestmark = pytest.mark.integration

LOGGER = "ampsclient_server_stub.replication"


def config(tmp: Path, peer_port: int, transport_name: str) -> str:
    return f"""<AMPSConfig><Name>A</Name><Group>g</Group>
      <Transports>
        <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
        <Transport><Name>repl</Name><Type>amps-replication</Type>
          <InetAddr>127.0.0.1:0</InetAddr></Transport>
      </Transports>
      <TransactionLog><JournalDirectory>{tmp / "journal"}</JournalDirectory>
        <Topic><Name>orders</Name><MessageType>json</MessageType></Topic></TransactionLog>
      <Replication><Destination><Name>B</Name><Group>g</Group>
        <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
        <Transport>{transport_name}<Type>amps-replication</Type>
          <InetAddr>127.0.0.1:{peer_port}</InetAddr></Transport>
      </Destination></Replication></AMPSConfig>"""


def reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and "is unreachable" in r.getMessage()
    ]


@pytest.mark.parametrize(
    ("element", "expected"),
    [
        ("<Name>to-b-east</Name>", "destination 'B' (transport 'to-b-east') is unreachable"),
        ("", "destination 'B' is unreachable"),
    ],
)
def test_the_destination_transport_name_names_the_link_in_the_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, element: str, expected: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    xml = config(tmp_path, free_port(), element)
    with ServerThread(parse_config(xml, base_dir=tmp_path)):
        wait_for(lambda: reports(caplog), what="the unreachable report")
    (line,) = reports(caplog)
    assert expected in line
