"""The live dashboard in a real headless browser (Debian's chromium driven by Playwright) against
a real server process with traffic: its charts show the traffic the server counts.

``AMPSCLIENT_UPDATE_SCREENSHOT=1`` also writes docs/img/admin-dashboard.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampsclient import Client, Message
from ampsclient_server_stub.harness import ServerProcess
from ampsclient_server_stub.testing import wait_for

from ._support import get_json

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "img" / "admin-dashboard.png"

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
if not os.path.exists(CHROMIUM):  # pragma: no cover - `make setup` installs it
    pytest.skip("chromium is not installed (make setup installs it)", allow_module_level=True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ServerProcess, int]]:
    proc = ServerProcess(
        data_dir=tmp_path / "data", extra_args=["--admin-port", "0"], die_with_parent=True
    )
    proc.start()
    try:
        wait_for(
            lambda: any("admin interface at" in line for line in proc.stderr_lines),
            what="the admin interface's log line",
        )
        line = next(line for line in proc.stderr_lines if "admin interface at" in line)
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match is not None, line
        yield proc, int(match[1])
    finally:
        proc.stop()


@pytest.mark.serial
def test_dashboard_charts_show_the_traffic(server: tuple[ServerProcess, int]) -> None:
    proc, port = server
    stop = threading.Event()
    got: list[Message] = []
    pub = Client("dash-pub")
    sub = Client("dash-sub")
    for client in (pub, sub):
        client.connect(proc.uri())
        client.logon()
    sub.subscribe(got.append, "dash")
    sub.flush()

    def publish() -> None:
        n = 0
        began = time.monotonic()
        while not stop.is_set():
            pub.publish("dash", json.dumps({"n": n, "pad": "x" * 100}))
            n += 1
            ahead = began + n / 300 - time.monotonic()  # ~300 messages a second
            if ahead > 0:
                stop.wait(ahead)

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(f"http://127.0.0.1:{port}/")
                # a few one-second updates while the traffic flows
                page.wait_for_function(
                    "Number(document.body.dataset.updates) >= 6"
                    " && Number(document.getElementById('chart-rates').dataset.points) >= 6",
                    timeout=30_000,
                )
                before = get_json(port, "/amps/instance/statistics")
                t0 = time.monotonic()
                page.wait_for_function("Number(document.body.dataset.updates) >= 9", timeout=30_000)
                after = get_json(port, "/amps/instance/statistics")
                server_rate = (after["publishes"] - before["publishes"]) / (time.monotonic() - t0)
                rates = page.locator("#chart-rates")
                shown_pub = float(rates.get_attribute("data-last-publishes") or "0")
                shown_out = float(rates.get_attribute("data-last-out") or "0")
                shown_clients = float(
                    page.locator("#chart-clients").get_attribute("data-last") or "0"
                )
                shown_journal = float(
                    page.locator("#chart-journal").get_attribute("data-last") or "0"
                )
                shown_lag = page.locator("#chart-lag").get_attribute("data-last")
                assert server_rate > 150
                assert 0.5 * server_rate <= shown_pub <= 1.5 * server_rate
                assert 0.5 * server_rate <= shown_out <= 1.5 * server_rate  # one subscriber
                assert shown_clients == 2
                journal_bytes = get_json(port, "/amps/instance/journal/bytes")
                assert 0 < shown_journal <= journal_bytes
                assert shown_lag == "0"
                assert page.locator("#status").inner_text() == "live"
                rows = page.locator("#clients tbody tr").all_inner_texts()
                assert any(r.startswith("dash-pub") for r in rows)
                assert any(r.startswith("dash-sub") for r in rows)
                assert "dash" in page.locator("#topics tbody").inner_text()
                # the host and process figures of the AMPS tree (/amps/host/cpus/all, memory)
                meta = page.locator("#meta")
                assert 0 <= float(meta.get_attribute("data-host-busy") or "-1") <= 100
                rss = get_json(port, "/amps/instance/memory/rss")
                assert 0.5 * rss <= float(meta.get_attribute("data-rss") or "0") <= 2 * rss
                assert "% busy" in meta.inner_text() and "MB resident" in meta.inner_text()
                shot = page.screenshot(full_page=True)
                assert shot.startswith(b"\x89PNG")
                if os.environ.get("AMPSCLIENT_UPDATE_SCREENSHOT") == "1":
                    DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
                    DOCS_IMAGE.write_bytes(shot)
            finally:
                browser.close()
    finally:
        stop.set()
        publisher.join()
        pub.close()
        sub.close()
    assert len(got) > 0


ATTACK_PAGE = """<!doctype html><html><body>
<img id="i" src="http://127.0.0.1:{port}/amps/administrator/clients/victim/disconnect">
<script>
const url = "http://127.0.0.1:{port}/amps/administrator/clients/victim/disconnect";
const img = new Promise(r => {{ const i = document.getElementById("i");
  i.onload = i.onerror = r; if (i.complete) r(); }});
const post = fetch(url, {{method: "POST", mode: "no-cors"}}).catch(() => null);
const form = fetch(url, {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "application/x-www-form-urlencoded"}}, body: "token=x"}})
  .catch(() => null);
Promise.all([img, post, form]).then(() => {{ document.body.dataset.done = "1"; }});
</script></body></html>"""


@pytest.mark.serial
def test_cross_site_page_cannot_act_but_the_dashboard_button_can(
    server: tuple[ServerProcess, int],
) -> None:
    """A page of another site (here http://localhost:<other port>) makes the browser send the
    disconnect action by <img> and no-cors fetches: refused. The dashboard's own disconnect
    button (a same-origin POST with the admin token) works."""
    import http.server

    proc, port = server
    page = ATTACK_PAGE.format(port=port).encode()

    class Attack(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attack)
    serving = threading.Thread(target=attacker.serve_forever, daemon=True)
    serving.start()
    victim = Client("victim")
    victim.connect(proc.uri())
    victim.logon()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                tab = browser.new_page()
                tab.goto(f"http://localhost:{attacker.server_address[1]}/attack.html")
                tab.wait_for_function("document.body.dataset.done === '1'", timeout=30_000)
                assert "victim" in get_json(port, "/amps/instance/clients")  # still there
                tab.goto(f"http://127.0.0.1:{port}/")
                button = tab.locator('button[data-disconnect="victim"]')
                button.wait_for(timeout=30_000)
                button.click()
                tab.wait_for_function(
                    "document.getElementById('action-result').textContent"
                    " === 'disconnected victim'",
                    timeout=30_000,
                )
                wait_for(
                    lambda: "victim" not in get_json(port, "/amps/instance/clients"),
                    what="the victim disconnected by the dashboard's button",
                )
            finally:
                browser.close()
    finally:
        victim.close()
        attacker.shutdown()
        attacker.server_close()
