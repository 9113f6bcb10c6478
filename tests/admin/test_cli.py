"""``--admin-port`` on the command line: off by default, loopback by default, and it overrides
the address of a config file's ``<Admin>`` (keeping its other settings)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ampsclient_server_stub.__main__ import build_config, parse_args

SERVER = (sys.executable, "-m", "ampsclient_server_stub")


def test_admin_is_off_by_default() -> None:
    assert build_config(parse_args([])).admin is None


def test_admin_port_is_loopback_by_default() -> None:
    admin = build_config(parse_args(["--admin-port", "8085"])).admin
    assert admin is not None
    assert (admin.host, admin.port) == ("127.0.0.1", 8085)
    admin = build_config(parse_args(["--admin-port", "0.0.0.0:0"])).admin
    assert admin is not None
    assert (admin.host, admin.port) == ("0.0.0.0", 0)


def test_admin_port_overrides_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "amps.xml"
    path.write_text(
        "<AMPSConfig><Name>x</Name><Transports><Transport><Name>tcp</Name><Type>tcp</Type>"
        "<InetAddr>127.0.0.1:0</InetAddr></Transport></Transports>"
        "<Admin><InetAddr>127.0.0.1:9999</InetAddr><Interval>2s</Interval></Admin></AMPSConfig>"
    )
    admin = build_config(parse_args(["--config", str(path)])).admin
    assert admin is not None and admin.port == 9999
    admin = build_config(parse_args(["--config", str(path), "--admin-port", "0"])).admin
    assert admin is not None
    assert (admin.host, admin.port, admin.interval) == ("127.0.0.1", 0, 2.0)


@pytest.mark.integration
def test_a_busy_admin_port_fails_the_start_clearly() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*SERVER, "--tcp-port", "0", "--ws-port", "0", "--admin-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert "cannot start the server" in done.stderr
    assert "address already in use" in done.stderr.lower()
