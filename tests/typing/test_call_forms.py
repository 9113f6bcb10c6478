"""The convenience commands take the official client's two call forms, with real signatures.

``subscribe(on_message, topic, ...)`` returns the command id, ``subscribe(topic, ...)`` a
MessageStream (``sow_delete*``: the stats ack). The binding is tested without a server
(:func:`ampsclient.calls.bind`, :func:`ampsclient.convenience.build_command`), then each form
against the reference server.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Iterator
from typing import Any

import pytest

import ampsclient
from ampsclient import AsyncClient, Client, Message, MessageStream
from ampsclient.calls import UNSET, bind
from ampsclient.convenience import AsyncCommands, build_command
from ampsclient.ha.client import AsyncHAClient
from ampsclient.sync import HAClient
from ampsclient.sync_convenience import SyncCommands
from ampsclient_server_stub.testing import wait_for

METHODS = [
    "subscribe",
    "delta_subscribe",
    "bookmark_subscribe",
    "sow",
    "sow_and_subscribe",
    "sow_and_delta_subscribe",
    "sow_delete",
    "sow_delete_by_keys",
    "sow_delete_by_data",
]
SUB = ("topic", "filter", "options", "timeout", "sub_id")
SOW_TOPIC = "/ADMIN/bookmark_store"  # a SOW topic of the default configuration


def handler(message: Message) -> None:
    """A handler for the binding tests (never called there)."""


def _slots(*given: object) -> tuple[object, tuple[object, ...]]:
    """The implementation's parameters for positional arguments ``given`` (UNSET after)."""
    padded = [*given, *[UNSET] * (len(SUB) + 1 - len(given))]
    return padded[0], tuple(padded[1:])


# ------------------------------------------------------------------------------ binding
def test_handler_form_binds_by_position() -> None:
    first, rest = _slots(handler, "t", "/x>1", "oof", 500, "s1")
    assert bind("subscribe", SUB, first, rest) == (
        handler,
        {"topic": "t", "filter": "/x>1", "options": "oof", "timeout": 500, "sub_id": "s1"},
    )


def test_stream_form_shifts_positional_arguments_one_place() -> None:
    first, rest = _slots("t", "/x>1", "oof", 500, "s1")
    assert bind("subscribe", SUB, first, rest) == (
        None,
        {"topic": "t", "filter": "/x>1", "options": "oof", "timeout": 500, "sub_id": "s1"},
    )


def test_stream_form_keeps_keyword_arguments_in_place() -> None:
    # subscribe("t", "/x>1", sub_id="s1"): slot ``options`` is a gap, sub_id came by keyword
    first = "t"
    rest = ("/x>1", UNSET, UNSET, UNSET, "s1")
    assert bind("subscribe", SUB, first, rest) == (
        None,
        {"topic": "t", "sub_id": "s1"} | {"filter": "/x>1"},
    )
    # subscribe("t", timeout=5): the value in ``timeout``'s slot stays the timeout
    assert bind("subscribe", SUB, "t", (UNSET, UNSET, UNSET, 5, UNSET)) == (
        None,
        {"topic": "t", "timeout": 5},
    )
    # explicit None is a value, not a gap: subscribe("t", None, None, 0, "s")
    assert bind("subscribe", SUB, "t", (None, None, 0, "s", UNSET))[1] == {
        "topic": "t",
        "filter": None,
        "options": None,
        "timeout": 0,
        "sub_id": "s",
    }


def test_keyword_only_calls() -> None:
    assert bind("subscribe", SUB, UNSET, ("t", UNSET, UNSET, UNSET, UNSET)) == (
        None,
        {"topic": "t"},
    )
    assert bind("subscribe", SUB, handler, ("t", UNSET, UNSET, UNSET, UNSET)) == (
        handler,
        {"topic": "t"},
    )
    assert bind("subscribe", SUB, UNSET, ("t",) + (UNSET,) * 4, {"bookmark": "0"})[1] == {
        "topic": "t",
        "bookmark": "0",
    }


def test_bad_calls_raise_type_error_naming_the_method() -> None:
    with pytest.raises(TypeError, match=r"subscribe\(\) takes at most 5 positional"):
        bind("subscribe", SUB, "t", ("f", "o", 1, "s", "extra"))
    with pytest.raises(TypeError, match=r"subscribe\(\) missing required argument: 'topic'"):
        bind("subscribe", SUB, handler, (UNSET,) * 5)
    with pytest.raises(TypeError, match="'bookmark'"):
        bind(
            "bookmark_subscribe",
            ("topic", "bookmark"),
            "t",
            (UNSET, UNSET),
            required=("topic", "bookmark"),
        )


