"""No method is replaced on an instance: the method a reader sees in the class is the one that
runs (issue #29; ``shared/style.md``). A lane (a C lane's method, another object's method)
is held in an attribute of its own and called by the class's method
(:func:`ampsclient._accel.lane_method`).

Two checks: every ``self.<name> = ...`` in the package's classes names no method of the
class (an AST scan, resolved against the imported class), and after connect, logon and the
HA setup no client's ``__dict__`` holds a callable that shadows an attribute of its class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from ampsclient import _accel
from ampsclient.client import AsyncClient
from ampsclient.ha.client import AsyncHAClient
from ampsclient.sync import Client, HAClient

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "ampsclient"


def _self_assignments(cls_node: ast.ClassDef) -> Iterator[tuple[str, int]]:
    """``(name, line)`` of each ``self.<name> = ...`` (also annotated, augmented, chained and
    tuple targets, and ``setattr(self, "<name>", ...)``) in the class's own methods."""
    for node in ast.walk(cls_node):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "self"
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            yield node.args[1].value, node.lineno
        for target in targets:
            for leaf in ast.walk(target):
                if (
                    isinstance(leaf, ast.Attribute)
                    and isinstance(leaf.value, ast.Name)
                    and leaf.value.id == "self"
                    and isinstance(leaf.ctx, ast.Store)
                ):
                    yield leaf.attr, leaf.lineno


def _is_method(cls: type, name: str) -> bool:
    """Whether ``name`` is a method of ``cls`` (or its bases): a function, a lane method, a
    static or class method; not a property or other data descriptor, not a plain value."""
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return False
    if isinstance(attr, staticmethod | classmethod):
        return True
    if inspect.isfunction(attr) or inspect.ismethoddescriptor(attr):
        return not inspect.isdatadescriptor(attr)
    return _accel.LaneMethod is not None and isinstance(attr, _accel.LaneMethod)  # type: ignore[arg-type]


