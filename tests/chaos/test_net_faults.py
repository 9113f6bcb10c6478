"""``--net-faults`` of the chaos runner: the kinds it accepts and the figures it prints (the
faults themselves are tested in ``tests/testing/test_proxy_faults.py`` and run by
``python -m tests.chaos.run --net-faults all``)."""

from __future__ import annotations

import pytest

from tests.chaos.net_faults import NET_FAULTS, NetReport, parse_net_faults


def test_parse_net_faults() -> None:
    assert parse_net_faults("") == []
    assert parse_net_faults("all") == list(NET_FAULTS)
    assert parse_net_faults("latency, half_open") == ["latency", "half_open"]
    with pytest.raises(SystemExit, match="unknown kind"):
        parse_net_faults("latency,netem")


def test_net_report_lines() -> None:
    assert NetReport().lines() == []  # no partition: nothing printed
    report = NetReport(detect_s=[2.0, 2.2], recover_s=[0.1], unrecovered=1, failover=True)
    report.partitions["to_client"] = 2
    lines = report.lines()
    assert lines[0] == "one-way partitions: 2 (to_client 2)"
    assert "min 2.00 s, median 2.10 s, max 2.20 s" in lines[1]
    assert lines[2].startswith("failover") and "(1 not back in time)" in lines[2]
