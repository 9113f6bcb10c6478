"""The core does no I/O, the HA client holds a client instead of subclassing it, and what
the clients inherit from other modules keeps no state."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import pathlib
import textwrap

import ampsclient.core
from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient
from ampsclient.wiring import Wiring
from ampsclient.writer import FrameWriter

CORE = pathlib.Path(ampsclient.core.__file__).parent
BANNED = {"asyncio", "socket", "selectors", "ssl", "threading", "websockets", "time"}

OFFICIAL = json.loads(
    (pathlib.Path(__file__).resolve().parents[1] / "migration" / "official_api.json").read_text()
)["classes"]
"""The official client's public names (``tools/official_api_manifest.py``)."""

CLIENT_EXTRAS = {
    # our documented additions to the official Client's names (each has a docstring)
    "connect_and_logon": "connect then logon (the official HAClient's name)",
    "connected": "True while a transport is open",
    "core": "the sans-I/O core the client drives (docs/design.md)",
    "default_max_depth": "max_depth of new message streams",
    "encode_data": "data as bytes for the connection's message type",
    "flush_acks": "send the pending batched queue acks (the C++ client's flushAcks)",
    "logged_on": "True between a logon and a disconnect",
    "logon_ack": "the last logon ack",
    "logon_options": "options sent with every logon",
    "message_type": "the connection's message type",
    "publish_path": "the publish callable a facade may hold (the C lane itself)",
    "queue_acks": "the queue acknowledgements (ampsclient.acks), as a property",
    "run_sow_delete": "the step under the sow_delete conveniences",
    "run_subscription": "the step under the subscribe/sow conveniences",
    "server_version": "the version string of the logon ack",
    "set_observer": "opt-in instrumentation (ampsclient.observer, ampsclient.tracing)",
    "state": "the core's connection state",
    "statistics": "frame and delivery counters",
    "transport_filter": "the official set_transport_filter's callable, as a property",
    "uri": "the URI without credentials",
}
"""Public names of :class:`AsyncClient` that the official ``Client`` lacks."""

HA_EXTRAS = {
    # names of the HA client beyond its held client's face and the official HAClient's
    "bookmark_store": "the bookmark store",
    "client": "the AsyncClient it holds",
    "get_logon_timeout": "the logon timeout (official set_timeout's value)",
    "logon_correlation_data": "the held client's attribute, forwarded",
    "publish_and_wait": "publish and await the persisted ack",
    "publish_future": "publish; a future resolved by the persisted ack",
    "publish_store": "the publish store",
    "set_logon_timeout": "how long each logon waits (official set_timeout)",
    "unpersisted_count": "the publish store's unpersisted count, as a property",
}
"""Public names of :class:`AsyncHAClient` beyond :data:`CLIENT_EXTRAS` and the official
``HAClient``'s."""

WIRING_USERS = ("client.py", "wiring.py", "sync.py", "disconnects.py", "ha/")
"""The modules of the package that may touch a client's ``_wiring`` (its docstring says so)."""


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


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


def test_the_client_face_is_the_official_api_and_the_documented_extras() -> None:
    """No plumbing on the face: what the HA client and the sync facade drive on the client
    they hold is on its ``_wiring`` (``ampsclient/wiring.py``), not among its public names."""
    assert not issubclass(AsyncClient, FrameWriter)  # it holds its writer
    face = public(AsyncClient)
    assert sorted(face - set(OFFICIAL["Client"]["members"])) == sorted(CLIENT_EXTRAS)
    for name in CLIENT_EXTRAS:
        assert inspect.getdoc(getattr(AsyncClient, name)), name
    wiring = AsyncClient("face")._wiring
    assert type(wiring) is Wiring
    plumbing = {f.name for f in dataclasses.fields(Wiring)} - {"writer"}
    assert plumbing & face == set()
    # the writer's names the client has are its own user API, forwarded to its writer
    forwarded = {"publish", "delta_publish", "encode_data", "set_publish_batching"}
    assert public(FrameWriter) & face == forwarded


