"""The dashboard's query panel in a real headless browser (Debian's chromium driven by
Playwright): read-only ``sow``, ``subscribe`` and ``sow_and_subscribe`` from the page over the
server's own WebSocket transport, in AMPS' JSON-over-WebSocket frames, logged on with the
admin interface's single-use token when the admin interface has authentication.

``AMPSCLIENT_UPDATE_SCREENSHOT=1`` also writes docs/img/admin-query-panel.png.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from ampsclient import AMPSError, Client
from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.config import parse_config
from ampsclient_server_stub.security.users import add_user

from ._support import admin_port, request

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
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "img" / "admin-query-panel.png"
WAIT_MS = 30_000
FAST = {"scheme": "pbkdf2-sha256", "iterations": 1000}
OPS = ("ops", "ops-secret")
VIEWER = ("viewer", "viewer-secret")

SOW = """<SOW>
    <Topic><Name>orders</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
    <Topic><Name>book</Name><MessageType>json</MessageType><Key>/id</Key></Topic>
  </SOW>"""
TRANSPORTS = """<Transports>
    <Transport><Name>tcp</Name><Type>tcp</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
    <Transport><Name>ws</Name><Type>ws</Type><InetAddr>127.0.0.1:0</InetAddr></Transport>
  </Transports>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"chromium is not installed ({CHROMIUM}): the query panel's browser test needs it; "
            "`make setup` installs it (apt-get install chromium)"
        )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A server without security: the panel needs no credentials."""
    base = tmp_path_factory.mktemp("open")
    xml = f"""<AMPSConfig><Name>query-open</Name>{TRANSPORTS}{SOW}
      <Admin><InetAddr>127.0.0.1:0</InetAddr></Admin></AMPSConfig>"""
    thread = ServerThread(parse_config(xml, base_dir=base)).start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def secured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """The admin interface and both transports need credentials (one users file); the page
    itself (``/`` and ``/static/``) is anonymous, so a visitor without credentials sees the
    panel but must not be able to query."""
    base = tmp_path_factory.mktemp("secured")
    users = base / "users.json"
    add_user(users, *OPS, read=[".*"], write=[".*"], admin=[".*"], **FAST)  # type: ignore[arg-type]
    add_user(users, *VIEWER, read=[".*"], admin=["^/amps/instance"], **FAST)  # type: ignore[arg-type]
    xml = f"""<AMPSConfig><Name>query-secured</Name>
      <Authentication><Module>users-file</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Authentication>
      <Entitlement><Module>amps-default-entitlement-module</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Entitlement>
      {TRANSPORTS}{SOW}
      <Admin><InetAddr>127.0.0.1:0</InetAddr>
        <AnonymousPaths>^/$|^/static/|^/amps/(instance|host)</AnonymousPaths></Admin></AMPSConfig>"""
    thread = ServerThread(parse_config(xml, base_dir=base)).start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def anonymous_admin_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """The transports need credentials; the admin interface is all anonymous, so it hands no
    logon token: the user types the transport's credentials into the panel."""
    base = tmp_path_factory.mktemp("anonymous-admin")
    users = base / "users.json"
    add_user(users, *OPS, read=[".*"], write=[".*"], **FAST)  # type: ignore[arg-type]
    xml = f"""<AMPSConfig><Name>query-typed</Name>
      <Authentication><Module>users-file</Module>
        <Options><UsersFile>{users}</UsersFile></Options></Authentication>
      {TRANSPORTS}{SOW}
      <Admin><InetAddr>127.0.0.1:0</InetAddr><AnonymousPaths>.</AnonymousPaths></Admin>
      </AMPSConfig>"""
    thread = ServerThread(parse_config(xml, base_dir=base)).start()
    try:
        yield thread
    finally:
        thread.stop()


def _client(thread: ServerThread, name: str, auth: tuple[str, str] | None = None) -> Client:
    uri = thread.uri()
    if auth is not None:
        uri = uri.replace("tcp://", f"tcp://{auth[0]}:{auth[1]}@")
    client = Client(name)
    client.connect(uri)
    client.logon()
    return client


def _publish(client: Client, topic: str, records: list[dict[str, Any]]) -> None:
    for record in records:
        client.publish(topic, json.dumps(record, separators=(",", ":")))
    client.flush()


