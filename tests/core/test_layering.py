"""The core does no I/O, and the HA client holds a client instead of subclassing it."""

from __future__ import annotations

import ast
import pathlib

import ampsclient.core
from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient

CORE = pathlib.Path(ampsclient.core.__file__).parent
BANNED = {"asyncio", "socket", "selectors", "ssl", "threading", "websockets", "time"}

WING_ONLY = {
    # the plumbing a wrapper drives on the client it holds; not part of the HA client's face
    "abort",
    "attach",
    "bind_loop",
    "call_later",
    "call_soon",
    "detach",
    "drain_now",
    "loop",
    "transport",
    "transport_writable",
    "close_stream",
    "emit_state",
    "new_stream",
    "process_events",
    "publish_gate_open",
    "publish_lock",
    "queue_frame",
    "queue_frame_now",
    "report",
    "schedule_drain",
    "send_command",
    "send_now",
    "set_event_handler",
    "set_publish_gate",
    "stored_publish_suffixes",
    "wait_writable",
    "wake_pending",
    "writable",
    "set_caller_writes",
    "write_from_caller",
}


def test_the_core_imports_nothing_that_does_io() -> None:
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) >= 4
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in BANNED, (path.name, name)


def test_the_ha_client_holds_a_client_and_has_its_public_face() -> None:
    assert not issubclass(AsyncHAClient, AsyncClient)
    ha = AsyncHAClient("face")
    assert type(ha.client) is AsyncClient
    public = {n for n in dir(AsyncClient) if not n.startswith("_")}
    missing = sorted(n for n in public - WING_ONLY if not hasattr(ha, n))
    assert missing == []
    # settings reach the held connection
    ha.set_heartbeat(2.0)
    assert ha.client.core.heartbeat_timeout == 4.0
    ha.logon_options = "ack_conflation=10ms"
    assert ha.client.logon_options == "ack_conflation=10ms"


WINGS = {"client", "ha", "sync", "transport", "writer", "stream", "stores", "spark", "cli"}


def test_the_core_imports_no_wing() -> None:
    """The cores (the connection's and the HA sequence's) know nothing of the asyncio
    client, the HA client, the transports or the stores they are handed."""
    for path in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert (node.module or "").split(".")[0] not in WINGS, (path.name, node.module)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                parts = (node.module or "").split(".")
                assert not (parts[0] == "ampsclient" and parts[1:2] and parts[1] in WINGS)


def test_the_ha_wing_leaves_the_reconnect_sequence_to_the_core() -> None:
    """ha/client.py replays nothing and builds no resubscribe command itself: it calls the
    HA sequence (core/ha_sequence.py) for both."""
    path = CORE.parent / "ha" / "client.py"
    calls = {
        node.func.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "replay" not in calls and "discard_up_to" not in calls
    assert {"logged_on", "next_resubscribe", "resubscribed", "resubscribe_failed", "open"} <= calls
    assert "drop_subscription_commands" not in calls
