"""``--admin-port`` on the command line: off by default, loopback by default, and it overrides
the address of a config file's ``<Admin>`` (keeping its other settings)."""

from __future__ import annotations

from pathlib import Path

from ampsclient_server_stub.__main__ import build_config, parse_args


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
