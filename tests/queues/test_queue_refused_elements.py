"""Documented queue elements the reference server refuses, each by name with its reason,
rather than accepting and ignoring them (``shared/queues.md`` §11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampsclient_server_stub.config import ConfigError, parse_config

BASE = """<AMPSConfig><Name>t</Name>
<Transports><Transport><Name>tcp</Name><Type>tcp</Type><Protocol>amps</Protocol>
  <InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>
<TransactionLog><JournalDirectory>j</JournalDirectory></TransactionLog>
{extra}
<SOW><Queue><Name>q</Name><MessageType>json</MessageType></Queue></SOW></AMPSConfig>"""


def parse(tmp_path: Path, extra: str) -> None:
    parse_config(BASE.format(extra=extra), base_dir=tmp_path)


@pytest.mark.parametrize("value", ["250us", "1us", "10ms"])
def test_queue_delivery_flush_interval_is_refused_by_name(tmp_path: Path, value: str) -> None:
    element = f"<QueueDeliveryFlushInterval>{value}</QueueDeliveryFlushInterval>"
    extra = f"<Tuning><Queue>{element}</Queue></Tuning>"
    with pytest.raises(ConfigError) as info:
        parse(tmp_path, extra)
    message = str(info.value)
    assert "<QueueDeliveryFlushInterval> (Tuning/Queue/QueueDeliveryFlushInterval)" in message
    assert "same event-loop turn" in message
    assert message.startswith("line 5:")


def test_the_same_config_without_it_is_accepted(tmp_path: Path) -> None:
    parse(tmp_path, "")  # the refusal above is the element's, not the rest of the config's


@pytest.mark.parametrize("value", ["yes", "on", ""])
def test_file_backed_metadata_takes_enabled_or_disabled(tmp_path: Path, value: str) -> None:
    queue = f"<FileBackedMetadata>{value}</FileBackedMetadata>"
    xml = BASE.format(extra="").replace("</MessageType></Queue>", f"</MessageType>{queue}</Queue>")
    with pytest.raises(ConfigError, match="<FileBackedMetadata>"):
        parse_config(xml, base_dir=tmp_path)
