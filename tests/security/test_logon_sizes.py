"""A logon's client name, user id and password are bounded (issue 31: a 1 MB client name was
accepted and echoed); the refusal says which field and why. Real server, raw socket."""

from __future__ import annotations

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import default_config
from ampsclient_server_stub.engine.commands import MAX_CLIENT_NAME, MAX_PASSWORD
from ampsclient_server_stub.testing import RawClient

pytestmark = pytest.mark.integration


def logon_ack(port: int, **fields: str) -> dict[str, object]:
    with RawClient(port, timeout=10) as raw:
        raw.send({"c": "logon", "cid": "L", "a": "processed", **fields})
        while True:
            for hdr, _ in raw.read_some(1 << 22, timeout=10):
                if hdr.get("c") == "ack":
                    return dict(hdr)


@pytest.mark.parametrize(
    ("field", "size", "reason"),
    [
        ("client_name", 1024 * 1024, "client name too long"),
        ("client_name", MAX_CLIENT_NAME + 1, "client name too long"),
        ("user_id", MAX_CLIENT_NAME + 1, "user id too long"),
        ("pw", MAX_PASSWORD + 1, "password too long"),
    ],
)
def test_oversized_logon_fields_are_refused(field: str, size: int, reason: str) -> None:
    with ServerThread(default_config(tcp_port=0, ws_port=0)) as server:
        ack = logon_ack(server.server.tcp_port, **{field: "n" * size})
        assert ack["status"] == "failure" and ack["reason"] == reason
        assert "n" * 100 not in str(ack)  # the oversized value is not echoed
        ok = logon_ack(server.server.tcp_port, client_name="c" * MAX_CLIENT_NAME)
        assert ok["status"] == "success"
