"""Issue #32: a server that refuses every publish for a while (a full disk: ``tx store
failure``; here a SOW topic's ``bad sow key``) is reported once per episode, not once per
message: one warning when the refusals start, one with their count when a publish is
persisted again. Real server, real sockets."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from ampsclient import HAClient
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import SowTopicConfig, default_config

pytestmark = pytest.mark.integration


def test_refusals_are_logged_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    config = default_config(tcp_port=0, ws_port=0)
    config = dataclasses.replace(
        config, sow_topics=(*config.sow_topics, SowTopicConfig("orders", "json", keys=("/id",)))
    )
    with ServerThread(config) as server, caplog.at_level(logging.WARNING, "ampsclient.ha"):
        client = HAClient("refusal-log")
        try:
            client.get_server_chooser().add(server.uri("tcp", "json"))
            client.connect_and_logon()
            sequences = [client.publish("orders", "not a json document") for _ in range(200)]
            client.publish("orders", '{"id": 1}')
            client.publish_flush(10_000)
            for _ in range(50):  # a second episode
                client.publish("orders", "still not json")
            client.publish("orders", '{"id": 2}')
            client.publish_flush(10_000)
        finally:
            client.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "ampsclient.ha"]
    assert len(lines) == 4, lines
    assert "refused publish" in lines[0] and "bad sow key" in lines[0]
    assert f"s={sequences[0]}:" in lines[0]
    assert (
        f"refused 200 publish(es) for 'bad sow key', s={sequences[0]}..{sequences[-1]}"
        in (lines[1])
    )
    assert "refused 50 publish(es)" in lines[3]