def _page(
    browser: sync_api.Browser, thread: ServerThread, auth: tuple[str, str] | None = None
) -> tuple[sync_api.BrowserContext, sync_api.Page]:
    credentials: Any = {"username": auth[0], "password": auth[1]} if auth is not None else None
    context = browser.new_context(
        http_credentials=credentials, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    response = page.goto(f"http://127.0.0.1:{admin_port(thread)}/")
    assert response is not None and response.status == 200
    return context, page


def _run(
    page: sync_api.Page,
    command: str,
    topic: str,
    *,
    filter: str = "",
    orderby: str = "",
    top_n: str = "",
    options: str = "",
) -> None:
    page.select_option("#query-command", command)
    page.fill("#query-topic", topic)
    page.fill("#query-filter", filter)
    if command != "subscribe":
        page.fill("#query-orderby", orderby)
        page.fill("#query-topn", top_n)
    page.fill("#query-options", options)
    page.click("#query-run")


def _wait_phase(page: sync_api.Page, *phases: str) -> str:
    page.wait_for_function(
        f"{json.dumps(list(phases))}.includes(document.getElementById('query').dataset.phase)",
        timeout=WAIT_MS,
    )
    phase: str = page.evaluate("document.getElementById('query').dataset.phase")
    return phase


def _bodies(page: sync_api.Page) -> list[Any]:
    shown: list[str] = page.eval_on_selector_all(
        "#query-rows tr[data-body]", "rows => rows.map(r => r.dataset.body)"
    )
    return [json.loads(body) for body in shown]


def test_sow_with_filter_and_orderby_shows_the_records(
    browser: sync_api.Browser, open_server: ServerThread
) -> None:
    records: list[dict[str, Any]] = [
        {"id": i, "qty": q, "side": s}
        for i, (q, s) in enumerate(
            [(5, "buy"), (40, "sell"), (15, "buy"), (90, "buy"), (25, "sell"), (60, "buy")]
        )
    ]
    pub = _client(open_server, "query-sow-pub")
    try:
        _publish(pub, "orders", records)
    finally:
        pub.close()
    context, page = _page(browser, open_server)
    try:
        _run(page, "sow", "orders", filter="/side = 'buy' AND /qty > 10", orderby="/qty DESC")
        assert _wait_phase(page, "done", "error") == "done", page.inner_text("#query-error")
        expected = sorted(
            (r for r in records if r["side"] == "buy" and r["qty"] > 10),
            key=lambda r: -r["qty"],
        )
        assert _bodies(page) == expected
        cells = page.eval_on_selector_all(
            "#query-rows tr", "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
        )
        assert cells == [
            [str(n + 1), str(r["id"]), str(r["qty"]), r["side"]] for n, r in enumerate(expected)
        ]
        assert page.inner_text("#query-status") == f"{len(expected)} record(s)"
        shot = page.locator("#query").screenshot()
        assert shot.startswith(b"\x89PNG")
        if os.environ.get("AMPSCLIENT_UPDATE_SCREENSHOT") == "1":
            DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
            DOCS_IMAGE.write_bytes(shot)
        # top_n: the first two in that order
        _run(
            page,
            "sow",
            "orders",
            filter="/side = 'buy' AND /qty > 10",
            orderby="/qty DESC",
            top_n="2",
        )
        page.wait_for_function(
            "document.getElementById('query').dataset.phase === 'done'"
            " && document.getElementById('query').dataset.rows === '2'",
            timeout=WAIT_MS,
        )
        assert _bodies(page) == expected[:2]
    finally:
        context.close()


def test_subscribe_shows_each_new_message(
    browser: sync_api.Browser, open_server: ServerThread
) -> None:
    context, page = _page(browser, open_server)
    pub = _client(open_server, "query-sub-pub")
    try:
        _run(page, "subscribe", "ticks", filter="/n >= 0")
        assert _wait_phase(page, "live", "error") == "live", page.inner_text("#query-error")
        sent = [{"n": n, "sym": "IBM"} for n in range(3)]
        _publish(pub, "ticks", [{"n": -1, "sym": "filtered out"}, *sent])
        page.wait_for_function(
            "document.getElementById('query').dataset.updates === '3'", timeout=WAIT_MS
        )
        assert _bodies(page) == sent  # in order, once each, the filtered one absent
    finally:
        pub.close()
        context.close()


def test_sow_and_subscribe_shows_the_snapshot_then_updates(
    browser: sync_api.Browser, open_server: ServerThread
) -> None:
    pub = _client(open_server, "query-sas-pub")
    context, page = _page(browser, open_server)
    try:
        snapshot = [{"id": i, "px": 100 + i} for i in range(3)]
        _publish(pub, "book", snapshot)
        _run(page, "sow_and_subscribe", "book", orderby="/id")
        assert _wait_phase(page, "live", "error") == "live", page.inner_text("#query-error")
        assert _bodies(page) == snapshot
        assert page.evaluate("document.getElementById('query').dataset.updates") == "0"
        _publish(pub, "book", [{"id": 1, "px": 555}, {"id": 7, "px": 700}])
        page.wait_for_function(
            "document.getElementById('query').dataset.updates === '2'", timeout=WAIT_MS
        )
        # the update replaced record 1 in place; the new record came last
        assert _bodies(page) == [
            snapshot[0],
            {"id": 1, "px": 555},
            snapshot[2],
            {"id": 7, "px": 700},
        ]
        page.click("#query-stop")
        assert _wait_phase(page, "stopped") == "stopped"
    finally:
        pub.close()
        context.close()


def test_a_bad_filter_shows_the_servers_error_once(
    browser: sync_api.Browser, open_server: ServerThread
) -> None:
    context, page = _page(browser, open_server)
    try:
        _run(page, "sow_and_subscribe", "orders", filter="/qty >>> 'x")
        assert _wait_phase(page, "error", "live", "done") == "error"
        text = page.inner_text("#query-error")
        assert text.startswith("bad filter")
        assert text.count("bad filter") == 1
        assert page.evaluate("document.getElementById('query').dataset.rows") == "0"
    finally:
        context.close()


def test_with_admin_authentication_the_page_queries_with_a_one_time_token(
    browser: sync_api.Browser, secured_server: ServerThread
) -> None:
    pub = _client(secured_server, "query-secure-pub", OPS)
    try:
        _publish(pub, "orders", [{"id": 1, "qty": 3}, {"id": 2, "qty": 4}])
    finally:
        pub.close()
    tokens = secured_server.server.security.logon_tokens  # type: ignore[union-attr]
    redeemed = tokens.redeemed
    context, page = _page(browser, secured_server, OPS)
    try:
        _run(page, "sow", "orders", orderby="/id")
        assert _wait_phase(page, "done", "error") == "done", page.inner_text("#query-error")
        assert _bodies(page) == [{"id": 1, "qty": 3}, {"id": 2, "qty": 4}]
        assert tokens.redeemed == redeemed + 1
        assert len(tokens) == 0  # used up
    finally:
        context.close()


def test_an_unauthenticated_page_cannot_query(
    browser: sync_api.Browser, secured_server: ServerThread
) -> None:
    # the page and its statistics are anonymous; the browser's credentials are wrong (a
    # browser without any would prompt the user for /query/logon's challenge)
    context, page = _page(browser, secured_server, ("intruder", "nope"))
    try:
        _run(page, "sow", "orders")
        assert _wait_phase(page, "error", "done") == "error"
        assert page.inner_text("#query-error").startswith("query logon refused: 401")
        assert page.evaluate("document.getElementById('query').dataset.rows") == "0"
        assert page.inner_text("#query-rows") == "no records"
    finally:
        context.close()


def test_query_logon_is_an_action_and_its_token_logs_on_once(
    secured_server: ServerThread,
) -> None:
    port = admin_port(secured_server)
    assert request(port, "/query/logon", method="POST", body=b"")[0] == 401
    status, _, body = request(port, "/query/logon", method="POST", body=b"", auth=OPS)
    assert status == 403 and b"admin token" in body  # CSRF defence, as actions
    assert request(port, "/query/logon", auth=OPS)[0] == 405
    # an admin user whose admin patterns do not match /query/logon gets no token
    assert request(port, "/query/logon", method="POST", body=b"", auth=VIEWER)[0] == 403
    token = json.loads(request(port, "/amps/administrator", auth=OPS)[2])["token"]
    status, _, body = request(
        port,
        "/query/logon",
        method="POST",
        body=b"",
        auth=OPS,
        headers={"X-AMPS-Admin-Token": token},
    )
    assert status == 200, body
    info = json.loads(body)
    assert info["uri"] == secured_server.uri("ws")
    assert info["user_id"] == "ops" and info["expires_in"] == 60
    ws = info["uri"].replace("ws://", f"ws://ops:{info['password']}@")
    first = Client("token-once")
    first.connect(ws)
    first.logon()
    first.close()
    again = Client("token-twice")
    with pytest.raises(AMPSError):
        again.connect(ws)
        again.logon()
    again.close()


def test_without_admin_authentication_the_user_types_the_transports_credentials(
    browser: sync_api.Browser, anonymous_admin_server: ServerThread
) -> None:
    pub = _client(anonymous_admin_server, "query-typed-pub", OPS)
    try:
        _publish(pub, "orders", [{"id": 9, "qty": 1}])
    finally:
        pub.close()
    tokens = anonymous_admin_server.server.security.logon_tokens  # type: ignore[union-attr]
    context, page = _page(browser, anonymous_admin_server)
    try:
        _run(page, "sow", "orders")  # no credentials: the transport refuses the logon
        assert _wait_phase(page, "error", "done") == "error"
        assert page.inner_text("#query-error") == "auth failure"
        page.fill("#query-user", OPS[0])
        page.fill("#query-password", OPS[1])
        _run(page, "sow", "orders")
        assert _wait_phase(page, "done", "error") == "done", page.inner_text("#query-error")
        assert _bodies(page) == [{"id": 9, "qty": 1}]
        assert tokens.issued == 0  # nobody authenticated: no token handed out
    finally:
        context.close()