def test_no_method_is_assigned_on_an_instance_in_the_source() -> None:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module_name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if module_name.endswith("__init__"):
            module_name = module_name.rsplit(".", 1)[0]
        source = path.read_text()
        tree = ast.parse(source)
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        if not classes:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # an optional extra (pyspark) not installed: AST names only
            module = None
        for cls_node in classes:
            cls = getattr(module, cls_node.name, None) if module is not None else None
            own = {
                n.name
                for n in cls_node.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and not any(
                    (isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter"))
                    or (isinstance(d, ast.Name) and d.id in ("property", "cached_property"))
                    for d in n.decorator_list
                )
            }
            for name, line in _self_assignments(cls_node):
                if (isinstance(cls, type) and _is_method(cls, name)) or name in own:
                    rel = path.relative_to(PACKAGE.parent)
                    found.append(f"{rel}:{line}: {cls_node.name}: self.{name} = ...")
    assert found == []


def test_the_scan_finds_an_instance_patch() -> None:
    """The scan above is not vacuous: it finds the pattern this test forbids."""
    tree = ast.parse(
        "class A:\n"
        "    def __init__(self):\n"
        "        self.publish = self._lane.publish\n"
        "        self.a, self.b = 1, 2\n"
        "        setattr(self, 'close', None)\n"
        "    def publish(self): ...\n"
    )
    cls_node = tree.body[0]
    assert isinstance(cls_node, ast.ClassDef)
    assert [n for n, _ in _self_assignments(cls_node)] == ["publish", "a", "b", "close"]

    class A:
        def publish(self) -> None: ...

        @property
        def state(self) -> int:
            return 0

    assert _is_method(A, "publish") and not _is_method(A, "state")
    assert _is_method(AsyncClient, "publish") and _is_method(HAClient, "discard")


def _shadowing(obj: object) -> list[str]:
    """Names in ``vars(obj)`` holding a callable where the class has an attribute too."""
    return sorted(
        name
        for name, value in vars(obj).items()
        if callable(value) and hasattr(type(obj), name) and not name.startswith("__")
    )


def test_no_client_holds_a_method_of_its_own_after_logon(server_uri: str) -> None:
    with Client("no-patch-sync") as client:
        client.connect(server_uri)
        client.logon(5000)
        client.publish("orders", "{}")
        assert _shadowing(client) == []
        assert _shadowing(client.async_client) == []
    with HAClient("no-patch-ha") as ha:
        ha.connect_and_logon(server_uri)
        ha.publish("orders", "{}")
        ha.publish_flush(10_000)
        assert _shadowing(ha) == []
        assert _shadowing(ha.async_client) == []
        assert _shadowing(ha.async_client.client) == []


async def test_no_async_client_holds_a_method_of_its_own_after_logon(server_uri: str) -> None:
    client = AsyncClient("no-patch-async")
    await client.connect(server_uri)
    await client.logon(5000)
    client.publish("orders", "{}")
    assert _shadowing(client) == []
    await client.close()
    ha = AsyncHAClient("no-patch-async-ha")
    ha.set_publish_store(None)
    try:
        await ha.connect_and_logon(server_uri)
        ha.publish("orders", "{}")
        await ha.publish_flush(10_000)
        assert _shadowing(ha) == []
        assert _shadowing(ha.client) == []
    finally:
        await ha.close()


def test_a_lane_method_hands_calls_to_the_lane_or_runs_its_body() -> None:
    """``lane_method``'s C dispatch and its Python twin behave alike (differential)."""
    impls: list[Any] = [_accel.py_lane_method]
    if _accel.LaneMethod is not None:
        impls.append(_accel.LaneMethod)
    for make in impls:

        def body(self: Any, topic: str, data: object = None, *, key: str = "") -> tuple[Any, ...]:
            """The body."""
            return ("body", self.name, topic, data, key)

        class Holder:
            send = make("_send_lane", body)

            def __init__(self, lane: Any) -> None:
                self.name = "h"
                if lane is not ...:
                    self._send_lane = lane

        class Slotted(Holder):  # the lane in a slot: the C dispatch reads it at its offset
            __slots__ = ("_send_lane",)

        def lane(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            return ("lane", args, kwargs)

        for kind in (Holder, Slotted, Holder):  # (a dict again after a slotted class)
            assert_lane_method(kind, lane, body)


def assert_lane_method(Holder: Any, lane: Any, body: Any) -> None:
    """The cases of one holder class (see the test above)."""
    unset, none, held = Holder(...), Holder(None), Holder(lane)
    for h in (unset, none):
        assert h.send("t") == ("body", "h", "t", None, "")
        assert h.send("t", 1, key="k") == ("body", "h", "t", 1, "k")
        assert Holder.send(h, topic="t") == ("body", "h", "t", None, "")
    assert held.send("t", 1, key="k") == ("lane", ("t", 1), {"key": "k"})
    assert Holder.send(held, "t") == ("lane", ("t",), {})
    bound = held.send
    assert bound("x") == ("lane", ("x",), {})
    assert Holder.send.__doc__ == "The body."
    assert Holder.send.__wrapped__ is body
    assert inspect.unwrap(Holder.send) is body
    assert list(inspect.signature(held.send).parameters) == ["topic", "data", "key"]


def test_a_lane_method_whose_lane_is_another_lane_method() -> None:
    """A facade's lane is its client's lane method (the sync ``Client.publish``): the call
    reaches the client's lane, or the client's body with the client as ``self``, with any
    number of arguments (the C dispatch follows the chain without a second call)."""
    impls: list[Any] = [_accel.py_lane_method]
    if _accel.LaneMethod is not None:
        impls.append(_accel.LaneMethod)
    for make in impls:

        def inner_body(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            return ("inner", self.name, args, kwargs)

        def outer_body(self: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            return ("outer",)

        class Client:
            send = make("_lane", inner_body)

            def __init__(self) -> None:
                self.name = "client"
                self._lane: Any = None

        class Facade:
            send = make("_client_send", outer_body)

            def __init__(self) -> None:
                self.client = Client()
                self._client_send = self.client.send

        facade = Facade()
        many = tuple(range(12))  # more than the C dispatch copies on its stack
        assert facade.send("t") == ("inner", "client", ("t",), {})
        assert facade.send("t", 1, key="k") == ("inner", "client", ("t", 1), {"key": "k"})
        assert facade.send(*many) == ("inner", "client", many, {})
        assert facade.send(*many, a=1, b=2) == ("inner", "client", many, {"a": 1, "b": 2})
        facade.client._lane = lambda *a, **k: ("lane", a, k)
        assert facade.send("t", key="k") == ("lane", ("t",), {"key": "k"})
        facade._client_send = None
        assert facade.send("t") == ("outer",)


def test_a_relay_calls_its_current_target() -> None:
    """``Relay.call`` (C) and its twin ``PyRelay.call`` call the relay's current target with
    the same arguments; a ``call`` taken before the target changed reaches the new one; no
    target is a ``TypeError`` (differential)."""
    impls: list[Any] = [_accel.PyRelay]
    if _accel.Relay is not _accel.PyRelay:
        impls.append(_accel.Relay)
    for make in impls:
        seen: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        relay = make(lambda *a, seen=seen, **k: seen.append(("first", a, k)) or len(seen))
        call = relay.call
        assert call(1) == 1
        assert call(1, 2, key="k") == 2
        relay.target = lambda *a, seen=seen, **k: seen.append(("second", a, k)) or -len(seen)
        assert call("m") == -3
        assert seen == [
            ("first", (1,), {}),
            ("first", (1, 2), {"key": "k"}),
            ("second", ("m",), {}),
        ]
        relay.target = set().discard  # a C function (METH_O): called directly by the C relay
        assert call(5) is None
        with pytest.raises(TypeError):
            call(5, 6)
        relay.target = None
        with pytest.raises(TypeError):
            call(1)


def test_a_c_lane_method_answers_attribute_access_with_a_c_lane() -> None:
    """With the C speedups, ``obj.method`` is the lane itself when that is a C function
    (followed through a facade's lane method): a caller who holds it calls the lane with no
    dispatch. A Python lane, or none, gives a bound method that looks the lane up per call."""
    if _accel.LaneMethod is None:
        pytest.skip("the C speedups are not built")

    def body(self: Any, item: object) -> str:
        return "body"

    class Client:
        __slots__ = ("__dict__", "_lane")
        discard = _accel.LaneMethod("_lane", body)

    class Facade:
        discard = _accel.LaneMethod("_client_discard", body)

    relay = _accel.Relay(set().discard)
    client, facade = Client(), Facade()
    client._lane = None
    facade._client_discard = client.discard  # (no lane yet: a bound method)
    assert inspect.ismethod(client.discard) and inspect.ismethod(facade.discard)
    assert facade.discard(1) == "body"
    client._lane = relay.call
    assert client.discard == relay.call and facade.discard == relay.call
    assert type(facade.discard).__name__ == "builtin_function_or_method"
    client._lane = lambda item: "python lane"
    assert inspect.ismethod(client.discard) and client.discard(1) == "python lane"
    assert facade.discard(1) == "python lane"