def test_only_the_wrappers_touch_a_clients_wiring() -> None:
    package = CORE.parent
    users = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        if any(isinstance(n, ast.Attribute) and n.attr == "_wiring" for n in ast.walk(tree)):
            users.append(path.relative_to(package).as_posix())
    assert users and all(u.startswith(WIRING_USERS) for u in users), users


def test_the_ha_client_holds_a_client_and_has_its_public_face() -> None:
    assert not issubclass(AsyncHAClient, AsyncClient)
    ha = AsyncHAClient("face")
    assert type(ha.client) is AsyncClient
    face = public(AsyncClient)
    ha_face = public(AsyncHAClient)
    assert sorted(face - ha_face) == []
    extras = ha_face - face - set(OFFICIAL["HAClient"]["members"])
    assert sorted(extras) == sorted(HA_EXTRAS)
    for name in HA_EXTRAS:
        assert inspect.getdoc(getattr(AsyncHAClient, name)), name
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


def test_the_face_keeps_no_state_of_its_own() -> None:
    """ConnectionFace (ha/face.py) reaches the held client through its holder's public
    ``client`` property: no private attribute is shared across the two files."""
    path = CORE.parent / "ha" / "face.py"
    private = {
        node.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
    }
    assert private == set()


def own_names(cls: type) -> set[str]:
    """The names ``cls``'s body declares: its methods and attributes, those under
    ``if TYPE_CHECKING:`` included (the contract it states for its hosts)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    names: set[str] = set()
    stack: list[ast.stmt] = list(body.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            stack.extend(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_the_clients_bases_from_other_modules_keep_no_state() -> None:
    """Issue #29, composition not mixins: what a client inherits from another module is a
    stateless base (the convenience commands, the queue-ack methods, the generated sync
    twins, the official spellings, the HA client's face): no ``__init__``, no attribute
    written on ``self``, and no private attribute of its host read unless its own body
    declares it (an abstract method or a ``TYPE_CHECKING`` contract). State lives in held
    objects (the writer, the wiring, ``QueueAcks``, the sync client's ``DropHandling``)."""
    from ampsclient.sync import Client, HAClient

    checked: set[type] = set()
    for host in (AsyncClient, AsyncHAClient, Client, HAClient):
        for base in host.__mro__[1:]:
            if not base.__module__.startswith("ampsclient") or base.__module__ == host.__module__:
                continue
            checked.add(base)
            assert "__init__" not in vars(base), base
            tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
            declared = own_names(base)
            for node in ast.walk(tree):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                    targets = [node.target]
                for t in targets:
                    assert not (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ), (base, t.attr)
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    assert node.attr in declared, (base, node.attr)
    names = {b.__name__ for b in checked}
    assert {"AsyncCommands", "QueueAckMethods", "ConnectionFace", "OfficialClientMethods"} <= names
    assert {"SyncClientFace", "SyncCommands"} <= names


def test_the_abstract_bases_refuse_a_host_that_lacks_a_primitive() -> None:
    """The convenience commands and the queue-ack methods state what they are built on:
    a class that lacks one of those primitives cannot be instantiated."""
    import abc

    from ampsclient.acks import QueueAckMethods
    from ampsclient.convenience import AsyncCommands

    assert AsyncCommands.__abstractmethods__ == {"execute", "execute_async", "encode_data"}
    assert QueueAckMethods.__abstractmethods__ == {"queue_acks"}
    for base in (AsyncCommands, QueueAckMethods):
        assert isinstance(base, abc.ABCMeta)
        lacking = type("Lacking", (base,), {})
        try:
            lacking()
        except TypeError as exc:
            assert "abstract" in str(exc)
        else:
            raise AssertionError(f"{base.__name__} accepted a host without its primitives")
