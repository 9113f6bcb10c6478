"""When the delay strategy gives up reconnecting in the background, nothing waits forever:
a subscription stream ends with the error and the exception listener hears of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsclient.ha import FixedDelayStrategy
from ampsclient.ha.reconnect import RetryLimitError
from ampsclient.sync import HAClient
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import Inbox

pytestmark = pytest.mark.integration


def test_background_give_up_ends_streams_and_tells_the_listener(tmp_path: Path) -> None:
    heard = Inbox()
    with (
        ServerProcess(data_dir=tmp_path / "s") as server,
        HAClient("ha-give-up", reconnect_delay_strategy=FixedDelayStrategy(20, maximum=500)) as ha,
    ):
        ha.set_exception_listener(heard)
        ha.get_server_chooser().add(server.uri())
        ha.connect_and_logon()
        stream = ha.subscribe("events")
        stream.timeout(20_000)
        ha.publish("events", '{"n":1}')
        first = next(iter(stream))
        assert first is not None and first.get_data() == '{"n":1}'
        server.kill()
        with pytest.raises(RetryLimitError):
            for message in stream:
                assert message is not None, "the stream timed out instead of ending"
        heard.wait(lambda box: len(box) >= 1, timeout=5.0)
        assert any(isinstance(e, RetryLimitError) for e in heard.snapshot())
