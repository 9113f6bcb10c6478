"""The progress line and the summary, driven by an injected clock (no sleeping)."""

from __future__ import annotations

import io

from ampsclient.cli.progress import Progress
from ampsclient_server_stub.testing.clock import ManualTime


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rate_line_once_per_interval_and_summary() -> None:
    time, out = ManualTime(100.0), io.StringIO()
    progress = Progress("subscribe", stream=out, clock=time.clock)
    for _ in range(10):
        progress.tick()
    assert out.getvalue() == ""  # short runs print nothing but the summary
    time.advance(1.0)
    progress.tick()
    assert out.getvalue() == "subscribe: 11 msgs, 11 msg/s, 1.0 s\n"
    progress.tick()  # within the next interval: no new line
    assert out.getvalue().count("\n") == 1
    time.advance(1.0)
    line = progress.summary("", interrupted=True)
    assert line == "subscribe: 12 messages in 2.00 s (6 msg/s), interrupted"
    assert out.getvalue().endswith(line + "\n")


def test_bar_when_the_total_is_known_redrawn_in_place_on_a_terminal() -> None:
    time, out = ManualTime(100.0), Tty()
    progress = Progress("publish", stream=out, total=400, unit="bytes", clock=time.clock)
    time.advance(2.0)
    progress.tick(100)
    assert out.getvalue() == (
        "\rpublish: [######------------------]  25% 1 msgs, 0 msg/s, 2.0 s\x1b[K"
    )
    time.advance(2.0)
    progress.tick(300)
    assert "[########################] 100% 2 msgs" in out.getvalue()
    progress.summary("2 persisted")
    assert out.getvalue().endswith("\r\x1b[Kpublish: 2 messages in 4.00 s (0 msg/s), 2 persisted\n")


def test_quiet_writes_nothing() -> None:
    time, out = ManualTime(100.0), io.StringIO()
    progress = Progress("sow", stream=out, enabled=False, clock=time.clock)
    time.advance(5)
    progress.tick()
    assert progress.summary() == "sow: 1 messages in 5.00 s (0 msg/s)"
    assert out.getvalue() == ""