def test_commands_built_from_the_official_positions() -> None:
    # sow_and_subscribe(topic, filter, batch_size, oof_enabled, timeout, ...): the fifth
    # argument is the timeout (it was send_empties before the signatures were typed)
    p = bind(
        "sow_and_subscribe",
        ("topic", "filter", "batch_size", "oof_enabled", "timeout"),
        "t",
        ("/x>1", 5, True, 700),
    )[1]
    cmd = build_command("sow_and_subscribe", p, None)
    assert cmd.fields["t"] == "t"
    assert cmd.fields["bs"] == 5
    assert cmd.timeout_ms == 700
    assert cmd.fields["o"] == "oof"
    empties = build_command("sow_and_delta_subscribe", {"topic": "t", "send_empties": False}, None)
    assert empties.fields["o"] == "no_empties"
    default = build_command("sow_and_delta_subscribe", {"topic": "t"}, None)
    assert default.fields["o"] == "no_empties"  # the official default
    sent = build_command("sow_and_delta_subscribe", {"topic": "t", "send_empties": True}, None)
    assert sent.fields.get("o") is None
    both = {"topic": "t", "oof_enabled": True, "options": "conflation=1s"}
    ordered = build_command("sow_and_delta_subscribe", both, None)
    assert ordered.fields["o"] == "oof,no_empties,conflation=1s"  # the official order
    assert build_command("sow", {"topic": "t"}, None).fields["bs"] == 10


# --------------------------------------------------------------------------- signatures
@pytest.mark.parametrize("name", METHODS)
def test_sync_and_async_declare_the_same_forms(name: str) -> None:
    forms_async = typing.get_overloads(getattr(AsyncCommands, name))
    forms_sync = typing.get_overloads(getattr(SyncCommands, name))
    assert len(forms_async) == len(forms_sync) == 2
    for a, s in zip(forms_async, forms_sync, strict=True):
        sig_a, sig_s = inspect.signature(a), inspect.signature(s)
        assert sig_a.parameters == sig_s.parameters
        assert sig_a.return_annotation == sig_s.return_annotation
    handler_form, stream_form = (inspect.signature(f) for f in forms_async)
    # the stream form is the handler form without its first parameter
    assert list(handler_form.parameters)[:2] == ["self", "on_message"]
    assert [p for p in handler_form.parameters if p != "on_message"] == list(stream_form.parameters)
    assert handler_form.return_annotation == "str"
    assert stream_form.return_annotation in ("MessageStream", "Message")


def _public_classes() -> list[type]:
    """The classes of the package face (exceptions aside) and the HA clients."""
    found = [AsyncHAClient, HAClient]
    for name in ampsclient.__all__:
        value = getattr(ampsclient, name)
        if isinstance(value, type) and not issubclass(value, BaseException):
            found.append(value)
    return found


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_no_public_method_takes_star_args_and_star_kwargs(cls: type) -> None:
    for name, member in inspect.getmembers(cls, callable):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, type) or (name == "__init__" and "__init__" not in vars(cls)):
            continue  # nested classes; an __init__ inherited from object or enum
        if getattr(member, "__module__", None) in ("typing", "enum", "builtins"):
            continue  # what Protocol and Enum put there, not ours
        try:
            signature = inspect.signature(member)
        except (TypeError, ValueError):  # a builtin without a signature
            continue
        kinds = {p.kind for p in signature.parameters.values()}
        assert (
            not {
                inspect.Parameter.VAR_POSITIONAL,
                inspect.Parameter.VAR_KEYWORD,
            }
            <= kinds
        ), f"{cls.__name__}.{name}{signature}"


def test_the_scan_sees_the_clients() -> None:
    names = {c.__name__ for c in _public_classes()}
    assert {"AsyncClient", "Client", "AsyncHAClient", "HAClient", "Command", "Message"} <= names


# ---------------------------------------------------------------- against the server
@pytest.fixture
def client(server_uri: str) -> Iterator[Client]:
    with Client("call-forms") as c:
        c.connect(server_uri)
        c.logon(5000)
        yield c


@pytest.mark.integration
def test_subscribe_both_forms(client: Client) -> None:
    got: list[Message] = []
    sub_id = client.subscribe(got.append, "forms", "/n > 0", None, 5000, "by-handler")
    assert sub_id == "by-handler"
    stream = client.subscribe("forms", "/n > 0", None, 5000, "by-stream")
    assert isinstance(stream, MessageStream)
    keyword = client.subscribe(
        topic="forms", on_message=got.append, filter="/n > 0", sub_id="by-keyword"
    )
    assert keyword == "by-keyword"
    for n in range(3):
        client.publish("forms", json.dumps({"n": n}))
    client.flush(5000)
    wait_for(lambda: len(got) == 4, timeout=5.0, what="two subscriptions x two messages")
    assert sorted((m.get_sub_id(), m.json()["n"]) for m in got) == [
        ("by-handler", 1),
        ("by-handler", 2),
        ("by-keyword", 1),
        ("by-keyword", 2),
    ]
    first, second = next(stream.timeout(5000)), next(stream)
    assert first is not None
    assert [first.json()["n"], second.json()["n"]] == [1, 2]
    assert first.get_sub_id() == "by-stream"
    stream.close()


