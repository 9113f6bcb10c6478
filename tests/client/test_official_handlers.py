"""Disconnect handlers and connection state listeners written for the official client, run
with ours and (where installed) with the official one against the reference server.

* The official ``DisconnectHandler`` is called with the client only, on a thread where it may
  reconnect with the blocking methods; ours calls a one-argument handler the same way (it
  raised ``TypeError`` on the receive path) and a two-argument one with the exception too.
* A state listener written for the official ``True``/``False`` hears the same sequence for
  connect, logon, disconnect, close and a dropped connection (reported twice, and once more
  per send that finds it down).
* ``retry_on_disconnect`` (default ``True``): a send after a drop calls the disconnect
  handler again and goes out if it reconnected.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import pytest

from ampsclient_server_stub import ServerThread
from ampsclient_server_stub.testing import LoopbackProxy, wait_for

pytestmark = pytest.mark.integration

CLIENTS = ["ampsclient", "AMPS"]


def module(name: str) -> Any:
    return pytest.importorskip("AMPS") if name == "AMPS" else importlib.import_module(name)


@pytest.mark.parametrize("name", CLIENTS)
def test_a_one_argument_disconnect_handler_runs_and_may_reconnect(
    server: ServerThread, name: str
) -> None:
    amps = module(name)
    with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
        uri = f"tcp://127.0.0.1:{proxy.port}/amps/json"
        client = amps.Client(f"{name}-one-arg")
        calls: list[tuple[bool, str]] = []
        done = threading.Event()

        def on_disconnect(c: Any) -> None:  # the official DisconnectHandler's form
            try:
                c.connect(uri)
                c.logon()
                calls.append((c is client, "reconnected"))
            except Exception as exc:
                calls.append((c is client, repr(exc)))
            done.set()

        client.set_disconnect_handler(on_disconnect)
        client.connect(uri)
        client.logon()
        try:
            proxy.cut()
            assert done.wait(10), "the disconnect handler never ran"  # before: TypeError
            assert calls == [(True, "reconnected")]
            stream = client.subscribe("after", timeout=5000)
            client.publish("after", '{"n":1}')
            assert next(iter(stream.timeout(5000))).get_data() == '{"n":1}'
        finally:
            client.close()


def test_a_two_argument_disconnect_handler_gets_the_error(server: ServerThread) -> None:
    import ampsclient

    with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
        client = ampsclient.Client("two-args")
        seen: list[tuple[object, BaseException | None]] = []
        client.set_disconnect_handler(lambda c, exc: seen.append((c, exc)))
        client.connect(f"tcp://127.0.0.1:{proxy.port}/amps/json")
        client.logon()
        try:
            proxy.cut()
            wait_for(lambda: bool(seen), 10, "the disconnect handler")
            assert seen[0][0] is client
            assert isinstance(seen[0][1], ampsclient.DisconnectedException)
        finally:
            client.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_state_listener_sequence_of_connect_disconnect_and_close(
    server: ServerThread, name: str
) -> None:
    amps = module(name)
    uri = server.uri("tcp", "json")
    states: list[bool] = []
    steps: list[tuple[str, list[bool]]] = []

    def step(label: str) -> None:
        steps.append((label, states[:]))
        states.clear()

    never = amps.Client(f"{name}-never")
    never.add_connection_state_listener(lambda s: states.append(bool(s)))
    never.close()
    step("close, never connected")
    client = amps.Client(f"{name}-states")
    client.add_connection_state_listener(lambda s: states.append(bool(s)))
    client.disconnect()
    step("disconnect, never connected")
    client.connect(uri)
    step("connect")
    client.logon()
    step("logon")
    client.disconnect()
    step("disconnect, connected")  # before: one False
    client.disconnect()
    step("disconnect again")  # before: nothing
    client.connect(uri)
    client.logon()
    states.clear()
    client.close()
    step("close, connected")
    client.close()
    step("close again")
    assert steps == [
        ("close, never connected", [False]),
        ("disconnect, never connected", [False]),
        ("connect", [True]),
        ("logon", [True]),
        ("disconnect, connected", [False, False]),
        ("disconnect again", [False]),
        ("close, connected", [False, False]),
        ("close again", [False]),
    ]


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize("with_handler", [False, True])
def test_state_listener_on_a_dropped_connection(
    server: ServerThread, name: str, with_handler: bool
) -> None:
    """A drop is reported twice (again after a disconnect handler that did not reconnect, or
    at once without one) and once more for each send that finds the connection down."""
    amps = module(name)
    with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
        uri = f"tcp://127.0.0.1:{proxy.port}/amps/json"
        states: list[bool] = []
        calls: list[int] = []
        client = amps.Client(f"{name}-dropped")
        client.add_connection_state_listener(lambda s: states.append(bool(s)))
        if with_handler:
            client.set_disconnect_handler(lambda c: calls.append(1))
        client.connect(uri)
        client.logon()
        states.clear()
        proxy.cut()
        wait_for(lambda: len(states) >= 2, 10, "the drop")  # before: one False
        for _ in range(2):
            with pytest.raises(amps.DisconnectedException):
                client.publish("t", "{}")
        client.connect(uri)  # a marker: nothing reported after it belongs to the drop
        try:
            assert states == [False, False, False, False, True]  # before: [False, True]
            assert calls == ([1, 1, 1] if with_handler else [])  # the drop, then each send
        finally:
            client.close()


@pytest.mark.parametrize("name", CLIENTS)
@pytest.mark.parametrize("retry", [True, False])
def test_retry_on_disconnect_calls_the_handler_again_and_sends(
    server: ServerThread, name: str, retry: bool
) -> None:
    """The official default (``True``): a publish after a drop calls the disconnect handler
    again, which reconnects this time, and the publish goes out; with ``False`` it raises."""
    amps = module(name)
    with LoopbackProxy("127.0.0.1", server.tcp_port) as proxy:
        uri = f"tcp://127.0.0.1:{proxy.port}/amps/json"
        client = amps.Client(f"{name}-retry-{retry}")
        assert client.get_retry_on_disconnect() is True  # before: False
        client.set_retry_on_disconnect(retry)  # before: True raised UsageError
        calls: list[int] = []
        first_call = threading.Event()

        def on_disconnect(c: Any) -> None:
            calls.append(1)
            if len(calls) == 2:  # not on the drop itself: on the publish's call
                c.connect(uri)
                c.logon()
            first_call.set()

        client.set_disconnect_handler(on_disconnect)
        client.connect(uri)
        client.logon()
        try:
            proxy.cut()
            assert first_call.wait(10)
            if retry:
                stream = client.subscribe("retried", timeout=5000)  # after the reconnect
                client.publish("retried", '{"n":1}')
                assert next(iter(stream.timeout(5000))).get_data() == '{"n":1}'
                assert len(calls) == 2
            else:
                with pytest.raises(amps.DisconnectedException):
                    client.publish("retried", '{"n":1}')
                assert calls == [1]
        finally:
            client.close()


@pytest.mark.parametrize("name", CLIENTS)
def test_a_closed_client_connects_again(server: ServerThread, name: str) -> None:
    """After ``close()`` the official client raises ``DisconnectedException`` for commands
    and may connect again; ours did neither (``UsageError``, and a connect that failed)."""
    amps = module(name)
    uri = server.uri("tcp", "json")
    client = amps.Client(f"{name}-reopened")
    client.connect(uri)
    client.logon()
    client.close()
    with pytest.raises(amps.DisconnectedException):
        client.flush()
    with pytest.raises(amps.DisconnectedException):
        client.publish("t", "{}")
    client.connect(uri)
    client.logon()
    try:
        stream = client.subscribe("again", timeout=5000)
        client.publish("again", '{"n":1}')
        assert next(iter(stream.timeout(5000))).get_data() == '{"n":1}'
    finally:
        client.close()


def _one(client: Any) -> None: ...
def _two(client: Any, exc: Any) -> None: ...
def _optional(client: Any, exc: Any = None) -> None: ...
def _bound_defaults(client: Any, calls: Any = (), first: Any = None) -> None: ...
def _star(*args: Any) -> None: ...


class _Handler:
    def __call__(self, client: Any) -> None: ...

    def method(self, client: Any, exc: Any) -> None: ...


@pytest.mark.parametrize(
    ("handler", "with_error"),
    [
        (_one, False),
        (_two, True),
        (_optional, False),  # the official form: defaults are the script's own
        (_bound_defaults, False),  # (a loop's values bound as defaults: before, exc went there)
        (_star, False),
        (_Handler(), False),
        (_Handler().method, True),
        (print, False),
    ],
)
def test_the_disconnect_handler_form_is_read_from_required_parameters(
    handler: Any, with_error: bool
) -> None:
    from ampsclient.disconnects import takes_error

    assert takes_error(handler) is with_error
