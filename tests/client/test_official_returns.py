"""Return values and accepted arguments of official scripts, run with our client and (where
installed) the official one: ``publish``/``delta_publish`` return 0 on a plain client,
``publish_flush`` takes ``Message.AckType.PersistedEnum`` (a ``flush`` asking for that ack)
and refuses other acks with the official message, and ``Command.get_ack_type()`` shows what
the official client shows."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread

pytestmark = pytest.mark.integration

CLIENTS = ["ampsclient", "AMPS"]


def module(name: str) -> Any:
    return pytest.importorskip("AMPS") if name == "AMPS" else importlib.import_module(name)


@pytest.mark.parametrize("name", CLIENTS)
def test_plain_publish_returns_zero_and_publish_flush_takes_an_ack_type(
    server: ServerThread, name: str
) -> None:
    amps = module(name)
    client = amps.Client(f"{name}-returns")
    client.connect(server.uri("tcp", "json"))
    client.logon()
    try:
        # the first publish of a topic takes the Python path, the next ones the C lane
        assert [client.publish("t", "{}") for _ in range(3)] == [0, 0, 0]  # before: None
        assert client.publish("t", "{}", expiration=10) == 0
        assert client.delta_publish("t", "{}") == 0
        ack_type = amps.Message.AckType
        assert client.publish_flush(5000, ack_type.PersistedEnum) is None  # before: UsageError
        assert client.publish_flush(5000, ack_type.ProcessedEnum) is None
        assert client.publish_flush() is None
        with pytest.raises(amps.CommandException, match="processed or persisted"):
            client.publish_flush(1000, ack_type.StatsEnum)
    finally:
        client.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_command_get_ack_type_shows_what_the_official_client_shows(name: str) -> None:
    command = module(name).Command
    assert command("sow").get_ack_type() == ""
    assert command("sow").add_ack_type("processed").get_ack_type() == ",processed"
    added = command("sow").add_ack_type("processed").add_ack_type("completed")
    assert added.get_ack_type() == ",processed,completed"
    assert command("sow").set_ack_type("stats,persisted").get_ack_type() == "stats,persisted"
    assert command("sow").set_ack_type("stats").add_ack_type("processed").get_ack_type() == (
        "stats,processed"
    )
    assert command("sow").set_ack_type_enum(12).get_ack_type() == "processed,persisted"
    assert command("sow").set_ack_type("stats,persisted").get_ack_type_enum() == 40