@pytest.mark.integration
def test_sow_and_sow_delete_both_forms(client: Client) -> None:
    for i in range(3):
        client.publish(SOW_TOPIC, {"clientName": "forms", "subId": f"s{i}", "bookmark": "1|1|"})
    client.flush(5000)
    got: list[Message] = []
    cid = client.sow(got.append, SOW_TOPIC, "/clientName = 'forms'", 2, 5000)
    assert isinstance(cid, str)
    wait_for(lambda: any(m.get_command() == "group_end" for m in got), timeout=5.0, what="end")
    streamed = list(client.sow(SOW_TOPIC, "/clientName = 'forms'", 2, 5000))
    assert sorted(m.json()["subId"] for m in got if m.get_command() == "sow") == ["s0", "s1", "s2"]
    assert sorted(m.json()["subId"] for m in streamed if m.get_command() == "sow") == [
        "s0",
        "s1",
        "s2",
    ]
    stats = client.sow_delete(SOW_TOPIC, "/subId = 's0'", 5000)
    assert isinstance(stats, Message)
    assert stats.get_records_deleted() == 1
    acks: list[Message] = []
    cid = client.sow_delete(acks.append, SOW_TOPIC, "/clientName = 'forms'", 5000)
    assert isinstance(cid, str)
    wait_for(lambda: any(m.get_ack_type() == "stats" for m in acks), timeout=5.0, what="stats")
    assert [m.get_records_deleted() for m in acks if m.get_ack_type() == "stats"] == [2]


@pytest.mark.integration
def test_sow_and_subscribe_positional_timeout_and_oof(client: Client) -> None:
    client.publish(SOW_TOPIC, {"clientName": "oof", "subId": "a", "bookmark": "keep"})
    client.flush(5000)
    got: list[Message] = []
    client.sow_and_subscribe(got.append, SOW_TOPIC, "/bookmark = 'keep'", 10, True, 5000)
    wait_for(lambda: any(m.get_command() == "group_end" for m in got), timeout=5.0, what="end")
    client.publish(SOW_TOPIC, {"clientName": "oof", "subId": "a", "bookmark": "changed"})
    wait_for(lambda: any(m.get_command() == "oof" for m in got), timeout=5.0, what="oof")
    assert [m.get_command() for m in got] == ["group_begin", "sow", "group_end", "oof"]


@pytest.mark.integration
def test_a_bad_call_is_refused_before_anything_is_sent(client: Client) -> None:
    with pytest.raises(TypeError, match="at most 5 positional"):
        client.subscribe("forms", "/n > 0", None, 5000, "s", "one too many")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'handler'"):
        client.subscribe("forms", handler=print)  # type: ignore[call-overload]
    client.flush(5000)  # the connection is untouched


@pytest.mark.integration
async def test_async_client_both_forms(server_uri: str) -> None:
    async with AsyncClient("async-forms") as c:
        await c.connect(server_uri)
        await c.logon(5000)
        stream = await c.subscribe("async-forms", sub_id="s")
        got: list[Message] = []
        sub_id = await c.subscribe(got.append, "async-forms", None, None, 5000, "h")
        assert sub_id == "h"
        c.publish("async-forms", {"n": 1})
        await c.flush(5000)
        message = await stream.__anext__()
        assert message.json() == {"n": 1}
        assert message.get_sub_id() == "s"
        deleted: Any = await c.sow_delete(SOW_TOPIC, "/clientName = 'nobody'")
        assert deleted.get_records_deleted() == 0


def test_ha_client_options_are_the_async_clients_keywords() -> None:
    """``HAClient(**options)`` is typed by ``HAClientOptions``: the same keywords, no drift."""
    from ampsclient.sync import HAClientOptions

    keyword_only = [
        name
        for name, p in inspect.signature(AsyncHAClient.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert sorted(HAClientOptions.__annotations__) == sorted(keyword_only)
    assert HAClientOptions.__required_keys__ == frozenset()


@pytest.mark.integration
def test_publish_takes_the_official_positional_arguments(server_uri: str) -> None:
    """``publish(topic, data, expiration=None, correlation_id=None, sow_key=None)``: all
    positional, as in the official client (the C publish lanes hand such calls to Python)."""
    with Client("pub-forms") as plain, HAClient("ha-pub-forms") as ha:
        plain.connect(server_uri)
        plain.logon(5000)
        ha.get_server_chooser().add(server_uri)
        ha.connect_and_logon()
        stream = plain.subscribe("pub-forms", timeout=5000)
        plain.publish("pub-forms", '{"n":1}', None, "cid-plain")
        plain.flush(5000)
        seq = ha.publish("pub-forms", '{"n":2}', None, "cid-ha")
        assert seq > 0
        ha.publish_flush(5000)
        got = [next(stream.timeout(5000)) for _ in range(2)]
        # two connections: either may arrive first
        assert sorted((m.json()["n"], m.get_correlation_id()) for m in got if m is not None) == [
            (1, "cid-plain"),
            (2, "cid-ha"),
        ]
        stream.close()
