"""Replication configuration errors found at start-up (issue #17): each names the element."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ampsclient_server_stub.config import ConfigError, parse_config

TWO_REPLICATION_TRANSPORTS = """<AMPSConfig>
  <Name>A</Name>
  <Transports>
    <Transport><Name>repl-a</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:10004</InetAddr></Transport>
    <Transport><Name>repl-b</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:10005</InetAddr></Transport>
  </Transports>
  <TransactionLog><JournalDirectory>journal</JournalDirectory></TransactionLog>
</AMPSConfig>
"""


def test_a_second_amps_replication_transport_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(TWO_REPLICATION_TRANSPORTS, base_dir=tmp_path)
    message = str(info.value)
    assert "line 6" in message
    assert "<Transport> 'repl-b' is a second amps-replication transport" in message
    assert "('repl-a' is the first)" in message


def test_one_amps_replication_transport_is_accepted(tmp_path: Path) -> None:
    one = TWO_REPLICATION_TRANSPORTS.replace(
        "<Transport><Name>repl-b</Name><Type>amps-replication</Type>",
        "<Transport><Name>t</Name><Type>tcp</Type>",
    )
    config = parse_config(one, base_dir=tmp_path)
    assert [t.type for t in config.transports] == ["amps-replication", "tcp"]


def test_the_server_refuses_to_start_with_two_replication_transports(tmp_path: Path) -> None:
    path = tmp_path / "config.xml"
    path.write_text(TWO_REPLICATION_TRANSPORTS)
    done = subprocess.run(
        [sys.executable, "-m", "ampsclient_server_stub", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "'repl-b' is a second amps-replication transport" in done.stderr
